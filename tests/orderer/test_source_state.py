"""Issue 16 on the orderer core: the barrier log (offset, types), the per-source queue view
(payload bytes, oldest and newest queued timestamps, the last out-of-order arrivals), and a
source marked dead or revived by an operator (docs/ordering.md, "Marking a source dead, reviving
it"). Each rule runs through the Cython core (live calls and ``evb replay``'s path) and through
the readable oracle ``tests/oracle.py``, which must agree."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest

from orderer import FragmentBatch, Orderer, OrdererConfig, SimulatedClock
from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.errors import InterfaceError, RecordError
from orderer.formats.json_lines import read_records, write_records
from orderer.replay.simulate import replay
from tests.oracle import Oracle, oracle_run


def _orderer(**config: Any) -> Orderer:
    return Orderer({"build_window": 30, "startup_delay": 0, **config}, clock=SimulatedClock())


def _items(emitted: Any) -> list[tuple[Any, ...]]:
    return [(r["t"], r["source"], r["ts"], r["barrier"], r["late"]) for r in emitted]


def _live(records: list[dict[str, Any]], config: dict[str, Any]) -> tuple[list, dict, Orderer]:
    """The records through the live calls of the API, one call per record, then end of run."""
    orderer = Orderer(config, clock=SimulatedClock())
    for r in records:
        if "ts" in r:
            batch = FragmentBatch.from_arrays(r["source"], [r["ts"]], [r.get("barrier", 0)])
            orderer.submit(batch, now=r["t"])
        elif "watermark" in r:
            orderer.watermark(r["source"], r["watermark"], now=r["t"])
        elif "end" in r:
            orderer.end_source(r["source"], now=r["t"])
        else:
            orderer.set_source_state(r["source"], r["dead"], now=r["t"])
    orderer.end_run(now=records[-1]["t"])
    return list(orderer.take_emitted().records()), orderer.counters(), orderer


def _agree(records: list[dict[str, Any]], config: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Live calls, ``evb replay``'s path (JSON Lines) and the oracle give the same run."""
    want, want_counters = oracle_run(records, config)
    got, counters, _ = _live(records, config)
    assert _items(got) == _items(want)
    assert counters == want_counters
    lines = [json.dumps(r) + "\n" for r in records]
    emitted, replayed = replay(read_records(lines), OrdererConfig.from_mapping(config))
    assert _items(emitted.records()) == _items(want)
    assert replayed == want_counters
    return _items(want)


# A barrier of source 1 waits for source 2, which sends nothing after its first fragment.
BARRIER_WAITS = [
    {"t": 0.0, "source": 1, "ts": 1},
    {"t": 0.0, "source": 2, "ts": 2},
    {"t": 0.5, "source": 1, "ts": 3, "barrier": 3},
    {"t": 1.0, "source": 1, "ts": 10},
]
CONFIG = {"build_window": 30, "startup_delay": 0, "source_timeout": 5}


# --------------------------------------------------------------------------- barrier log


def test_barrier_log_has_offset_types_and_missing() -> None:
    orderer = _orderer(barrier_timeout=100)
    for source, ts in ((1, 1), (2, 2), (3, 3)):
        orderer.submit(FragmentBatch.from_arrays(source, [ts]), now=0)
    orderer.submit(FragmentBatch.from_arrays(1, [5], [1]), now=1)
    orderer.submit(FragmentBatch.from_arrays(2, [6], [2]), now=2)
    orderer.submit(FragmentBatch.from_arrays(3, [7], [1]), now=3)
    emitted = orderer.take_emitted()
    (entry,) = orderer.take_barrier_log()
    first = int(np.flatnonzero(emitted.barrier)[0])
    assert entry == {
        "offset": emitted.first_seq + first, "t": 3.0, "complete": True, "homogeneous": False,
        "types": {1: 1, 2: 2, 3: 1}, "missing": [],
    }  # fmt: skip
    assert emitted.barrier[first:].tolist() == [1, 2, 1]
    # an incomplete one after more output: the offset counts every emitted fragment
    orderer.submit(FragmentBatch.from_arrays(3, [8, 9]), now=4)
    orderer.submit(FragmentBatch.from_arrays(2, [20], [3]), now=5)
    orderer.end_source(1, now=6)
    orderer.end_run(now=7)
    emitted = orderer.take_emitted()
    (entry,) = orderer.take_barrier_log()
    assert entry["offset"] == emitted.first_seq + int(np.flatnonzero(emitted.barrier)[0])
    assert (entry["complete"], entry["types"], entry["missing"]) == (False, {2: 3}, [1, 3])
    assert orderer.take_barrier_log() == []


# --------------------------------------------------------------------------- source states


def test_source_states_queue_bytes_ends_and_disorder() -> None:
    orderer = _orderer(sources=[9])  # 9 never sends: everything stays queued
    payloads = [b"abc", b"", b"defgh", b"i"]
    orderer.submit(FragmentBatch.from_arrays(1, [50, 40, 60, 45], payloads=payloads), now=1.5)
    state = orderer.source_states(now=2)[1]
    assert state["queued"] == 4
    assert state["queued_bytes"] == 9  # payload bytes, no length prefixes
    assert (state["oldest_ts"], state["newest_ts"]) == (40, 60)  # the sorted queue's two ends
    assert state["marked_dead"] is False
    assert state["out_of_order_last"] == [
        {"previous": 50, "timestamp": 40, "t": 1.5},
        {"previous": 60, "timestamp": 45, "t": 1.5},
    ]
    assert orderer.counters()["sources"]["1"]["out_of_order"] == 2
    idle = orderer.source_states(now=2)[9]
    assert (idle["queued_bytes"], idle["oldest_ts"], idle["newest_ts"]) == (0, None, None)
    assert idle["out_of_order_last"] == [] and idle["last_arrival"] is None


def test_out_of_order_last_keeps_the_last_ten_oldest_first() -> None:
    orderer = _orderer(sources=[9])
    orderer.submit(FragmentBatch.from_arrays(1, [1000]), now=0)
    for i in range(1, 13):  # 12 offenders, one per call ...
        orderer.submit(FragmentBatch.from_arrays(1, [1000 - i]), now=i)
    # ... then 15 more inside one batch (a descending run)
    orderer.submit(FragmentBatch.from_arrays(1, list(range(500, 485, -1))), now=20)
    last = orderer.source_states(now=20)[1]["out_of_order_last"]
    assert [e["timestamp"] for e in last] == list(range(495, 485, -1))
    assert [e["previous"] for e in last] == list(range(496, 486, -1))
    orderer.submit(FragmentBatch.from_arrays(1, [100]), now=21)
    last = orderer.source_states(now=21)[1]["out_of_order_last"]
    assert len(last) == 10 and last[-1] == {"previous": 486, "timestamp": 100, "t": 21.0}
    assert last[0]["timestamp"] == 494
    assert orderer.counters()["sources"]["1"]["out_of_order"] == 12 + 15 + 1


# --------------------------------------------------------------------------- dead and revive


def test_marking_dead_resolves_a_pending_barrier_at_once() -> None:
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    for r in BARRIER_WAITS:
        orderer.submit(FragmentBatch.from_arrays(r["source"], [r["ts"]], [r.get("barrier", 0)]),
                       now=r["t"])  # fmt: skip
    assert orderer.take_barrier_log() == []
    assert orderer.set_source_state(2, True, now=2.0) is True
    (entry,) = orderer.take_barrier_log()
    assert (entry["t"], entry["complete"], entry["missing"]) == (2.0, False, [2])
    state = orderer.source_states(now=2.0)[2]
    assert state["dead"] is True and state["marked_dead"] is True
    assert state["last_arrival"] == 0.0  # a mark is no arrival
    items = _agree([*BARRIER_WAITS, {"t": 2.0, "source": 2, "dead": True}], CONFIG)
    assert (2.0, 1, 3, 3, False) in items


@pytest.mark.parametrize(
    "record",
    [{"ts": 12}, {"watermark": 12}, {"end": True}, {"dead": False}],
    ids=["fragment", "watermark", "end", "revive"],
)
def test_any_record_or_a_revive_clears_the_mark(record: dict[str, Any]) -> None:
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    orderer.set_source_state(2, True, now=0.2)
    assert orderer.source_states(now=0.2)[2]["marked_dead"] is True
    if "ts" in record:
        orderer.submit(FragmentBatch.from_arrays(2, [12]), now=0.3)
    elif "watermark" in record:
        orderer.watermark(2, 12, now=0.3)
    elif "end" in record:
        orderer.end_source(2, now=0.3)
    else:
        orderer.set_source_state(2, False, now=0.3)
    state = orderer.source_states(now=0.3)[2]
    assert state["marked_dead"] is False and state["dead"] is False
    # alive again: the barrier waits for source 2 until it dies by timeout at 0.3 + 5 (ended:
    # it does not wait, as without a mark)
    records = [
        *BARRIER_WAITS[:2],
        {"t": 0.2, "source": 2, "dead": True},
        {"t": 0.3, "source": 2, **record},
        *BARRIER_WAITS[2:],
        {"t": 20.0, "source": 1, "ts": 40},  # the end of run comes later
    ]
    items = _agree(records, CONFIG)
    barrier_t = next(t for t, _, _, barrier, _ in items if barrier)
    assert barrier_t == (0.5 if "end" in record else 5.3)


def test_revive_restarts_the_silence_clock() -> None:
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    orderer.submit(FragmentBatch.from_arrays(2, [2]), now=0)
    assert orderer.source_states(now=6)[2]["dead"] is True  # silent 5 s
    orderer.set_source_state(2, False, now=6)
    assert orderer.source_states(now=10.9)[2]["dead"] is False  # 6 + 5 is still ahead
    assert orderer.source_states(now=11)[2]["dead"] is True
    # the deadline follows the revival: the pending barrier resolves at 6 + 5, not at 0 + 5
    records = [
        {"t": 0.0, "source": 1, "ts": 1},
        {"t": 0.0, "source": 2, "ts": 2},
        {"t": 6.0, "source": 2, "dead": False},
        {"t": 7.0, "source": 1, "ts": 3, "barrier": 1},
        {"t": 20.0, "source": 1, "ts": 4},
    ]
    items = _agree(records, CONFIG)
    assert (11.0, 1, 3, 1, False) in items


def test_a_revived_source_that_never_sent_is_never_dead_by_timeout() -> None:
    records = [
        {"t": 0.0, "source": 1, "ts": 1},
        {"t": 0.0, "source": 2, "dead": False},
        {"t": 0.5, "source": 1, "ts": 3, "barrier": 1},
        {"t": 30.0, "source": 1, "ts": 4},
    ]
    items = _agree(records, {**CONFIG, "barrier_timeout": 20})
    assert (20.5, 1, 3, 1, False) in items  # the barrier timeout, not source 2's death


def test_marking_an_unknown_source_makes_it_known() -> None:
    orderer = _orderer(sources=[4])
    assert orderer.set_source_state(4, True, now=0) is True
    assert orderer.set_source_state(7, False, now=0) is False
    assert orderer.set_source_state(7, True, now=0) is True
    assert sorted(orderer.source_states(now=0)) == [4, 7]
    assert orderer.counters()["sources"]["7"]["received"] == 0
    # known with an empty queue and no watermark: its frontier is none, the window rule holds
    records = [{"t": 0.0, "source": 7, "dead": True}, {"t": 1.0, "source": 1, "ts": 5},
               {"t": 9.0, "source": 1, "watermark": 5}]  # fmt: skip
    assert _agree(records, {"build_window": 3, "startup_delay": 0}) == [(4.0, 1, 5, 0, False)]


def test_a_mark_does_not_start_the_startup_delay() -> None:
    records = [
        {"t": 0.0, "source": 2, "dead": True},
        {"t": 5.0, "source": 1, "ts": 5},
        {"t": 5.5, "source": 2, "ts": 6},
        {"t": 9.0, "source": 2, "watermark": 6},
    ]
    assert _agree(records, {"startup_delay": 2})[0][0] == 7.0


def test_set_source_state_checks_its_arguments() -> None:
    orderer = _orderer()
    with pytest.raises(InterfaceError, match="dead: 1 is not a boolean"):
        orderer.set_source_state(1, 1, now=0)  # type: ignore[arg-type]
    with pytest.raises(InterfaceError, match="source: -1"):
        orderer.set_source_state(-1, True, now=0)
    orderer.advance(5)
    with pytest.raises(InterfaceError, match="time went backwards"):
        orderer.set_source_state(1, True, now=4)


# --------------------------------------------------------------------------- records


def test_source_state_records_replay_like_the_live_calls() -> None:
    records = ArrivalRecords.concat([
        ArrivalRecords.fragments(FragmentBatch.from_arrays([1, 2], [1, 2])).at(0.0),
        ArrivalRecords.fragments(FragmentBatch.from_arrays(1, [3], [3])).at(0.5),
        ArrivalRecords.source_state(2, True).at(2.0),
        ArrivalRecords.source_state(2, False).at(3.0),
    ])  # fmt: skip
    assert records.kind.tolist()[-2:] == [ArrivalKind.SOURCE_STATE] * 2
    assert records.value.tolist()[-2:] == [1, 0]
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    orderer.replay_records(records)
    (entry,) = orderer.take_barrier_log()
    assert (entry["t"], entry["missing"]) == (2.0, [2])
    assert orderer.source_states(now=3.0)[2]["marked_dead"] is False
    out = io.StringIO()
    write_records(records, out)
    lines = out.getvalue().splitlines()
    assert lines[-2:] == ['{"t": 2.0, "source": 2, "dead": true}',
                          '{"t": 3.0, "source": 2, "dead": false}']  # fmt: skip
    again = read_records(lines)
    assert again.kind.tolist() == records.kind.tolist()
    assert again.value.tolist() == records.value.tolist()


def test_the_core_refuses_a_source_state_that_is_not_0_or_1() -> None:
    bad = ArrivalRecords.marker(ArrivalKind.SOURCE_STATE, 2, 7).at(0.0)
    with pytest.raises(InterfaceError, match=r"value\[0\]=7 of a source-state record"):
        Orderer(CONFIG, clock=SimulatedClock()).replay_records(bad)
    for kind in (ArrivalKind.CONFIGURE, ArrivalKind.END_RUN):
        with pytest.raises(InterfaceError, match=f"kind\\[0\\]={int(kind)} is not a record"):
            Orderer(CONFIG).replay_records(ArrivalRecords.marker(kind).at(0.0))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"t": 0, "source": 1, "dead": 1}', "line 1: dead must be true or false, got 1"),
        ('{"t": 0, "source": 1, "dead": true, "ts": 3}', "line 1: a record needs exactly one"),
        ('{"t": 0, "source": 1, "dead": true, "x": 3}', "line 1: unknown field 'x' in a dead"),
    ],
)
def test_replay_reader_checks_dead_records(line: str, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        read_records([line])


def test_oracle_mark_is_not_an_arrival() -> None:
    oracle = Oracle(CONFIG)
    oracle.take({"t": 0.0, "source": 3, "ts": 1})
    oracle.take({"t": 1.0, "source": 3, "dead": True})
    assert oracle.sources[3].last_arrival == 0.0 and oracle.sources[3].marked_dead
    assert oracle.first_fragment == 0.0
