"""Each payload byte written once: the ordered log keeps where each payload lies in the arrival
log, and every reader of the ordered stream gets exactly the payloads that were acknowledged,
in order.

A real service on loopback takes random runs (payloads of 0 to 64 KiB, barriers, late
fragments, several sources on several streams); then the payloads come back through
``Subscribe``, through the Spark job's ``--path`` read of the data directory
(:func:`orderer.formats.payloads.ordered_batches`), after a crash that lost the ordered log's
tail (recovery rebuilds it, rows and all), and through ``evb replay`` of the data directory,
which carries the payloads themselves through the orderer (not their rows): an independent
path to the same stream."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import end_run_async, subscribe
from orderer.formats import log_format
from orderer.formats import payloads as payloads_module
from orderer.formats.payloads import ArrivalPayloads, ordered_batches, read_ordered_range
from orderer.replay.stream import replay_path
from orderer.wire import convert
from tests.service.harness import run, serving, target

MAX_PAYLOAD = 64 << 10


def payload_of(source: int, index: int, size: int) -> bytes:
    """The payload of a source's ``index``-th fragment: a function of the three, so a payload
    out of place or torn shows."""
    seed = hashlib.blake2b(f"{source}:{index}".encode(), digest_size=8).digest()
    block = (seed * (size // 8 + 1))[:size]
    return bytes(b ^ (i & 0xFF) for i, b in enumerate(block)) if size < 64 else block


@dataclass(frozen=True)
class SourceRun:
    source: int
    timestamps: list[int]
    sizes: list[int]
    barriers: list[int]
    cuts: list[int]
    """Batch sizes the fragments are sent in."""


@st.composite
def runs(draw: st.DrawFn) -> list[SourceRun]:
    sources = draw(st.integers(1, 3))
    out = []
    for source in range(1, sources + 1):
        n = draw(st.integers(1, 40))
        # mostly rising, some behind the others (late once the others moved on)
        steps = draw(st.lists(st.integers(-30, 40), min_size=n, max_size=n))
        timestamps = list(np.maximum(0, 1000 + np.cumsum(steps)).tolist())
        sizes = draw(
            st.lists(
                st.one_of(st.integers(0, 64), st.integers(0, 2048), st.just(MAX_PAYLOAD)),
                min_size=n,
                max_size=n,
            )
        )
        barriers = [0] * n
        if draw(st.booleans()):
            barriers[-1] = 7
        cuts = []
        left = n
        while left:
            cut = draw(st.integers(1, left))
            cuts.append(cut)
            left -= cut
        out.append(SourceRun(source, timestamps, sizes, barriers, cuts))
    return out


async def _send(address: str, run_: SourceRun) -> None:
    """The source's batches on a stream of its own, each acknowledged before the next."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = pb_grpc.OrdererStub(channel).Submit()
        first = 0
        for cut in run_.cuts:
            rows = range(first, first + cut)
            batch = FragmentBatch.from_arrays(
                source=run_.source,
                timestamp=[run_.timestamps[i] for i in rows],
                barrier=[run_.barriers[i] for i in rows],
                payloads=[payload_of(run_.source, i, run_.sizes[i]) for i in rows],
            )
            await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch, first)))
            first += cut
            async for reply in call:
                if reply.WhichOneof("item") == "ack" and reply.ack.durable_sequence >= first:
                    break
        await call.done_writing()
        async for _ in call:
            pass


def _expected(runs_: list[SourceRun]) -> dict[tuple[int, int], list[bytes]]:
    """Per (source, timestamp), the payloads sent with it, in the source's order."""
    expected: dict[tuple[int, int], list[bytes]] = {}
    for r in runs_:
        for i, ts in enumerate(r.timestamps):
            expected.setdefault((r.source, ts), []).append(payload_of(r.source, i, r.sizes[i]))
    return expected


Rows = list[tuple[int, int, bool, bytes]]


def _rows(batches: list) -> Rows:  # type: ignore[type-arg]
    return [
        (int(b.source[i]), int(b.timestamp[i]), bool(b.late[i]), b.payload_of(i))
        for b in batches
        for i in range(len(b))
    ]


def _check_against_sent(rows: Rows, runs_: list[SourceRun]) -> None:
    """Every fragment sent comes out once, each with a payload sent with its (source,
    timestamp), and a source's equal timestamps keep their order."""
    expected = _expected(runs_)
    assert len(rows) == sum(len(r.timestamps) for r in runs_)
    seen: dict[tuple[int, int], int] = {}
    for source, ts, _late, payload in rows:
        k = seen.get((source, ts), 0)
        assert payload == expected[(source, ts)][k], (source, ts, k, len(payload))
        seen[(source, ts)] = k + 1


async def _subscribed(address: str, until: int) -> Rows:
    return _rows([b async for b in subscribe(address, 0, until=until)])


def _log_read(data_dir: Path) -> Rows:
    return _rows([b for s in log_format.ordered_segments(data_dir) for b in ordered_batches(s)])


def _range_read(data_dir: Path, first: int, until: int) -> Rows:
    """What a Spark executor reads of ``[first, until)``, in pieces of at most 7 rows and
    1000 payload bytes (but one when a payload is larger) so that every cut is met."""
    kept = payloads_module.READ_ROWS, payloads_module.READ_BYTES
    payloads_module.READ_ROWS, payloads_module.READ_BYTES = 7, 1000
    try:
        with contextlib.closing(ArrivalPayloads.of_data_dir(data_dir)) as payloads:
            segments = log_format.ordered_segments(data_dir)
            return _rows(list(read_ordered_range(segments, first, until, payloads)))
    finally:
        payloads_module.READ_ROWS, payloads_module.READ_BYTES = kept


CONFIG = OrdererConfig(build_window=0.05, startup_delay=0.0)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs_=runs())
def test_every_reader_returns_the_acknowledged_payloads_in_order(
    tmp_path_factory: pytest.TempPathFactory, runs_: list[SourceRun]
) -> None:
    data_dir = tmp_path_factory.mktemp("run")

    async def live() -> Rows:
        async with serving(data_dir, CONFIG, max_payload_bytes=MAX_PAYLOAD) as running:
            address = target(running)
            await asyncio.gather(*(_send(address, r) for r in runs_))
            end = await end_run_async(address)
            return await _subscribed(address, end)

    served = run(live())
    _check_against_sent(served, runs_)
    assert _log_read(data_dir) == served
    assert _range_read(data_dir, 0, len(served)) == served
    third = len(served) // 3
    assert _range_read(data_dir, third, 2 * third + 1) == served[third : 2 * third + 1]

    # a crash that lost the ordered log's tail: recovery rebuilds it, payload rows and all
    last = log_format.ordered_segments(data_dir)[-1]
    with last.open("r+b") as torn:
        torn.truncate(last.stat().st_size // 2)

    async def recovered() -> Rows:
        async with serving(data_dir, CONFIG, max_payload_bytes=MAX_PAYLOAD) as running:
            return await _subscribed(target(running), len(served))

    assert run(recovered()) == served
    assert _log_read(data_dir) == served

    # evb replay carries the payloads themselves through the orderer: the same stream
    replayed = data_dir.parent / f"{data_dir.name}-replay.arrow"
    replay_path(data_dir, replayed, None, CONFIG)
    with pa.ipc.open_stream(str(replayed)) as reader:
        table = reader.read_all()
    assert [
        (s, ts, late, p)
        for s, ts, late, p in zip(
            table.column("source").to_pylist(),
            table.column("timestamp").to_pylist(),
            table.column("late").to_pylist(),
            table.column("payload").to_pylist(),
            strict=True,
        )
    ] == served


def test_the_data_directory_holds_each_payload_byte_once(tmp_path: Path) -> None:
    """Bytes of the logs on disk per payload byte received, at 1 KiB payloads: the payloads
    once (the arrival log) and about 80 bytes of columns a fragment over both logs."""
    sources, per_source, size = 4, 5000, 1024
    runs_ = [
        SourceRun(s, list(range(0, 10 * per_source, 10)), [size] * per_source, [0] * per_source,
                  [1000] * (per_source // 1000))
        for s in range(1, sources + 1)
    ]

    async def live() -> int:
        async with serving(tmp_path, CONFIG) as running:
            address = target(running)
            await asyncio.gather(*(_send(address, r) for r in runs_))
            return await end_run_async(address)

    assert run(live()) == sources * per_source
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*.arrow"))
    received = sources * per_source * size
    assert on_disk / received <= 1.15, f"{on_disk / received:.3f} bytes on disk per payload byte"
    assert on_disk > received  # each payload is there


def test_a_path_read_without_the_arrival_log_is_refused_naming_it(tmp_path: Path) -> None:
    """Only ``ordered/`` copied somewhere: the Spark job's driver says where the payloads are
    before any executor looks for them."""
    from orderer.errors import ConfigError
    from orderer.spark.source.access import segment_files

    runs_ = [SourceRun(1, [1, 2, 3], [10, 20, 30], [0, 0, 0], [3])]

    async def live() -> int:
        async with serving(tmp_path / "run", CONFIG) as running:
            await _send(target(running), runs_[0])
            return await end_run_async(target(running))

    assert run(live()) == 3
    assert len(segment_files(tmp_path / "run")) == 1
    (tmp_path / "copy").mkdir()
    (tmp_path / "run" / "ordered").rename(tmp_path / "copy" / "ordered")
    with pytest.raises(ConfigError, match=r"no arrival log .*give the whole data directory"):
        segment_files(tmp_path / "copy")
