"""pb2 <-> API conversions (orderer/wire/convert.py): round trips, and every malformed field
refused with an ``InterfaceError`` that names it (what the service sends as INVALID_ARGUMENT)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer import ConfigError, EmittedBatch, FragmentBatch, InterfaceError, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.stats import (
    BarrierCounts,
    BarrierRecord,
    Connection,
    ConsumerState,
    OutOfOrder,
    SourceStats,
    Stats,
)
from orderer.wire import convert

LIMITS = convert.BatchLimits(max_payload_bytes=16, sources=frozenset({1, 2}))


def _u64(*values: int) -> bytes:
    return np.asarray(values, dtype="<u8").tobytes()


def _u32(*values: int) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


def _batch(**fields: object) -> pb.FragmentBatch:
    base: dict[str, object] = {"source": 1, "timestamps": _u64(10, 20, 30)}
    base.update(fields)
    return pb.FragmentBatch(**base)  # type: ignore[arg-type]


def test_single_source_batch_round_trip_with_payloads_and_barriers() -> None:
    batch = FragmentBatch.from_arrays(
        source=2, timestamp=[5, 7, 7], barrier=[0, 3, 0], payloads=[b"a", b"", b"xyz"]
    )
    incoming = convert.batch_from_pb(convert.batch_to_pb(batch, 40), LIMITS)
    assert incoming.source == 2 and incoming.first_sequence == 40
    got = incoming.batch
    assert got.source.tolist() == [2, 2, 2]
    assert got.timestamp.tolist() == [5, 7, 7]
    assert got.barrier.tolist() == [0, 3, 0]
    assert got.payload_offsets.tolist() == [0, 1, 1, 4]
    assert got.payload.tobytes() == b"axyz"


def test_multi_source_batch_carries_no_sequence() -> None:
    batch = FragmentBatch.from_arrays(source=[1, 2, 1], timestamp=[1, 2, 3])
    message = convert.batch_to_pb(batch)
    assert message.sources and not message.first_sequence
    incoming = convert.batch_from_pb(message, LIMITS)
    assert incoming.source is None and incoming.first_sequence is None
    assert incoming.batch.source.tolist() == [1, 2, 1]


def test_an_empty_batch_still_names_its_source() -> None:
    incoming = convert.batch_from_pb(pb.FragmentBatch(source=2, first_sequence=7), LIMITS)
    assert incoming.source == 2 and incoming.first_sequence == 7 and len(incoming.batch) == 0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"timestamps": b"\x00" * 12}, "timestamps"),
        ({"barrier_types": _u32(0, 1)}, "barrier_types"),
        ({"barrier_types": b"\x00" * 5}, "barrier_types"),
        ({"source": 0, "sources": _u32(1, 2)}, "sources"),
        ({"source": 1, "sources": _u32(1, 2, 1)}, "source"),
        ({"source": 0, "sources": _u32(1, 2, 1), "first_sequence": 3}, "first_sequence"),
        ({"source": 7}, "source"),
        ({"source": 0, "sources": _u32(1, 9, 1)}, "sources"),
        ({"timestamps": _u64(1, 2**64 - 1, 3)}, "timestamps"),
        ({"payload": b"abc"}, "payload"),
        ({"payload": b"abc", "payload_offsets": _u64(0, 1, 2)}, "payload_offsets"),
        ({"payload": b"abc", "payload_offsets": _u64(0, 2, 1, 3)}, "payload_offsets"),
        ({"payload": b"abc", "payload_offsets": _u64(1, 2, 3, 3)}, "payload_offsets"),
        ({"payload": b"abc", "payload_offsets": _u64(0, 1, 2, 5)}, "payload_offsets"),
        ({"payload": b"x" * 20, "payload_offsets": _u64(0, 1, 18, 20)}, "payload"),
        ({"first_sequence": 2**64 - 2}, "first_sequence"),
    ],
)
def test_malformed_fields_are_named(fields: dict[str, object], named: str) -> None:
    with pytest.raises(InterfaceError) as caught:
        convert.batch_from_pb(_batch(**fields), LIMITS)
    assert caught.value.detail.startswith(f"{named}:"), caught.value.detail


def test_payload_limit_and_strict_sources_are_settings() -> None:
    message = _batch(source=7, payload=b"x" * 20, payload_offsets=_u64(0, 1, 18, 20))
    incoming = convert.batch_from_pb(message, convert.BatchLimits(max_payload_bytes=17))
    assert incoming.batch.payload_offsets.tolist() == [0, 1, 18, 20]


def test_watermark_and_end_of_source_check_strict_sources() -> None:
    assert convert.watermark_from_pb(pb.Watermark(source=1, watermark=2**64 - 1), LIMITS) == (
        1,
        2**64 - 1,
    )
    with pytest.raises(InterfaceError, match=r"^watermark\.source: 5"):
        convert.watermark_from_pb(pb.Watermark(source=5, watermark=1), LIMITS)
    with pytest.raises(InterfaceError, match=r"^end_of_source\.source: 5"):
        convert.end_of_source_from_pb(pb.EndOfSource(source=5), LIMITS)


def _emitted(n: int, payload_size: int, first: int = 100) -> EmittedBatch:
    rng = np.random.default_rng(n)
    lengths = rng.integers(0, payload_size + 1, n).astype(np.uint64)
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    return EmittedBatch(
        first_seq=first,
        t=np.linspace(0.5, 9.5, n),
        source=rng.integers(0, 5, n).astype(np.uint32),
        timestamp=np.sort(rng.integers(0, 2**63, n).astype(np.uint64)),
        barrier=rng.integers(0, 3, n).astype(np.uint32),
        late=rng.integers(0, 2, n).astype(np.bool_),
        payload_offsets=offsets,
        payload=rng.integers(0, 256, int(offsets[-1])).astype(np.uint8),
    )


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 40), payload_size=st.integers(0, 9))
def test_ordered_batch_round_trip(n: int, payload_size: int) -> None:
    emitted = _emitted(n, payload_size)
    message = convert.emitted_to_pb(emitted, next_offset=100 + n, high_water_mark=None)
    assert not message.HasField("high_water_mark")
    back = convert.emitted_from_pb(message)
    assert back.first_seq == 100
    for column in ("t", "source", "timestamp", "barrier", "late", "payload"):
        np.testing.assert_array_equal(getattr(back, column), getattr(emitted, column))
    if payload_size and n:
        np.testing.assert_array_equal(back.payload_offsets, emitted.payload_offsets)


def test_configure_request_takes_spec_names_in_both_spellings() -> None:
    request = convert.configure_request({"buildWindow": 5, "source_timeout": "off"})
    assert request.build_window == 5.0 and request.source_timeout_off
    assert convert.configure_changes_from_pb(request) == {
        "build_window": 5.0,
        "source_timeout": None,
    }
    request = convert.configure_request({"late_policy": "drop", "sourceTimeout": 7})
    assert convert.configure_changes_from_pb(request) == {
        "late_policy": "drop",
        "source_timeout": 7.0,
    }


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"build_window": -1}, "build_window"),
        ({"buildWindw": 1}, "buildWindw"),
        ({"sources": [1, 2]}, "sources"),
        ({"barrier_timeout": None}, "barrier_timeout"),
    ],
)
def test_configure_request_refuses_what_cannot_change(
    changes: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        convert.configure_request(changes)
    assert caught.value.parameter == named


def test_configure_with_both_timeouts_is_refused() -> None:
    request = pb.ConfigureRequest(source_timeout=3, source_timeout_off=True)
    with pytest.raises(InterfaceError, match=r"^source_timeout_off:"):
        convert.configure_changes_from_pb(request)


def _over_the_wire(stats: Stats) -> Stats:
    """``stats`` sent as ``GetStats`` sends it, and read back as a client reads it."""
    message = pb.Stats.FromString(convert.stats_to_pb(stats).SerializeToString())
    return convert.stats_from_pb(message)


def _stats(**fields: Any) -> Stats:
    base: dict[str, Any] = {
        "barriers": BarrierCounts(by_type={}),
        "wall_time": 0.0,
        "run": 0,
        "run_start_offset": 0,
        "runs": (),
        "consumers": {},
    }
    base.update(fields)
    return Stats(**base)


def test_stats_in_the_replay_layout() -> None:
    config = OrdererConfig(build_window=3, source_timeout=None, sources=(1, 2))
    stats = _stats(
        sources={
            1: SourceStats(
                source=1,
                received=5,
                emitted=4,
                late=1,
                max_lateness=9,
                barriers=1,
                queued=1,
                watermark=77,
                paused=True,
            ),
            2: SourceStats(source=2, received=3, emitted=3, missing=2, ended=True),
        },
        barriers=BarrierCounts(
            complete=1, incomplete=2, homogeneous=3, heterogeneous=0, by_type={}
        ),
        next_offset=7,
        high_water_mark=None,
        queued=1,
        now=1.5,
        run_ended=False,
        config=config,
    )
    back = _over_the_wire(stats)
    assert back == stats
    assert back.totals.received == 8 and back.totals.late == 1
    assert back.missing == {2: 2}
    assert back.config == config
    mapping = back.to_json()
    assert mapping["totals"]["received"] == 8 and mapping["totals"]["late"] == 1
    assert mapping["missing"] == {"2": 2}
    assert mapping["sources"]["1"]["watermark"] == 77 and mapping["sources"]["1"]["paused"]
    assert mapping["sources"]["2"]["watermark"] is None and mapping["sources"]["2"]["ended"]
    assert mapping["high_water_mark"] is None and mapping["next_offset"] == 7
    assert mapping["config"]["source_timeout"] == "off"
    assert mapping["config"]["barrier_timeout"] is None
    assert OrdererConfig.from_mapping(mapping["config"]) == config


def test_stats_carry_the_diagnostics_in_the_stats_json_layout() -> None:
    """Every key of the ``evb stats --json`` layout of the diagnostics survives the wire: the
    barrier log, the queue state and out-of-order offenders per source, the connections, the
    consumers with their lag, the barrier fragments by type and the wall time."""
    stats = _stats(
        sources={
            1: SourceStats(
                source=1,
                received=4,
                queued=2,
                queued_bytes=30,
                oldest_ts=5,
                newest_ts=9,
                last_arrival=1.25,
                marked_dead=True,
                dead=True,
                out_of_order_last=(OutOfOrder(previous=8, timestamp=3, t=1.0),),
            ),
            2: SourceStats(source=2, queued=0),
        },
        barriers=BarrierCounts(by_type={7: 1}),
        next_offset=10,
        high_water_mark=9,
        queued=2,
        now=2.0,
        run_ended=False,
        config=OrdererConfig(),
        consumers={
            "old": ConsumerState(
                name="old", committed=10, lag=0, lag_seconds=0.0, last_commit=None
            ),
            "spark": ConsumerState(
                name="spark", committed=4, lag=6, lag_seconds=0.5, last_commit=1.7e9
            ),
        },
        barrier_log=(
            BarrierRecord(
                offset=3, t=1.5, complete=False, homogeneous=True, types={1: 7}, missing=(2,)
            ),
        ),
        connections=(
            Connection(
                peer="ipv4:127.0.0.1:5",
                sources=(1,),
                since=1.6e9,
                messages=3,
                bytes=99,
                acked={1: 4},
            ),
        ),
        wall_time=1.8e9,
    )
    back = _over_the_wire(stats)
    assert back == stats
    mapping = back.to_json()
    one, two = mapping["sources"]["1"], mapping["sources"]["2"]
    assert (one["queued_bytes"], one["oldest_ts"], one["newest_ts"]) == (30, 5, 9)
    assert one["last_arrival"] == 1.25 and one["marked_dead"] and one["dead"]
    assert one["out_of_order_last"] == [{"previous": 8, "timestamp": 3, "t": 1.0}]
    assert (two["oldest_ts"], two["newest_ts"], two["last_arrival"]) == (None, None, None)
    assert two["out_of_order_last"] == [] and not two["marked_dead"]
    assert mapping["barrier_log"] == [
        {
            "offset": 3,
            "t": 1.5,
            "complete": False,
            "homogeneous": True,
            "types": {"1": 7},
            "missing": [2],
        }
    ]
    assert mapping["barriers"]["by_type"] == {"7": 1}
    assert mapping["connections"] == [
        {
            "peer": "ipv4:127.0.0.1:5",
            "sources": [1],
            "since": 1.6e9,
            "messages": 3,
            "bytes": 99,
            "acked": {"1": 4},
        }
    ]
    assert mapping["consumers"] == {
        "old": {"committed": 10, "lag": 0, "lag_seconds": 0.0, "last_commit": None},
        "spark": {"committed": 4, "lag": 6, "lag_seconds": 0.5, "last_commit": 1.7e9},
    }
    assert mapping["wall_time"] == 1.8e9
