"""``evb_operator/status.py``: the status and the Events a GetStats answer implies, pure."""

from __future__ import annotations

from typing import Any

from evb_operator import status, validation

VALID = validation.validate({"buildWindow": 5, "alerts": {"lateBurst": 10}})
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"


def _stats(**changes: Any) -> dict[str, Any]:
    """A GetStats answer in ``orderer.client.get_stats`` layout."""
    stats: dict[str, Any] = {
        "totals": {"received": 100, "emitted": 90, "late": 3, "dropped": 0},
        "barriers": {"complete": 2, "incomplete": 0, "homogeneous": 2, "heterogeneous": 0},
        "missing": {},
        "sources": {
            "1": {"dead": False, "paused": False},
            "2": {"dead": True, "paused": True},
        },
        "next_offset": 90,
        "high_water_mark": 2**63 + 5,
        "queued": 10,
        "run_ended": False,
        "config": {
            "build_window": 5.0,
            "startup_delay": 2.0,
            "barrier_timeout": None,
            "source_timeout": 60.0,
            "late_policy": "emit",
            "sources": [],
        },
    }
    stats.update(changes)
    return stats


def _observe(previous: dict[str, Any], stats: dict[str, Any] | None, **more: Any) -> Any:
    return status.observe(
        previous,
        valid=VALID,
        endpoint="e:50051",
        stats=stats,
        error=more.pop("error", None),
        spark=more.pop("spark", None),
        now=more.pop("now", NOW),
    )


def _conditions(new: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in new["conditions"]}


def test_the_counters_come_from_the_orderer() -> None:
    new, notices = _observe({}, _stats())
    assert new["phase"] == "Running"
    assert (new["fragments"], new["emitted"], new["late"], new["queued"]) == (100, 90, 3, 10)
    assert new["window"] == 5.0 and new["nextOffset"] == 90
    assert new["highWaterMark"] == str(2**63 + 5)  # a uint64 does not fit an int64 field
    assert (new["sources"], new["deadSources"], new["pausedSources"]) == (2, 1, 1)
    assert _conditions(new) == {"Valid": "True", "OrdererReachable": "True", "Configured": "True"}
    assert notices == []


def test_an_unreachable_orderer_is_pending_then_a_warning() -> None:
    new, notices = _observe({}, None, error="UNAVAILABLE: no route")
    assert new["phase"] == "Pending" and notices == []
    assert _conditions(new)["OrdererReachable"] == "False"
    running, _ = _observe({}, _stats())
    lost, notices = _observe(running, None, error="UNAVAILABLE: gone", now=LATER)
    assert lost["phase"] == "Pending"
    assert [n.reason for n in notices] == ["OrdererUnreachable"]
    ended, _ = _observe({}, _stats(run_ended=True))
    assert _observe(ended, None)[0]["phase"] == "Ended"  # a final phase stays


def test_conditions_keep_their_transition_time() -> None:
    first, _ = _observe({}, _stats(), now=NOW)
    second, _ = _observe(first, _stats(), now=LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert set(times.values()) == {NOW}
    third, _ = _observe(second, None, now=LATER)
    (reachable,) = [c for c in third["conditions"] if c["type"] == "OrdererReachable"]
    assert reachable["lastTransitionTime"] == LATER


def test_incomplete_barriers_and_late_bursts_are_events() -> None:
    previous, _ = _observe({}, _stats())
    stats = _stats(
        totals={"received": 200, "emitted": 150, "late": 13, "dropped": 2},
        barriers={"complete": 2, "incomplete": 2, "homogeneous": 3, "heterogeneous": 1},
        missing={"2": 2, "10": 1},
    )
    new, notices = _observe(previous, stats)
    assert new["missing"] == {"2": 2, "10": 1}
    reasons = {n.reason: n for n in notices}
    assert set(reasons) == {"IncompleteBarrier", "LateDataBurst"}
    assert all(n.type == "Warning" for n in notices)
    assert "2 incomplete barrier(s)" in reasons["IncompleteBarrier"].message
    assert "source 2: 2, source 10: 1" in reasons["IncompleteBarrier"].message
    assert reasons["LateDataBurst"].message.startswith("10 late fragments")
    # the same counters again: nothing new to report
    assert _observe(new, stats)[1] == []


def test_a_small_late_count_is_no_burst() -> None:
    previous, _ = _observe({}, _stats())
    _, notices = _observe(previous, _stats(totals={"received": 101, "late": 12}))
    assert notices == []


def test_drift_between_spec_and_orderer_is_a_condition() -> None:
    config = {**_stats()["config"], "build_window": 7.0}
    new, _ = _observe({}, _stats(config=config))
    (configured,) = [c for c in new["conditions"] if c["type"] == "Configured"]
    assert configured["status"] == "False" and "build_window" in configured["message"]


def test_the_run_ends_and_spark_finishes() -> None:
    new, _ = _observe({}, _stats(run_ended=True))
    assert new["phase"] == "Ended" and _conditions(new)["RunEnded"] == "True"
    app: dict[str, Any] = {
        "metadata": {"name": "r-spark"},
        "status": {"applicationState": {"state": "RUNNING"}},
    }
    new, _ = _observe(new, _stats(run_ended=True), spark=app)
    assert new["phase"] == "Ended" and new["spark"] == {"name": "r-spark", "state": "RUNNING"}
    app["status"]["applicationState"]["state"] = "COMPLETED"
    done, notices = _observe(new, _stats(run_ended=True), spark=app)
    assert done["phase"] == "Completed"
    assert [n.reason for n in notices] == ["SparkCompleted"]
    app["status"]["applicationState"] = {"state": "FAILED", "errorMessage": "driver OOM"}
    failed, notices = _observe(new, _stats(), spark=app)
    assert failed["phase"] == "Failed" and failed["spark"]["errorMessage"] == "driver OOM"
    assert [(n.type, n.reason) for n in notices] == [("Warning", "SparkFailed")]


def test_an_invalid_spec_status_names_the_field() -> None:
    new = status.invalid({}, field="spec.buildWindow", message="must be > 0", now=NOW)
    assert new["phase"] == "Invalid"
    (condition,) = new["conditions"]
    assert condition == {
        "type": "Valid",
        "status": "False",
        "reason": "InvalidSpec",
        "message": "spec.buildWindow: must be > 0",
        "lastTransitionTime": NOW,
    }


def test_an_accepted_spec_leaves_the_phase_of_a_run_alone() -> None:
    new = status.accepted({}, endpoint="e", now=NOW)
    assert (new["phase"], new["endpoint"], _conditions(new)) == ("Pending", "e", {"Valid": "True"})
    assert status.accepted({"phase": "Invalid"}, endpoint="e", now=NOW)["phase"] == "Pending"
    assert "phase" not in status.accepted({"phase": "Running"}, endpoint="e", now=NOW)


def test_the_end_of_run_keeps_how_the_spark_job_finished() -> None:
    new = status.ended({"phase": "Running"}, offset=90, now=NOW)
    assert (new["phase"], new["runEnded"], new["nextOffset"]) == ("Ended", True, 90)
    assert _conditions(new) == {"RunEnded": "True"}
    assert "phase" not in status.ended({"phase": "Completed"}, offset=90, now=NOW)


def test_tls_is_reported_served_once_the_orderer_answered_over_it() -> None:
    valid = validation.validate(
        {"tls": {"secretName": "run-tls"}, "auth": {"tokenSecretRef": {"name": "t"}}}
    )
    before, _ = status.observe(
        {}, valid=valid, endpoint="e", stats=None, error="refused", spark=None, now=NOW
    )
    (tls,) = [c for c in before["conditions"] if c["type"] == "TLS"]
    assert (tls["status"], tls["reason"]) == ("False", "NotVerified")
    new, _ = status.observe(
        before, valid=valid, endpoint="e", stats=_stats(), error=None, spark=None, now=NOW
    )
    (tls,) = [c for c in new["conditions"] if c["type"] == "TLS"]
    assert (tls["status"], tls["reason"]) == ("True", "Served")
    assert "run-tls" in tls["message"] and "bearer token" in tls["message"]
    plain, _ = status.observe(
        {}, valid=validation.validate({}), endpoint="e", stats=_stats(), error=None, spark=None,
        now=NOW,
    )
    assert not [c for c in plain["conditions"] if c["type"] == "TLS"]
