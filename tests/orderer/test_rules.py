"""One minimal, hand-computed case per rule of docs/ordering.md, run through the real ``Orderer``
API.

Each case feeds records one per call (``submit`` of one fragment, ``watermark``, ``end_source``),
optionally a live-timer ``advance`` and the end of run, and checks the exact emitted items
``(t, source, ts, barrier, late)`` written by hand from the spec. The test oracle must agree on
the same records (items and every counter), which keeps the oracle honest too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from orderer import FragmentBatch, InterfaceError, Orderer, SimulatedClock
from tests.oracle import Oracle

Item = tuple[float, int, int, int, bool]


def frag(t: float, source: int, ts: int, barrier: int = 0, payload: bytes = b"") -> dict[str, Any]:
    return {"t": t, "source": source, "ts": ts, "barrier": barrier, "payload": payload}


def wm(t: float, source: int, watermark: int) -> dict[str, Any]:
    return {"t": t, "source": source, "watermark": watermark}


def end(t: float, source: int) -> dict[str, Any]:
    return {"t": t, "source": source, "end": True}


def out(t: float, source: int, ts: int, barrier: int = 0, late: bool = False) -> Item:
    return (t, source, ts, barrier, late)


@dataclass
class Result:
    items: list[Item]
    payloads: list[bytes]
    counters: dict[str, Any]
    orderer: Orderer


def run(
    config: dict[str, Any],
    records: list[dict[str, Any]],
    *,
    advance_to: float | None = None,
    end_at: float | None = None,
) -> Result:
    """Feed ``records`` one per call to an Orderer and to the oracle; compare the two."""
    orderer = Orderer(config, clock=SimulatedClock())
    oracle = Oracle(config)
    for record in records:
        if "ts" in record:
            batch = FragmentBatch.from_arrays(
                source=[record["source"]],
                timestamp=[record["ts"]],
                barrier=[record["barrier"]],
                payloads=[record["payload"]],
            )
            orderer.submit(batch, now=record["t"])
        elif "watermark" in record:
            orderer.watermark(record["source"], record["watermark"], now=record["t"])
        else:
            orderer.end_source(record["source"], now=record["t"])
        oracle.take(record)
    if advance_to is not None:
        orderer.advance(advance_to)
        oracle.advance(advance_to)
    if end_at is not None:
        orderer.end_run(now=end_at)
        oracle.end_run(end_at)
    emitted = orderer.take_emitted()
    items = [(r["t"], r["source"], r["ts"], r["barrier"], r["late"]) for r in emitted.records()]
    payloads = [emitted.payload_of(i) for i in range(len(emitted))]
    oracle_items = [(e["t"], e["source"], e["ts"], e["barrier"], e["late"]) for e in oracle.emitted]
    result = Result(items, payloads, orderer.counters(), orderer)
    assert oracle_items == items, "the oracle disagrees with the core"
    assert oracle.counters() == result.counters, "the oracle's counters disagree with the core's"
    totals = result.counters["totals"]
    assert totals["received"] == totals["emitted"] + totals["dropped"] + orderer.queued
    return result


def W(**overrides: Any) -> dict[str, Any]:
    """Window 10 s, no startup delay, plus overrides."""
    return {"build_window": 10, "startup_delay": 0, **overrides}


# --------------------------------------------------------------------------- rule 1: frontier


def test_frontier_is_infinite_with_a_barrier_anywhere_in_the_queue() -> None:
    # source 1's queue is [5, barrier 6, 20]; NSCLDAQ would take 20 as its frontier and hold 50
    r = run(
        W(sources=[1, 2]),
        [frag(0, 1, 5), frag(0, 1, 6, barrier=1), frag(0, 1, 20), frag(1, 2, 50)],
    )
    assert r.items == [out(1.0, 1, 5), out(1.0, 2, 50)]
    assert r.orderer.queued == 2


def test_frontier_is_the_newest_timestamp_raised_to_the_watermark() -> None:
    # source 1 holds [20] with watermark 40: frontier 40, so the mark is source 2's 30
    r = run(
        W(sources=[1, 2, 3]),
        [frag(0, 1, 20), frag(0, 2, 30), wm(1, 1, 40), wm(2, 3, 35)],
    )
    assert r.items == [out(2.0, 1, 20), out(2.0, 2, 30)]


def test_ended_source_with_an_empty_queue_has_an_infinite_frontier() -> None:
    r = run(W(sources=[1, 2]), [frag(0, 1, 10), frag(0, 2, 20), end(1, 1)])
    assert r.items == [out(0.0, 1, 10), out(1.0, 2, 20)]


def test_no_watermark_and_empty_means_none_and_the_window_rule() -> None:
    # source 2 is silent: each queue front goes out when it has waited the window, on its own
    r = run(W(sources=[1, 2, 3]), [frag(0, 1, 10), frag(8, 3, 5)], advance_to=30)
    assert r.items == [out(10.0, 1, 10), out(18.0, 3, 5, late=True)]
    assert r.counters["sources"]["3"]["max_lateness"] == 5


# --------------------------------------------------------------------------- rules 2-4


def test_mark_rule_pops_up_to_the_smallest_frontier() -> None:
    r = run(
        W(sources=[1, 2]),
        [frag(0, 1, 10), frag(0, 1, 20), frag(0, 1, 30), frag(1, 2, 25)],
    )
    assert r.items == [out(1.0, 1, 10), out(1.0, 1, 20), out(1.0, 2, 25)]
    assert r.orderer.queued == 1


def test_window_rule_pops_only_fragments_that_waited() -> None:
    r = run(
        W(sources=[1, 2]),
        [frag(0, 1, 10), frag(4, 1, 20), frag(6, 1, 30)],
        advance_to=15,
    )
    assert r.items == [out(10.0, 1, 10), out(14.0, 1, 20)]
    assert r.orderer.queued == 1


def test_a_flush_repeats_rounds_until_nothing_moves() -> None:
    # at t=2: round 1 pops source 2's 200 (mark 200); then source 2 is ended and empty
    # (frontier +inf) and round 2 pops source 1's 300
    r = run(
        W(sources=[1, 2]),
        [frag(0, 1, 100), frag(0, 2, 200), end(1, 2), frag(2, 1, 300)],
    )
    assert r.items == [out(0.0, 1, 100), out(2.0, 2, 200), out(2.0, 1, 300)]


def test_merge_order_is_timestamp_then_source_then_arrival() -> None:
    r = run(
        W(sources=[1, 2, 3, 4]),  # 4 stays silent: everything waits for the window
        [
            frag(0, 3, 10, payload=b"3a"),
            frag(0, 2, 10, payload=b"2a"),
            frag(0, 3, 10, payload=b"3b"),
            frag(0, 1, 12, payload=b"1a"),
            frag(0, 2, 7, payload=b"2b"),
            frag(0, 1, 10, payload=b"1b"),
        ],
        advance_to=10,
    )
    assert r.items == [
        out(10.0, 2, 7),
        out(10.0, 1, 10),
        out(10.0, 2, 10),
        out(10.0, 3, 10),
        out(10.0, 3, 10),
        out(10.0, 1, 12),
    ]
    assert r.payloads == [b"2b", b"1b", b"2a", b"3a", b"3b", b"1a"]


def test_older_fragment_is_inserted_in_place_after_equal_timestamps() -> None:
    # queue becomes [10a@0, 10b@2, 20d@3, 30c@1]; the window rule looks at the front's arrival
    r = run(
        W(sources=[1, 2]),
        [
            frag(0, 1, 10, payload=b"a"),
            frag(1, 1, 30, payload=b"c"),
            frag(2, 1, 10, payload=b"b"),
            frag(3, 1, 20, payload=b"d"),
        ],
        advance_to=20,
    )
    assert r.items == [out(10.0, 1, 10), out(12.0, 1, 10), out(13.0, 1, 20), out(13.0, 1, 30)]
    assert r.payloads == [b"a", b"b", b"d", b"c"]
    assert r.counters["sources"]["1"]["out_of_order"] == 1


def test_older_fragment_goes_before_a_queued_barrier() -> None:
    # 15 arrives after the barrier 20 and goes in front of it; the barrier then waits for
    # barrier_timeout (4 x window) from its own arrival and goes out incomplete
    r = run(W(sources=[1, 2]), [frag(0, 1, 20, barrier=1), frag(1, 1, 15)], advance_to=50)
    assert r.items == [out(11.0, 1, 15), out(40.0, 1, 20, barrier=1)]
    assert r.counters["barriers"] == {
        "complete": 0, "incomplete": 1, "homogeneous": 1, "heterogeneous": 0
    }
    assert r.counters["missing"] == {"2": 1}


@pytest.mark.parametrize("policy", ["emit", "drop"])
def test_late_fragment_is_emitted_flagged_or_dropped(policy: str) -> None:
    r = run(
        W(sources=[1, 2], late_policy=policy),
        [frag(0, 1, 100), frag(0, 2, 200), frag(1, 1, 300), frag(2, 2, 150)],
        end_at=2,
    )
    late = [out(2.0, 2, 150, late=True)] if policy == "emit" else []
    assert r.items == [out(0.0, 1, 100), out(1.0, 2, 200), *late, out(2.0, 1, 300)]
    assert r.counters["sources"]["2"] == {
        "received": 2,
        "emitted": 2 if policy == "emit" else 1,
        "late": 1,
        "dropped": 0 if policy == "emit" else 1,
        "duplicates": 0,
        "out_of_order": 1,
        "max_lateness": 50,
        "barriers": 0,
    }


def test_high_water_mark_is_not_lowered_by_late_fragments() -> None:
    r = run(
        W(sources=[1, 2]),
        [
            frag(0, 1, 100),
            frag(0, 2, 200),
            frag(1, 1, 300),
            frag(2, 2, 150),  # late: 150 < 200
            frag(3, 2, 180),  # still late: the high-water mark stayed 200
            frag(4, 2, 200),  # equal to the high-water mark: not late
            frag(5, 2, 250),
        ],
        end_at=5,
    )
    assert r.items == [
        out(0.0, 1, 100),
        out(1.0, 2, 200),
        out(2.0, 2, 150, late=True),
        out(3.0, 2, 180, late=True),
        out(4.0, 2, 200),
        out(5.0, 2, 250),
        out(5.0, 1, 300),
    ]
    assert r.counters["sources"]["2"]["max_lateness"] == 50
    assert r.orderer.high_water_mark == 300


# --------------------------------------------------------------------------- rule 5: barriers


@pytest.mark.parametrize(
    ("types", "kind"), [((1, 1), "homogeneous"), ((1, 3), "heterogeneous")]
)
def test_complete_barrier(types: tuple[int, int], kind: str) -> None:
    a, b = types
    r = run(
        W(sources=[1, 2]),
        [
            frag(0, 2, 5),
            frag(0, 1, 10, barrier=a),  # waits for source 2's barrier; 5 goes out before it
            frag(1, 2, 12, barrier=b),
            frag(2, 1, 20),
            frag(2, 2, 21),
        ],
        end_at=2,
    )
    assert r.items == [
        out(0.0, 2, 5),
        out(1.0, 1, 10, barrier=a),
        out(1.0, 2, 12, barrier=b),
        out(2.0, 1, 20),
        out(2.0, 2, 21),
    ]
    assert r.counters["barriers"] == {
        "complete": 1,
        "incomplete": 0,
        "homogeneous": int(kind == "homogeneous"),
        "heterogeneous": int(kind == "heterogeneous"),
    }
    assert r.counters["missing"] == {}
    assert r.counters["sources"]["1"]["barriers"] == r.counters["sources"]["2"]["barriers"] == 1


def test_incomplete_barrier_at_once_when_the_others_have_ended() -> None:
    r = run(W(sources=[1, 2]), [end(0, 2), frag(1, 1, 10, barrier=2)])
    assert r.items == [out(1.0, 1, 10, barrier=2)]
    assert r.counters["barriers"]["incomplete"] == 1
    assert r.counters["missing"] == {"2": 1}


def test_missing_counts_each_source_without_a_barrier() -> None:
    r = run(
        W(sources=[1, 2, 3]),
        [
            end(0, 2),
            end(0, 3),
            frag(1, 1, 10, barrier=1),  # 2 and 3 ended: incomplete at once, both missing
            frag(2, 2, 11, barrier=1),  # re-opens 2; waits for 1 (alive, no barrier yet)
            frag(3, 1, 12, barrier=1),  # 3 still ended: incomplete, 3 missing
        ],
    )
    assert r.items == [
        out(1.0, 1, 10, barrier=1),
        out(3.0, 1, 12, barrier=1),
        out(3.0, 2, 11, barrier=1),
    ]
    assert r.counters["barriers"] == {
        "complete": 0, "incomplete": 2, "homogeneous": 2, "heterogeneous": 0
    }
    assert r.counters["missing"] == {"2": 1, "3": 2}


def test_barrier_timeout() -> None:
    r = run(W(sources=[1, 2], barrier_timeout=3), [frag(0, 1, 10, barrier=1)], advance_to=10)
    assert r.items == [out(3.0, 1, 10, barrier=1)]
    assert r.counters["missing"] == {"2": 1}


@pytest.mark.parametrize(
    ("source_timeout", "extra", "resolved_at"),
    [
        (5, [], 5.0),  # source 2 last heard of at 0: dead at 5
        ("off", [], 41.0),  # never dead: the barrier times out at 1 + 4 x 10
        (5, [wm(4, 2, 0)], 9.0),  # a watermark is an arrival: dead at 4 + 5
        (5, [end(4, 2)], 4.0),  # ended: the barrier no longer waits for it
    ],
)
def test_dead_source_no_longer_holds_a_barrier(
    source_timeout: Any, extra: list[dict[str, Any]], resolved_at: float
) -> None:
    r = run(
        W(source_timeout=source_timeout),
        [frag(0, 1, 1), frag(0, 2, 2), frag(1, 1, 3, barrier=3), *extra],
        advance_to=100,
    )
    assert r.items == [out(0.0, 1, 1), out(1.0, 2, 2), out(resolved_at, 1, 3, barrier=3)]
    assert r.counters["missing"] == {"2": 1}


@pytest.mark.parametrize(
    ("before", "resolved_at"),
    [
        ([], 40.0),  # declared, never sent anything: never dead, the barrier times out
        ([wm(0, 2, 0)], 1.0),  # declared and heard of once: dead after source_timeout
    ],
)
def test_declared_silent_source_is_never_dead(
    before: list[dict[str, Any]], resolved_at: float
) -> None:
    r = run(
        W(sources=[1, 2], source_timeout=1),
        [*before, frag(0, 1, 5, barrier=1)],
        advance_to=100,
    )
    assert r.items == [out(resolved_at, 1, 5, barrier=1)]


def test_end_of_run_drains_with_pending_barriers() -> None:
    # source 3 is silent; the drain pops data up to the barriers, merges, then resolves the
    # barriers (incomplete: 3 has none), then the data behind them
    r = run(
        W(sources=[1, 2, 3]),
        [
            frag(0, 1, 10),
            frag(0, 1, 20, barrier=1),
            frag(0, 1, 30),
            frag(0, 2, 15),
            frag(0, 2, 25, barrier=2),
        ],
        end_at=1,
    )
    assert r.items == [
        out(1.0, 1, 10),
        out(1.0, 2, 15),
        out(1.0, 1, 20, barrier=1),
        out(1.0, 2, 25, barrier=2),
        out(1.0, 1, 30),
    ]
    assert r.counters["barriers"] == {
        "complete": 0, "incomplete": 1, "homogeneous": 0, "heterogeneous": 1
    }
    assert r.counters["missing"] == {"3": 1}
    assert r.orderer.queued == 0


# --------------------------------------------------------------------------- sources and time


def test_startup_delay_counts_from_the_first_fragment() -> None:
    # the watermark at t=0 makes source 2 known but does not start the delay
    r = run(W(startup_delay=2), [wm(0, 2, 100), frag(1, 1, 10)], advance_to=10)
    assert r.items == [out(3.0, 1, 10)]


def test_end_of_run_drains_even_before_the_startup_delay() -> None:
    r = run(W(startup_delay=5), [frag(0, 1, 10), frag(0.5, 2, 20)], end_at=1)
    assert r.items == [out(1.0, 1, 10), out(1.0, 2, 20)]


def test_a_later_fragment_reopens_an_ended_source() -> None:
    r = run(W(sources=[1, 2]), [end(0, 2), frag(0, 1, 10), frag(1, 2, 20), frag(2, 1, 30)])
    # re-opened source 2 is empty again after 20 went out: 30 waits for it
    assert r.items == [out(0.0, 1, 10), out(2.0, 2, 20)]
    assert r.orderer.queued == 1


def test_a_watermark_does_not_reopen_an_ended_source() -> None:
    r = run(W(sources=[1, 2]), [end(0, 2), wm(1, 2, 5), frag(2, 1, 10)])
    assert r.items == [out(2.0, 1, 10)]


def test_watermark_only_moves_up() -> None:
    r = run(W(sources=[1, 2]), [wm(0, 2, 50), wm(1, 2, 20), frag(2, 1, 40)])
    assert r.items == [out(2.0, 1, 40)]


def test_deadline_equal_to_a_record_time_is_covered_by_the_flush_after_it() -> None:
    # the startup deadline (2.0) is not run before the record at 2.0: 15 goes out, on time
    r = run(W(startup_delay=2), [frag(0, 1, 20), frag(2, 2, 15)])
    assert r.items == [out(2.0, 2, 15)]


def test_deadlines_are_sums_in_double_precision() -> None:
    # 0.1 + 0.2 = 0.30000000000000004 > 0.3: not due at the record at 0.3, due just after
    r = run(W(build_window=0.2, sources=[1, 2]), [frag(0.1, 1, 10), frag(0.3, 1, 20)],
            advance_to=0.35)
    assert r.items == [out(0.1 + 0.2, 1, 10)]
    assert r.items[0][0] == 0.30000000000000004


# --------------------------------------------------------------------------- counters


def test_duplicates_and_out_of_order_compare_with_the_previous_fragment_of_the_source() -> None:
    r = run(
        W(sources=[1, 2]),
        [
            frag(0, 1, 10),
            frag(0, 2, 10),
            frag(1, 1, 10),  # duplicate
            frag(2, 1, 5),  # out of order
            frag(3, 2, 3),  # out of order for source 2 (and late)
            frag(3, 1, 5),  # duplicate
            frag(4, 1, 20, barrier=1),
            frag(5, 1, 20),  # duplicate of the barrier's timestamp
        ],
        end_at=5,
    )
    assert r.items == [
        out(0.0, 1, 10),
        out(0.0, 2, 10),
        out(3.0, 2, 3, late=True),
        out(5.0, 1, 5, late=True),
        out(5.0, 1, 5, late=True),
        out(5.0, 1, 10),
        out(5.0, 1, 20, barrier=1),
        out(5.0, 1, 20),
    ]
    assert r.counters["sources"] == {
        "1": {
            "received": 6, "emitted": 6, "late": 2, "dropped": 0, "duplicates": 3,
            "out_of_order": 1, "max_lateness": 5, "barriers": 1,
        },
        "2": {
            "received": 2, "emitted": 2, "late": 1, "dropped": 0, "duplicates": 0,
            "out_of_order": 1, "max_lateness": 7, "barriers": 0,
        },
    }
    assert r.counters["totals"] == {
        "received": 8, "emitted": 8, "late": 3, "dropped": 0, "duplicates": 3, "out_of_order": 2
    }


def test_conservation_received_is_emitted_plus_dropped_plus_queued() -> None:
    config = W(sources=[1, 2], late_policy="drop")
    records = [frag(0, 1, 100), frag(0, 2, 200), frag(1, 1, 300), frag(2, 2, 150)]
    before = run(config, records)
    totals = before.counters["totals"]
    assert (totals["received"], totals["emitted"], totals["dropped"]) == (4, 2, 1)
    assert before.orderer.queued == 1
    after = run(config, records, end_at=2)
    totals = after.counters["totals"]
    assert (totals["received"], totals["emitted"], totals["dropped"]) == (4, 3, 1)
    assert after.orderer.queued == 0


# --------------------------------------------------------------------------- misuse


def _orderer() -> Orderer:
    return Orderer(W(sources=[1, 2]), clock=SimulatedClock())


def _one(source: int, ts: int) -> FragmentBatch:
    return FragmentBatch.from_arrays(source=[source], timestamp=[ts])


@pytest.mark.parametrize(
    "call",
    [
        lambda o: o.submit(_one(1, 2), now=4.0),
        lambda o: o.watermark(1, 5, now=4.0),
        lambda o: o.end_source(1, now=4.0),
        lambda o: o.advance(4.0),
        lambda o: o.end_run(now=4.0),
    ],
    ids=["submit", "watermark", "end_source", "advance", "end_run"],
)
def test_time_going_backwards_raises(call: Any) -> None:
    orderer = _orderer()
    orderer.submit(_one(1, 1), now=5.0)
    before = orderer.counters()
    with pytest.raises(InterfaceError):
        call(orderer)
    assert orderer.counters() == before


def test_reserved_timestamp_is_rejected_and_nothing_of_the_batch_is_taken() -> None:
    orderer = _orderer()
    timestamps = np.array([5, 6, 2**64 - 1], dtype=np.uint64)
    bad = FragmentBatch.from_arrays(source=[1, 2, 1], timestamp=timestamps)
    with pytest.raises(InterfaceError, match=r"2\*\*64-1"):
        orderer.submit(bad, now=0.0)
    assert orderer.counters()["totals"]["received"] == 0
    assert orderer.queued == 0
    largest = np.array([5, 2**64 - 2], dtype=np.uint64)
    orderer.submit(FragmentBatch.from_arrays(source=[1, 2], timestamp=largest), now=0.0)
    assert orderer.counters()["totals"]["received"] == 2


def test_a_list_of_small_and_huge_timestamps_is_accepted() -> None:
    batch = FragmentBatch.from_arrays(source=[1, 2], timestamp=[5, 2**64 - 2])
    assert batch.timestamp.tolist() == [5, 2**64 - 2]


@pytest.mark.parametrize(
    ("source", "timestamp", "barrier"),
    [([1, 2], [1, 2, 3], None), ([1, 2, 1], [1, 2, 3], [0, 1])],
    ids=["source", "barrier"],
)
def test_arrays_of_different_lengths_are_rejected(
    source: list[int], timestamp: list[int], barrier: list[int] | None
) -> None:
    orderer = _orderer()
    with pytest.raises(InterfaceError):
        orderer.submit(FragmentBatch.from_arrays(source, timestamp, barrier), now=0.0)
    assert orderer.counters()["totals"]["received"] == 0
    assert orderer.queued == 0


# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize(
    ("config", "before", "batch", "expected"),
    [
        (
            # after the first (1, 10) the flush pops source 2's 10 too; source 2 is then empty
            # (frontier none) and the second (1, 10) must wait
            W(sources=[1, 2]),
            [frag(0, 2, 10)],
            [(1, 10), (1, 10)],
            [out(1.0, 1, 10), out(1.0, 2, 10)],
        ),
        (
            # after (1, 20) the flush pops 5 and 20 and resolves source 2's timed-out barrier;
            # source 2 is then empty and (1, 30) must wait: it may not overtake the barrier
            W(sources=[1, 2], barrier_timeout=0.5),
            [frag(0, 2, 5), frag(0, 2, 10, barrier=1)],
            [(1, 20), (1, 30)],
            [out(1.0, 2, 5), out(1.0, 1, 20), out(1.0, 2, 10, barrier=1)],
        ),
    ],
    ids=["equal-timestamps", "barrier-resolved-in-between"],
)
def test_a_batch_is_records_each_followed_by_a_flush(
    config: dict[str, Any],
    before: list[dict[str, Any]],
    batch: list[tuple[int, int]],
    expected: list[Item],
) -> None:
    records = [*before, *(frag(1.0, source, ts) for source, ts in batch)]
    per_record = run(config, records)
    assert per_record.items == expected
    orderer = Orderer(config, clock=SimulatedClock())
    for record in before:
        orderer.submit(
            FragmentBatch.from_arrays([record["source"]], [record["ts"]], [record["barrier"]]),
            now=record["t"],
        )
    orderer.submit(
        FragmentBatch.from_arrays([s for s, _ in batch], [ts for _, ts in batch]), now=1.0
    )
    items = [(r["t"], r["source"], r["ts"], r["barrier"], r["late"])
             for r in orderer.take_emitted().records()]
    assert items == expected
    assert orderer.counters() == per_record.counters
