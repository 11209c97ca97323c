"""The typed statistics (``orderer.stats``) and where protobuf stops (issue 29, item 2).

- any :class:`~orderer.stats.Stats` the wire can carry survives it (``stats_to_pb`` then
  ``stats_from_pb``), and so does any valid :class:`~orderer.config.OrdererConfig`, flow
  control included;
- ``Stats.to_json()`` of a live service is, key for key and in the same order, what
  ``evb stats --json`` printed before the values were typed (the layout of the mapping the
  client made of the ``GetStats`` message then, rebuilt here from the message);
- protobuf stays in ``orderer.wire.convert`` and the servicer: no other module of the service
  reads a message, and ``orderer.stats`` and ``orderer.wire.limits`` load no protobuf;
- each control call of the client is a plain function, blocking and ``*_async``, the two
  taking the same parameters.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import orderer.client
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import (
    begin_run_async,
    commit_async,
    configure_async,
    control,
    end_run_async,
    get_stats_async,
)
from orderer.config import (
    LATE_POLICIES,
    SOURCE_COUNTERS,
    TOTAL_COUNTERS,
    FlowControl,
    OrdererConfig,
)
from orderer.stats import (
    BarrierCounts,
    BarrierRecord,
    Connection,
    ConsumerState,
    OutOfOrder,
    RunSpan,
    SliceRole,
    SourceStats,
    Stats,
)
from orderer.wire import convert
from tests.service.harness import run, serving_channel, target
from tests.service.test_diagnostics import (
    _acked,
    _request,
    _set_source_state,
    _three_barriers,
    _until,
)
from tests.service.test_server import _Stream

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ 1. the wire keeps every value

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
DOUBLE = st.floats(allow_nan=False)
"""Any double but NaN (never equal to itself, so no value holding one compares equal)."""
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
"""A protobuf string: UTF-8, so no lone surrogates."""
SECONDS = st.floats(min_value=0.0, exclude_min=True, allow_nan=False, allow_infinity=False)


def _optional(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


def _u32_map(values: st.SearchStrategy[int]) -> st.SearchStrategy[dict[int, int]]:
    """A protobuf ``map<uint32, ...>`` as ``stats_from_pb`` gives it: by key, ascending."""
    return st.dictionaries(U32, values, max_size=4).map(lambda d: dict(sorted(d.items())))


@st.composite
def flow_controls(draw: st.DrawFn) -> FlowControl:
    global_xoff = draw(st.integers(1, 2**64 - 1))
    queue_xoff = draw(st.integers(1, 2**64 - 1))
    return FlowControl(
        global_xoff=global_xoff,
        global_xon=draw(st.integers(1, global_xoff)),
        queue_xoff=queue_xoff,
        queue_xon=draw(st.integers(1, queue_xoff)),
    )


def configs() -> st.SearchStrategy[OrdererConfig]:
    return st.builds(
        OrdererConfig,
        build_window=SECONDS,
        startup_delay=st.floats(min_value=0.0, allow_nan=False, allow_infinity=False),
        barrier_timeout=_optional(SECONDS),
        source_timeout=_optional(SECONDS),
        late_policy=st.sampled_from(LATE_POLICIES),
        reset_on_begin_run=st.booleans(),
        sources=st.lists(U32, unique=True, max_size=6).map(tuple),
        flow_control=st.just(FlowControl()) | flow_controls(),
    )


def source_stats(source: int) -> st.SearchStrategy[SourceStats]:
    return st.builds(
        SourceStats,
        source=st.just(source),
        **{name: U64 for name in SOURCE_COUNTERS},
        missing=U64,
        queued=U64,
        queued_bytes=U64,
        oldest_ts=_optional(U64),
        newest_ts=_optional(U64),
        last_arrival=_optional(DOUBLE),
        paused=st.booleans(),
        ended=st.booleans(),
        dead=st.booleans(),
        marked_dead=st.booleans(),
        watermark=_optional(U64),
        out_of_order_last=st.lists(st.builds(OutOfOrder, U64, U64, DOUBLE), max_size=3).map(tuple),
    )


@st.composite
def all_stats(draw: st.DrawFn) -> Stats:
    """Any ``Stats`` the proto can carry, as ``stats_from_pb`` makes them: the sources by id,
    ascending; the consumers by name, sorted, each with the lag ``stats_from_pb`` counts."""
    ids = sorted(draw(st.lists(U32, unique=True, max_size=5)))
    next_offset = draw(U64)
    names = sorted(draw(st.lists(TEXT, unique=True, max_size=4)))
    consumers = {}
    for name in names:
        committed = draw(U64)
        consumers[name] = ConsumerState(
            name=name,
            committed=committed,
            lag=max(0, next_offset - committed),
            lag_seconds=draw(DOUBLE),
            last_commit=draw(_optional(DOUBLE)),
        )
    return Stats(
        sources={source: draw(source_stats(source)) for source in ids},
        barriers=draw(
            st.builds(
                BarrierCounts,
                complete=U64,
                incomplete=U64,
                homogeneous=U64,
                heterogeneous=U64,
                by_type=_u32_map(U64),
            )
        ),
        next_offset=next_offset,
        high_water_mark=draw(_optional(U64)),
        queued=draw(U64),
        now=draw(DOUBLE),
        wall_time=draw(DOUBLE),
        run_ended=draw(st.booleans()),
        run=draw(U64),
        run_start_offset=draw(U64),
        runs=tuple(draw(st.lists(st.builds(RunSpan, U64, U64, _optional(U64)), max_size=4))),
        config=draw(configs()),
        barrier_log=tuple(
            draw(
                st.lists(
                    st.builds(
                        BarrierRecord,
                        offset=U64,
                        t=DOUBLE,
                        complete=st.booleans(),
                        homogeneous=st.booleans(),
                        types=_u32_map(U32),
                        missing=st.lists(U32, unique=True, max_size=3).map(
                            lambda m: tuple(sorted(m))
                        ),
                    ),
                    max_size=3,
                )
            )
        ),
        connections=tuple(
            draw(
                st.lists(
                    st.builds(
                        Connection,
                        peer=TEXT,
                        sources=st.lists(U32, unique=True, max_size=3).map(
                            lambda s: tuple(sorted(s))
                        ),
                        since=DOUBLE,
                        messages=U64,
                        bytes=U64,
                        acked=_u32_map(U64),
                    ),
                    max_size=3,
                )
            )
        ),
        consumers=consumers,
        slicing=draw(slice_roles()),
    )


@st.composite
def slice_roles(draw: st.DrawFn) -> SliceRole:
    """Any place in a run the wire carries: orderer K of N (N from 1), T or none, peers."""
    orderers = draw(st.integers(1, 2**32 - 1))
    return SliceRole(
        orderers=orderers,
        index=draw(st.integers(0, orderers - 1)),
        slice_ticks=draw(_optional(st.integers(1, 2**64 - 1))),
        peers=tuple(draw(st.lists(TEXT, max_size=3))),
    )


def _wire(message: Any) -> Any:
    """``message`` as the other end reads it: encoded, then decoded."""
    return type(message).FromString(message.SerializeToString())


@settings(max_examples=200, deadline=None)
@given(all_stats())
def test_any_stats_survive_the_wire(stats: Stats) -> None:
    back = convert.stats_from_pb(_wire(convert.stats_to_pb(stats)))
    assert back == stats
    assert list(back.sources) == list(stats.sources)  # ascending, as sent
    assert list(back.consumers) == list(stats.consumers)  # sorted by name, as sent
    assert back.to_json() == stats.to_json()


@settings(max_examples=200, deadline=None)
@given(configs())
def test_any_config_survives_the_wire(config: OrdererConfig) -> None:
    assert convert.config_from_pb(convert.config_to_pb(config)) == config
    assert convert.config_from_pb(_wire(convert.config_to_pb(config))) == config


def test_a_config_without_flow_control_on_the_wire_reads_as_the_defaults() -> None:
    """A server older than ``OrdererConfig.flow_control`` sends none: NSCLDAQ's thresholds."""
    config = OrdererConfig(flow_control=FlowControl(global_xoff=9, global_xon=8))
    message = convert.config_to_pb(config)
    message.ClearField("flow_control")
    assert convert.config_from_pb(message) == OrdererConfig()


# ------------------------------------------- 2. to_json() is the layout ``evb stats --json`` had


def _layout_before(message: pb.Stats) -> dict[str, Any]:
    """What ``evb stats --json`` printed for ``message`` before the values were typed: the
    mapping the client library made of the ``GetStats`` reply (``stats_to_mapping`` and
    ``config_to_mapping`` of 982326f^), written again here as the reference."""

    def optional(holder: Any, field: str) -> Any:
        return getattr(holder, field) if holder.HasField(field) else None

    sources: dict[str, dict[str, Any]] = {}
    for source in message.sources:
        entry: dict[str, Any] = {name: getattr(source, name) for name in SOURCE_COUNTERS}
        entry.update(
            queued=source.queued,
            queued_bytes=source.queued_bytes,
            oldest_ts=optional(source, "oldest_ts"),
            newest_ts=optional(source, "newest_ts"),
            last_arrival=optional(source, "last_arrival"),
            paused=source.paused,
            ended=source.ended,
            dead=source.dead,
            marked_dead=source.marked_dead,
            watermark=optional(source, "watermark"),
            out_of_order_last=[
                {"previous": o.previous, "timestamp": o.timestamp, "t": o.t}
                for o in source.out_of_order_last
            ],
        )
        sources[str(source.source)] = entry
    counts = ("complete", "incomplete", "homogeneous", "heterogeneous")
    barriers: dict[str, Any] = {name: getattr(message.barriers, name) for name in counts}
    barriers["by_type"] = {str(k): v for k, v in sorted(message.barriers.by_type.items())}
    config = message.config
    return {
        "totals": {name: sum(s[name] for s in sources.values()) for name in TOTAL_COUNTERS},
        "barriers": barriers,
        "missing": {str(m.source): m.missing for m in message.sources if m.missing},
        "sources": sources,
        "next_offset": message.next_offset,
        "high_water_mark": optional(message, "high_water_mark"),
        "queued": message.queued,
        "now": message.now,
        "wall_time": message.wall_time,
        "run_ended": message.run_ended,
        "run": message.run,
        "run_start_offset": message.run_start_offset,
        "runs": [
            {"run": r.run, "start_offset": r.start_offset, "end_offset": optional(r, "end_offset")}
            for r in message.runs
        ],
        "config": {
            "build_window": config.build_window,
            "startup_delay": config.startup_delay,
            "barrier_timeout": optional(config, "barrier_timeout"),
            "source_timeout": (
                config.source_timeout if config.HasField("source_timeout") else "off"
            ),
            "late_policy": config.late_policy,
            "sources": list(config.sources),
            "reset_on_begin_run": config.reset_on_begin_run,
        },
        "barrier_log": [
            {
                "offset": b.offset,
                "t": b.t,
                "complete": b.complete,
                "homogeneous": b.homogeneous,
                "types": {str(k): v for k, v in sorted(b.types.items())},
                "missing": list(b.missing),
            }
            for b in message.barrier_log
        ],
        "connections": [
            {
                "peer": c.peer,
                "sources": list(c.sources),
                "since": c.since,
                "messages": c.messages,
                "bytes": c.bytes,
                "acked": {str(k): v for k, v in sorted(c.acked.items())},
            }
            for c in message.connections
        ],
        "consumers": {
            c.consumer: {
                "committed": c.offset,
                "lag": max(0, message.next_offset - c.offset),
                "lag_seconds": c.lag_seconds,
                "last_commit": optional(c, "last_commit"),
            }
            for c in message.consumers
        },
        # added with the scale-out (docs/scale-out.md): a plain orderer is orderer 0 of 1
        "slicing": {
            "orderers": message.slicing.orderers or 1,
            "index": message.slicing.index,
            "slice_ticks": message.slicing.slice_ticks or None,
            "peers": list(message.slicing.peers),
        },
    }


TOP_KEYS = [
    "totals",
    "barriers",
    "missing",
    "sources",
    "next_offset",
    "high_water_mark",
    "queued",
    "now",
    "wall_time",
    "run_ended",
    "run",
    "run_start_offset",
    "runs",
    "config",
    "barrier_log",
    "connections",
    "consumers",
    "slicing",
]
TOTALS_KEYS = ["received", "emitted", "late", "dropped", "duplicates", "out_of_order"]
BARRIERS_KEYS = ["complete", "incomplete", "homogeneous", "heterogeneous", "by_type"]
SOURCE_KEYS = [
    "received",
    "emitted",
    "late",
    "dropped",
    "duplicates",
    "out_of_order",
    "max_lateness",
    "barriers",
    "queued",
    "queued_bytes",
    "oldest_ts",
    "newest_ts",
    "last_arrival",
    "paused",
    "ended",
    "dead",
    "marked_dead",
    "watermark",
    "out_of_order_last",
]
OUT_OF_ORDER_KEYS = ["previous", "timestamp", "t"]
RUN_KEYS = ["run", "start_offset", "end_offset"]
CONFIG_KEYS = [
    "build_window",
    "startup_delay",
    "barrier_timeout",
    "source_timeout",
    "late_policy",
    "sources",
    "reset_on_begin_run",
]
BARRIER_RECORD_KEYS = ["offset", "t", "complete", "homogeneous", "types", "missing"]
CONNECTION_KEYS = ["peer", "sources", "since", "messages", "bytes", "acked"]
CONSUMER_KEYS = ["committed", "lag", "lag_seconds", "last_commit"]
SLICING_KEYS = ["orderers", "index", "slice_ticks", "peers"]


def _check_layout(layout: dict[str, Any]) -> None:
    """The keys of ``evb stats --json``, in their order; every map key a string."""
    assert list(layout) == TOP_KEYS
    assert list(layout["totals"]) == TOTALS_KEYS
    assert list(layout["barriers"]) == BARRIERS_KEYS
    assert all(isinstance(k, str) for k in layout["barriers"]["by_type"])
    assert all(isinstance(k, str) for k in layout["missing"])
    assert all(isinstance(k, str) for k in layout["sources"])
    for entry in layout["sources"].values():
        assert list(entry) == SOURCE_KEYS
        assert isinstance(entry["out_of_order_last"], list)
        for offender in entry["out_of_order_last"]:
            assert list(offender) == OUT_OF_ORDER_KEYS
    for span in layout["runs"]:
        assert list(span) == RUN_KEYS
    assert list(layout["config"]) == CONFIG_KEYS
    assert isinstance(layout["config"]["sources"], list)
    for record in layout["barrier_log"]:
        assert list(record) == BARRIER_RECORD_KEYS
        assert all(isinstance(k, str) for k in record["types"])
        assert isinstance(record["missing"], list)
    for connection in layout["connections"]:
        assert list(connection) == CONNECTION_KEYS
        assert all(isinstance(k, str) for k in connection["acked"])
        assert isinstance(connection["sources"], list)
    for consumer in layout["consumers"].values():
        assert list(consumer) == CONSUMER_KEYS
    assert list(layout["slicing"]) == SLICING_KEYS


def _printed(layout: dict[str, Any]) -> str:
    """As ``evb stats --json`` prints it (key order and int/float/None spelling included)."""
    return json.dumps(layout, indent=1)


STATS_CONFIG = OrdererConfig(
    build_window=0.05, startup_delay=0.0, barrier_timeout=600.0, source_timeout=None, sources=(1, 2)
)


def test_to_json_of_a_live_service_is_the_layout_evb_stats_json_printed(tmp_path: Path) -> None:
    """A service with every part of the layout filled: barriers resolved complete, incomplete,
    homogeneous and heterogeneous; a source marked dead and missing from one; two runs; a
    stream open; fragments queued, one of them out of order; two consumers."""

    async def body() -> None:
        async with serving_channel(tmp_path, STATS_CONFIG) as (running, channel):
            address = target(running)
            await _three_barriers(channel)
            await _until(channel, lambda s: len(s.barrier_log) == 2, "two barriers")
            await _set_source_state(channel, 2, True)  # releases the third, incomplete
            ended = await end_run_async(address)
            assert (await begin_run_async(address)).start_offset == ended
            await _set_source_state(channel, 2, False)
            config = await configure_async(address, {"build_window": 600.0})
            assert config.build_window == 600.0  # what source 1 sends now waits
            stream = _Stream(channel)
            await stream.write(_request(1, 5, [60, 70, 65], [0, 0, 0]))
            await _acked(stream, 1, 8)
            await commit_async(address, "spark", 3)
            await commit_async(address, "done", ended)

            reply = await pb_grpc.OrdererStub(channel).GetStats(pb.GetStatsRequest(), timeout=30)
            stats = convert.stats_from_pb(reply)
            layout = stats.to_json()
            _check_layout(layout)
            assert _printed(layout) == _printed(_layout_before(reply))
            # every part is there, so that the comparison above compares something
            assert len(layout["runs"]) == 2 and len(layout["connections"]) == 1
            assert {r["complete"] for r in layout["barrier_log"]} == {True, False}
            assert {r["homogeneous"] for r in layout["barrier_log"]} == {True, False}
            assert layout["missing"] == {"2": 1} and len(layout["consumers"]) == 2
            one = layout["sources"]["1"]
            assert (one["queued"], one["oldest_ts"], one["newest_ts"]) == (3, 60, 70)
            assert [o["timestamp"] for o in one["out_of_order_last"]] == [65]
            assert layout["config"]["source_timeout"] == "off"
            assert layout["high_water_mark"] is not None and layout["barriers"]["by_type"]

            # the client's typed answer, and the service's own, print the same way
            _check_layout((await get_stats_async(address)).to_json())
            own = running.service.stats()
            assert isinstance(own, Stats)
            message = convert.stats_to_pb(own)
            assert convert.stats_from_pb(_wire(message)) == own
            assert _printed(own.to_json()) == _printed(_layout_before(message))
            stream.cancel()

    run(body())


# --------------------------------------------------------------- 3. where protobuf is read

_READS_PROTOBUF = re.compile(r"\bpb\.|orderer\._proto|from orderer import _proto")


def test_only_the_servicer_of_the_service_reads_protobuf() -> None:
    service = ROOT / "orderer" / "service"
    modules = sorted(service.rglob("*.py"))
    assert service / "servicer.py" in modules
    readers = [
        str(path.relative_to(service))
        for path in modules
        if path != service / "servicer.py" and _READS_PROTOBUF.search(path.read_text())
    ]
    assert readers == []
    assert _READS_PROTOBUF.search((service / "servicer.py").read_text())  # the check sees it


def test_stats_and_limits_load_no_protobuf() -> None:
    """The operator and the Spark job read statistics and limits without the protobuf runtime
    (limits imports the Cython core, through wire.submit: that is not protobuf)."""
    for module in ("orderer.stats", "orderer.wire.limits"):
        script = (
            f"import sys, {module}\n"
            "loaded = sorted(m for m in sys.modules\n"
            "    if m.startswith('google.protobuf') or m.startswith('orderer._proto'))\n"
            "print(loaded)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", (module, done.stdout)


# ------------------------------------------------------ 4. control calls are plain functions

CONTROL_CALLS = (
    "get_stats",
    "configure",
    "end_run",
    "begin_run",
    "commit",
    "get_committed",
    "delete_consumer",
    "set_source_state",
)


def test_each_control_call_is_a_plain_def_with_an_async_twin_of_the_same_parameters() -> None:
    source = inspect.getsource(control)
    tree = ast.parse(source)
    plain = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    asynchronous = {node.name for node in tree.body if isinstance(node, ast.AsyncFunctionDef)}
    for name in CONTROL_CALLS:
        twin = f"{name}_async"
        assert re.search(rf"^def {name}\(", source, re.MULTILINE), name
        assert re.search(rf"^async def {twin}\(", source, re.MULTILINE), twin
        assert name in plain and twin in asynchronous
        blocking, awaited = getattr(control, name), getattr(control, twin)
        assert (blocking.__name__, awaited.__name__) == (name, twin)
        assert not inspect.iscoroutinefunction(blocking)
        assert inspect.iscoroutinefunction(awaited)
        assert getattr(orderer.client, name) is blocking
        assert getattr(orderer.client, twin) is awaited
        signature, twin_signature = inspect.signature(blocking), inspect.signature(awaited)
        assert signature.parameters == twin_signature.parameters, name
        assert next(iter(signature.parameters)) == "target"
        assert signature.return_annotation == twin_signature.return_annotation
