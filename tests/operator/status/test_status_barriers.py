"""``evb_operator/status/barriers.py``: the Events and status fields of the orderer's barrier
log, pure.

A GetStats answer is built by hand (``barrier_log`` oldest first); the previous status is the
operator's only memory, so each call here is also what an operator restarted with that status
would do."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema

from evb_operator import crd, status
from orderer.stats import BarrierCounts, BarrierRecord, ConsumerState, Stats
from tests.operator.conftest import unknown_fields
from tests.operator.status.test_status import _observe, _stats

WALL = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the answer's ``wall_time``, at orderer time :data:`NOW_T`."""
NOW_T = 1000.0


def _barrier(
    offset: int,
    *,
    missing: tuple[int, ...] = (),
    types: dict[int, int] | None = None,
    t: float = NOW_T - 3,
) -> BarrierRecord:
    """One entry of ``barrier_log``; sources 1 and 2 are known, each sends type 3 by default."""
    sent = {source: 3 for source in (1, 2) if source not in missing} if types is None else types
    return BarrierRecord(
        offset=offset,
        t=t,
        complete=not missing,
        homogeneous=len(set(sent.values())) <= 1,
        types=sent,
        missing=missing,
    )


def _answer(log: list[BarrierRecord], *, next_offset: int = 10_000, **more: Any) -> Stats:
    """A GetStats answer whose barrier counters are those of ``log`` (plus ``more``'s)."""
    counters = {
        "complete": sum(e.complete for e in log),
        "incomplete": sum(not e.complete for e in log),
        "homogeneous": sum(e.homogeneous for e in log),
        "heterogeneous": sum(not e.homogeneous for e in log),
    }
    counters.update(more.pop("barriers", {}))
    return _stats(
        barrier_log=tuple(log),
        barriers=BarrierCounts(**counters, by_type={}),
        next_offset=next_offset,
        now=NOW_T,
        wall_time=WALL,
        **more,
    )


def _events(notices: list[status.Notice]) -> list[tuple[str, str]]:
    return [(n.type, n.reason) for n in notices]


def test_an_incomplete_barrier_is_a_warning_naming_its_offset_and_missing_sources() -> None:
    new, notices = _observe({}, _answer([_barrier(40), _barrier(120, missing=(2,))]))
    assert _events(notices) == [("Warning", "IncompleteBarrier")]
    assert notices[0].message == (
        "incomplete barrier at output offset 120 (resolved 2025-12-31T23:59:57Z):"
        " no barrier from source(s) 2; sent source 1: type 3"
    )
    barriers = new["barriers"]
    assert barriers["lastReportedOffset"] == 120
    assert barriers["lastIncomplete"] == {
        "offset": 120,
        "missing": [2],
        "types": {"1": 3},
        "resolved": "2025-12-31T23:59:57Z",
    }
    assert (barriers["complete"], barriers["incomplete"]) == (1, 1)


def test_a_heterogeneous_barrier_names_the_type_of_each_source() -> None:
    mixed = _barrier(60, types={1: 3, 2: 4, 10: 3})
    _, notices = _observe({}, _answer([mixed]))
    assert _events(notices) == [("Normal", "HeterogeneousBarrier")]
    assert notices[0].message.endswith(
        "heterogeneous barrier at output offset 60 (resolved 2025-12-31T23:59:57Z):"
        " source 1: type 3, source 2: type 4, source 10: type 3"
    )
    both = _barrier(70, missing=(10,), types={1: 3, 2: 4})
    _, notices = _observe({}, _answer([both]))
    assert _events(notices) == [("Warning", "IncompleteBarrier")]
    assert notices[0].message.startswith("incomplete heterogeneous barrier at output offset 70")
    assert "source(s) 10; sent source 1: type 3, source 2: type 4" in notices[0].message


def test_no_barrier_is_reported_twice_across_updates_and_restarts() -> None:
    log = [_barrier(40, missing=(2,))]
    first, notices = _observe({}, _answer(log))
    assert len(notices) == 1
    # the next update (or a restarted operator, reading the status the last one wrote)
    again, notices = _observe(first, _answer(log))
    assert notices == [] and again["barriers"]["lastReportedOffset"] == 40
    log += [_barrier(90), _barrier(130, missing=(1,))]
    later, notices = _observe(again, _answer(log))
    assert _events(notices) == [("Warning", "IncompleteBarrier")]
    assert "output offset 130" in notices[0].message and "source(s) 1;" in notices[0].message
    assert later["barriers"]["lastReportedOffset"] == 130
    # without the status's memory, the whole log would be reported again
    barriers = {k: v for k, v in later["barriers"].items() if k != "lastReportedOffset"}
    forgot = {**later, "barriers": barriers}
    assert len(_observe(forgot, _answer(log))[1]) == 2


def test_a_complete_barrier_moves_the_offset_and_keeps_the_last_incomplete() -> None:
    first, _ = _observe({}, _answer([_barrier(40, missing=(2,))]))
    new, notices = _observe(first, _answer([_barrier(40, missing=(2,)), _barrier(80)]))
    assert notices == []
    assert new["barriers"]["lastReportedOffset"] == 80
    assert new["barriers"]["lastIncomplete"]["offset"] == 40


def test_at_most_five_barrier_events_per_update_then_one_summary() -> None:
    log = [_barrier(100 + 10 * i, missing=(2,) if i % 3 else (1, 2)) for i in range(12)]
    new, notices = _observe({}, _answer(log))
    assert status.BARRIER_EVENTS_PER_UPDATE == 5
    assert _events(notices) == [("Warning", "IncompleteBarrier")] * 5 + [
        ("Warning", "IncompleteBarriers")
    ]
    assert "offset 100 " in notices[0].message and "offset 140 " in notices[4].message
    assert notices[5].message == (
        "and 7 more incomplete barrier(s) since output offset 150, the newest at 210;"
        " missed by source 1: 2, source 2: 7"
    )
    assert new["barriers"]["lastReportedOffset"] == 210
    assert new["barriers"]["lastIncomplete"]["offset"] == 210
    assert _observe(new, _answer(log))[1] == []  # the summarised ones count as reported


def test_a_summary_of_heterogeneous_barriers_only_is_normal() -> None:
    log = [_barrier(10 * i, types={1: 3, 2: i}) for i in range(1, 8)]
    _, notices = _observe({}, _answer(log))
    assert _events(notices)[-1] == ("Normal", "HeterogeneousBarriers")
    assert notices[-1].message == (
        "and 1 more heterogeneous barrier(s) since output offset 70, the newest at 70"
    )


def test_barriers_older_than_the_answer_are_counted_from_the_totals() -> None:
    """More barriers resolved in one period than the operator asked for: the totals say how many
    the answer's log does not hold."""
    first, _ = _observe({}, _answer([_barrier(40)]))
    newest = [_barrier(500, missing=(2,)), _barrier(510, missing=(2,))]
    answer = _answer(newest, barriers={"complete": 1, "incomplete": 30, "homogeneous": 31})
    new, notices = _observe(first, answer)
    assert _events(notices) == [("Warning", "IncompleteBarrier")] * 2 + [
        ("Warning", "IncompleteBarriers")
    ]
    assert notices[-1].message == (
        "and 28 more incomplete barrier(s) since output offset 41; 28 of them resolved before"
        " the 2 newest the orderer returned (counted from its totals)"
    )
    assert new["barriers"]["lastReportedOffset"] == 510
    # an answer without the log at all (an orderer from before it): the totals still speak
    _, notices = _observe(
        first, _stats(barriers=BarrierCounts(complete=1, incomplete=2, by_type={}))
    )
    assert _events(notices) == [("Warning", "IncompleteBarriers")]
    assert notices[0].message == (
        "and 2 more incomplete barrier(s) since output offset 41; 2 of them not in the"
        " orderer's answer (counted from its totals)"
    )


def test_a_new_orderer_log_is_reported_from_its_start() -> None:
    """A status whose offset lies beyond the orderer's log (a new volume, a new run): the
    barriers of the new log are not taken for old ones."""
    old, _ = _observe({}, _answer([_barrier(5000, missing=(1,))], next_offset=6000))
    new, notices = _observe(old, _answer([_barrier(40, missing=(2,))], next_offset=100))
    assert _events(notices) == [("Warning", "IncompleteBarrier")]
    assert new["barriers"]["lastReportedOffset"] == 40
    assert new["barriers"]["lastIncomplete"]["offset"] == 40
    blank, _ = _observe(old, _answer([], next_offset=100))
    assert blank["barriers"]["lastIncomplete"] is None  # merge patch: deleted with the old log
    assert "lastReportedOffset" not in blank["barriers"]


def test_an_answer_without_wall_time_names_no_time() -> None:
    answer = replace(_answer([_barrier(40, missing=(2,))]), wall_time=0.0)  # none on the wire
    new, notices = _observe({}, answer)
    assert "resolved" not in notices[0].message
    assert "resolved" not in new["barriers"]["lastIncomplete"]


def test_the_barrier_status_validates_against_the_status_schema() -> None:
    """The API server drops what the schema does not declare: every new field must be in it."""
    log = [_barrier(100 + i, missing=(2,), types={1: 3}) for i in range(7)]
    consumers = {
        "spark": ConsumerState(name="spark", committed=5, lag=10, lag_seconds=1.5, last_commit=WALL)
    }
    new, _ = _observe({}, _answer(log, consumers=consumers))
    assert new["consumerLagSeconds"] == 1.5
    written = json.loads(json.dumps(new))
    checker = jsonschema.Draft4Validator(
        crd.STATUS_SCHEMA, format_checker=jsonschema.FormatChecker()
    )
    errors = list(checker.iter_errors(written))
    assert not errors, f"{errors[0].json_path}: {errors[0].message}"
    assert unknown_fields(written, crd.STATUS_SCHEMA) == []
