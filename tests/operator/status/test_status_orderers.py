"""The status of a run over three orderers (``evb_operator/status/orderers.py`` and
``status.observe_orderers``), pure: the run's counters summed, an entry per orderer, ``Ready``
and ``OrdererReachable`` naming the orderer that does not answer, ``Configured`` the one that
runs other live parameters, the run ended only when all three say so, each orderer's barrier
log reported from its own entry, and every status written valid against the CRD's schema."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema

from evb_operator import crd, status, validation
from orderer.config import OrdererConfig
from orderer.stats import BarrierCounts, BarrierRecord, ConsumerState, SourceStats, Stats
from tests.operator.conftest import stats_answer

VALID = validation.validate(
    {"buildWindow": 5, "alerts": {"lateBurst": 1000}, "orderers": 3, "sliceTicks": 1000}
)
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"
ENDPOINTS = [f"127.0.0.1:500{k}" for k in range(3)]
STATEFULSET = {
    "metadata": {"name": "wide-orderer"},
    "spec": {"replicas": 3},
    "status": {"replicas": 3, "readyReplicas": 3},
}


def _orderer(k: int, **changes: Any) -> Stats:
    """Orderer k's answer: 100 x (k + 1) fragments received, 90 x (k + 1) emitted, k late."""
    totals = {"received": 100 * (k + 1), "emitted": 90 * (k + 1), "late": k}
    return stats_answer(
        totals=totals, next_offset=90 * (k + 1), queued=k, run_start_offset=10 * k, **changes
    )


def _answers(*stats: Stats | None) -> list[status.OrdererAnswer]:
    return [
        status.OrdererAnswer(k, ENDPOINTS[k], s, None if s is not None else "UNAVAILABLE: down")
        for k, s in enumerate(stats)
    ]


def _observe(previous: dict[str, Any], *stats: Stats | None, now: str = NOW) -> Any:
    return status.observe_orderers(
        {"observedGeneration": 1, **previous},
        valid=VALID,
        endpoint=",".join(ENDPOINTS),
        answers=_answers(*stats),
        spark=None,
        statefulset=STATEFULSET,
        generation=1,
        now=now,
    )


def _condition(new: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in new["conditions"] if c["type"] == kind]
    return found


def _valid(new: dict[str, Any]) -> None:
    checker = jsonschema.Draft4Validator(
        crd.STATUS_SCHEMA, format_checker=jsonschema.FormatChecker()
    )
    errors = list(checker.iter_errors(json.loads(json.dumps(new))))
    assert not errors, f"{errors[0].json_path}: {errors[0].message}"


def test_the_counters_are_summed_and_each_orderer_has_an_entry() -> None:
    new, notices = _observe({}, *(_orderer(k) for k in range(3)))
    _valid(new)
    assert (new["fragments"], new["emitted"], new["late"]) == (600, 540, 3)
    assert (new["queued"], new["nextOffset"], new["runStartOffset"]) == (3, 540, 30)
    assert new["barriers"] == {"complete": 6, "incomplete": 0, "homogeneous": 6, "heterogeneous": 0}
    # every source sends to every orderer: counted once
    assert (new["sources"], new["deadSources"], new["pausedSources"]) == (2, 1, 1)
    assert new["window"] == 5.0 and new["run"] == 1 and new["runEnded"] is False
    assert new["phase"] == "Running" and notices == []
    assert [(e["index"], e["endpoint"], e["ready"]) for e in new["orderers"]] == [
        (k, ENDPOINTS[k], True) for k in range(3)
    ]
    assert [e["fragments"] for e in new["orderers"]] == [100, 200, 300]
    assert [e["nextOffset"] for e in new["orderers"]] == [90, 180, 270]
    ready = _condition(new, "Ready")
    assert ready["status"] == "True" and "3 orderers" in ready["message"]
    assert _condition(new, "OrdererReachable")["message"] == "all 3 orderers answer"


def test_the_consumer_lag_is_each_consumers_summed_the_slowest_one() -> None:
    def consumer(name: str, lag: int, seconds: float) -> ConsumerState:
        return ConsumerState(name=name, committed=0, lag=lag, lag_seconds=seconds, last_commit=None)

    answers = [
        _orderer(
            k,
            consumers={
                "spark": consumer("spark", 10 * (k + 1), k),
                "tail": consumer("tail", 25, 0.5),
            },
        )
        for k in range(3)
    ]
    new, _ = _observe({}, *answers)
    assert new["consumerLag"] == 75  # tail's 3 x 25 against spark's 10 + 20 + 30
    assert new["consumerLagSeconds"] == 2.0


def test_an_orderer_that_does_not_answer_is_named_and_keeps_its_last_counters() -> None:
    running, _ = _observe({}, *(_orderer(k) for k in range(3)))
    lost, notices = _observe(running, _orderer(0), None, _orderer(2), now=LATER)
    _valid(lost)
    assert lost["fragments"] == 600  # orderer 1's 200 from its entry: no dip while it restarts
    entry = lost["orderers"][1]
    assert entry["ready"] is False and "UNAVAILABLE: down" in entry["message"]
    assert entry["fragments"] == 200 and entry["endpoint"] == ENDPOINTS[1]
    ready = _condition(lost, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "OrdererUnreachable"
    assert f"orderer 1 ({ENDPOINTS[1]}) does not answer" in ready["message"]
    assert "orderer 0" not in ready["message"] and "orderer 2" not in ready["message"]
    reachable = _condition(lost, "OrdererReachable")
    assert reachable["status"] == "False" and reachable["message"].startswith("1 of 3:")
    assert [n.reason for n in notices] == ["OrdererUnreachable"]
    assert lost["phase"] == "Running"

    back, notices = _observe(lost, *(_orderer(k) for k in range(3)), now=LATER)
    assert _condition(back, "Ready")["status"] == "True" and notices == []
    assert all(e["ready"] for e in back["orderers"])


def test_none_answering_is_pending_and_the_entries_are_kept() -> None:
    running, _ = _observe({}, *(_orderer(k) for k in range(3)))
    lost, _ = _observe(running, None, None, None, now=LATER)
    _valid(lost)
    assert lost["phase"] == "Pending" and lost["fragments"] == 600
    assert _condition(lost, "Configured")["status"] == "True"  # nothing to compare: unchanged


def test_an_orderer_with_other_live_parameters_is_named_by_configured() -> None:
    other = _orderer(2, config=OrdererConfig(build_window=7.5))
    new, _ = _observe({}, _orderer(0), _orderer(1), other)
    configured = _condition(new, "Configured")
    assert configured["status"] == "False" and configured["message"].startswith("orderer 2: ")
    assert "build_window" in configured["message"]
    assert [e["ready"] for e in new["orderers"]] == [True, True, False]
    assert "live parameters" in new["orderers"][2]["message"]


def test_the_run_ended_only_when_every_orderer_says_so() -> None:
    ended = [_orderer(k, run_ended=True) for k in range(3)]
    partly, _ = _observe({}, ended[0], ended[1], _orderer(2))
    assert partly["phase"] == "Running" and partly["runEnded"] is False
    assert all(c["type"] != "RunEnded" for c in partly["conditions"])
    whole, _ = _observe(partly, *ended)
    assert whole["phase"] == "Ended" and whole["runEnded"] is True
    assert _condition(whole, "RunEnded")["message"] == "the run ended at offset 540"
    silent, _ = _observe(whole, ended[0], None, ended[2])
    assert silent["phase"] == "Ended"  # a final phase stays while one does not answer


def test_the_run_is_the_lowest_every_orderer_reached() -> None:
    new, _ = _observe({}, _orderer(0, run=2), _orderer(1, run=1), _orderer(2, run=2))
    assert new["run"] == 1 and [e["run"] for e in new["orderers"]] == [2, 1, 2]


def test_each_orderers_barrier_log_is_reported_once_from_its_own_entry() -> None:
    incomplete = BarrierRecord(
        offset=40, t=0.0, complete=False, homogeneous=True, types={1: 1}, missing=(2,)
    )
    counts = BarrierCounts(complete=2, incomplete=1, homogeneous=3, by_type={})
    sources = {1: SourceStats(source=1, received=5), 2: SourceStats(source=2, missing=1)}
    at_one = replace(_orderer(1), barrier_log=(incomplete,), barriers=counts, sources=sources)
    first, notices = _observe({}, _orderer(0), at_one, _orderer(2))
    _valid(first)
    assert [n.reason for n in notices] == ["IncompleteBarrier"]
    assert notices[0].message.startswith("orderer 1: incomplete barrier at output offset 40")
    assert first["orderers"][1]["barriers"]["lastReportedOffset"] == 40
    assert first["orderers"][1]["barriers"]["lastIncomplete"]["missing"] == [2]
    assert "lastReportedOffset" not in first["orderers"][0]["barriers"]
    assert first["barriers"]["incomplete"] == 1 and first["missing"] == {"2": 1}
    _, notices = _observe(first, _orderer(0), at_one, _orderer(2), now=LATER)
    assert notices == []  # reported once, from orderer 1's cursor


def test_a_late_burst_is_judged_on_the_run_s_late_fragments() -> None:
    first, _ = _observe({}, *(_orderer(k) for k in range(3)))
    burst = [
        _orderer(k, sources={1: SourceStats(source=1, received=900, late=400)}) for k in range(3)
    ]
    _, notices = _observe(first, *burst, now=LATER)
    assert [n.reason for n in notices] == ["LateDataBurst"]
    assert notices[0].message.startswith("1197 late fragments since the last update (1200")
