"""``evb_operator/status/report.py``: the status and the Events a GetStats answer implies, pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from evb_operator import status, validation
from orderer.stats import ConsumerState, Stats
from tests.operator.conftest import stats_answer as _stats

VALID = validation.validate({"buildWindow": 5, "alerts": {"lateBurst": 10}})
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"


def _statefulset(ready: int = 1, replicas: int = 1) -> dict[str, Any]:
    """The orderer's StatefulSet as the API server reports it (``status.readyReplicas`` is left
    out, not 0, when no pod is ready)."""
    body: dict[str, Any] = {
        "metadata": {"name": "r-orderer"},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    }
    if ready:
        body["status"]["readyReplicas"] = ready
    return body


def _spark(state: str | None) -> dict[str, Any]:
    app: dict[str, Any] = {"metadata": {"name": "r-spark"}, "status": {}}
    if state is not None:
        app["status"]["applicationState"] = {"state": state}
    return app


def _observe(previous: dict[str, Any], stats: Stats | None, **more: Any) -> Any:
    return status.observe(
        {"observedGeneration": 1, **previous},
        valid=more.pop("valid", VALID),
        endpoint="e:50051",
        stats=stats,
        error=more.pop("error", None),
        spark=more.pop("spark", None),
        statefulset=more.pop("statefulset", _statefulset()),
        generation=more.pop("generation", 1),
        now=more.pop("now", NOW),
    )


def _conditions(new: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in new["conditions"]}


def _condition(new: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in new["conditions"] if c["type"] == kind]
    return found


def test_the_counters_come_from_the_orderer() -> None:
    new, notices = _observe({}, _stats())
    assert new["phase"] == "Running"
    assert (new["fragments"], new["emitted"], new["late"], new["queued"]) == (100, 90, 3, 10)
    assert new["window"] == 5.0 and new["nextOffset"] == 90
    assert new["highWaterMark"] == str(2**63 + 5)  # a uint64 does not fit an int64 field
    assert (new["sources"], new["deadSources"], new["pausedSources"]) == (2, 1, 1)
    assert _conditions(new) == {
        "Ready": "True",
        "Valid": "True",
        "OrdererReachable": "True",
        "Configured": "True",
    }
    assert notices == []


def _consumer(name: str, committed: int, lag_seconds: float) -> ConsumerState:
    """A consumer as ``GetStats`` reports it."""
    return ConsumerState(
        name=name,
        committed=committed,
        lag=90 - committed,
        lag_seconds=lag_seconds,
        last_commit=1.7e9,
    )


def test_the_consumer_lag_is_what_the_slowest_consumer_has_not_committed() -> None:
    new, _ = _observe({}, _stats())
    assert "consumerLag" not in new and "consumerLagSeconds" not in new  # none committed yet
    consumers = {"spark": _consumer("spark", 60, 2.5), "tail": _consumer("tail", 85, 4.0)}
    new, _ = _observe({}, _stats(consumers=consumers))
    assert new["consumerLag"] == 90 - 60
    assert new["consumerLagSeconds"] == 4.0  # in seconds, the slowest may be another one


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


def test_late_bursts_are_events() -> None:
    previous, _ = _observe({}, _stats())
    stats = _stats(
        totals={"received": 200, "emitted": 150, "late": 13, "dropped": 2},
        missing={2: 2, 10: 1},
    )
    new, notices = _observe(previous, stats)
    assert new["missing"] == {"2": 2, "10": 1}
    assert [(n.type, n.reason) for n in notices] == [("Warning", "LateDataBurst")]
    assert notices[0].message.startswith("10 late fragments")
    # the same counters again: nothing new to report
    assert _observe(new, stats)[1] == []


def test_a_small_late_count_is_no_burst() -> None:
    previous, _ = _observe({}, _stats())
    _, notices = _observe(previous, _stats(totals={"received": 101, "late": 12}))
    assert notices == []


def test_drift_between_spec_and_orderer_is_a_condition() -> None:
    config = replace(_stats().config, build_window=7.0)
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


def test_a_resubmitted_spark_job_loses_its_old_error_message() -> None:
    """The Spark operator resubmits a failed job (restartPolicy OnFailure) with a new state and
    no error: the status patch removes the old message (None in a merge patch), once."""
    app: dict[str, Any] = {
        "metadata": {"name": "r-spark"},
        "status": {"applicationState": {"state": "FAILED", "errorMessage": "driver OOM"}},
    }
    failed, _ = _observe({}, _stats(), spark=app)
    assert failed["spark"]["errorMessage"] == "driver OOM"
    app["status"]["applicationState"] = {"state": "RUNNING"}
    running, _ = _observe(failed, _stats(), spark=app)
    assert running["spark"] == {"name": "r-spark", "state": "RUNNING", "errorMessage": None}
    patched = {**running, "spark": {"name": "r-spark", "state": "RUNNING"}}  # as stored
    again, _ = _observe(patched, _stats(), spark=app)
    assert again["spark"] == {"name": "r-spark", "state": "RUNNING"}


def test_an_invalid_spec_status_names_the_field() -> None:
    new = status.invalid({}, field="spec.buildWindow", message="must be > 0", generation=3, now=NOW)
    assert new["phase"] == "Invalid"
    assert new["observedGeneration"] == 3  # refused is acted on
    expected = {
        "status": "False",
        "reason": "InvalidSpec",
        "message": "spec.buildWindow: must be > 0",
        "lastTransitionTime": NOW,
        "observedGeneration": 3,
    }
    assert new["conditions"] == [{"type": "Ready", **expected}, {"type": "Valid", **expected}]


def test_an_accepted_spec_leaves_the_phase_of_a_run_alone() -> None:
    new = status.accepted({}, endpoint="e", generation=1, now=NOW)
    assert (new["phase"], new["endpoint"], _conditions(new)) == (
        "Pending",
        "e",
        {"Ready": "False", "Valid": "True"},
    )
    assert (
        status.accepted({"phase": "Invalid"}, endpoint="e", generation=1, now=NOW)["phase"]
        == "Pending"
    )
    assert "phase" not in status.accepted({"phase": "Running"}, endpoint="e", generation=1, now=NOW)


def test_the_end_of_run_keeps_how_the_spark_job_finished() -> None:
    new = status.ended({"phase": "Running"}, offset=90, generation=2, now=NOW)
    assert (new["phase"], new["runEnded"], new["nextOffset"]) == ("Ended", True, 90)
    assert _conditions(new) == {"RunEnded": "True"}
    assert new["observedGeneration"] == 2
    assert "phase" not in status.ended({"phase": "Completed"}, offset=90, generation=2, now=NOW)


def test_tls_is_reported_served_once_the_orderer_answered_over_it() -> None:
    valid = validation.validate(
        {"tls": {"secretName": "run-tls"}, "auth": {"tokenSecretRef": {"name": "t"}}}
    )
    before, _ = _observe({}, None, valid=valid, error="refused")
    tls = _condition(before, "TLS")
    assert (tls["status"], tls["reason"]) == ("False", "NotVerified")
    new, _ = _observe(before, _stats(), valid=valid)
    tls = _condition(new, "TLS")
    assert (tls["status"], tls["reason"]) == ("True", "Served")
    assert "run-tls" in tls["message"] and "bearer token" in tls["message"]
    plain, _ = _observe({}, _stats(), valid=validation.validate({}))
    assert not [c for c in plain["conditions"] if c["type"] == "TLS"]


SPARK_RUN = validation.validate({"spark": {"dt": 100, "output": {"path": "s3a://daq/events"}}})


def _ready(**changes: Any) -> tuple[bool, str]:
    arguments: dict[str, Any] = {
        "acted": 4,
        "generation": 4,
        "statefulset": _statefulset(),
        "unreachable": None,
        "spark_required": True,
        "spark_state": "RUNNING",
    }
    arguments.update(changes)
    verdict = status.ready(**arguments)
    return verdict.status, verdict.reason


def test_ready_needs_the_generation_acted_on_a_ready_pod_an_answer_and_a_running_job() -> None:
    assert _ready() == (True, "Serving")
    assert _ready(spark_required=False, spark_state=None) == (True, "Serving")
    assert _ready(acted=3) == (False, "Reconciling")
    assert _ready(acted=None) == (False, "Reconciling")
    assert _ready(generation=None, acted=None) == (True, "Serving")  # no generation: no check
    assert _ready(statefulset=None) == (False, "OrdererPodNotReady")
    assert _ready(statefulset=_statefulset(ready=0)) == (False, "OrdererPodNotReady")
    assert _ready(statefulset=_statefulset(ready=0, replicas=0)) == (False, "OrdererPodNotReady")
    assert _ready(unreachable="UNAVAILABLE") == (False, "OrdererUnreachable")
    assert _ready(spark_state=None) == (False, "SparkNotRunning")
    assert _ready(spark_state="SUBMITTED") == (False, "SparkNotRunning")
    assert _ready(spark_state="COMPLETED") == (False, "SparkCompleted")
    assert _ready(spark_state="SUBMISSION_FAILED") == (False, "SparkFailed")
    # the first reason in the order a user looks: the spec, the pod, the orderer, the job
    both = _ready(statefulset=_statefulset(ready=0), unreachable="x", spark_state=None)
    assert both == (False, "OrdererPodNotReady")
    message = status.ready(
        acted=4,
        generation=4,
        statefulset=_statefulset(ready=0),
        unreachable=None,
        spark_required=False,
        spark_state=None,
    ).message
    assert message == "StatefulSet r-orderer: 0/1 pods ready"


def test_every_condition_carries_the_generation_it_was_computed_from() -> None:
    new, _ = _observe({"observedGeneration": 7}, _stats(), generation=7)
    assert {c["observedGeneration"] for c in new["conditions"]} == {7}
    assert "observedGeneration" not in new  # only a handler that acted on the spec moves it
    assert new["conditions"][0]["type"] == "Ready"  # Ready first, order stable
    assert set(_condition(new, "Ready")) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }


def test_ready_waits_for_the_new_generation_to_be_acted_on() -> None:
    served, _ = _observe({}, _stats(), generation=1)
    assert _condition(served, "Ready")["status"] == "True"
    # spec edited (generation 2), the handlers have not acted yet: not Ready on the old spec
    stale, _ = _observe(served, _stats(), generation=2, now=LATER)
    ready = _condition(stale, "Ready")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == (
        "False",
        "Reconciling",
        2,
    )
    assert ready["lastTransitionTime"] == LATER
    acted = {**stale, **status.accepted(stale, endpoint="e:50051", generation=2, now=LATER)}
    assert acted["observedGeneration"] == 2
    assert _condition(acted, "Ready")["reason"] == "Reconciling"  # accepted leaves it alone
    again, _ = _observe(acted, _stats(), generation=2, now=LATER)
    assert _condition(again, "Ready")["status"] == "True"


def test_ready_keeps_its_transition_time_while_its_status_holds() -> None:
    first, _ = _observe({}, _stats(), now=NOW)
    second, _ = _observe(first, _stats(), generation=1, now=LATER)
    assert _condition(second, "Ready")["lastTransitionTime"] == NOW
    lost, _ = _observe(second, None, error="UNAVAILABLE: gone", now=LATER)
    ready = _condition(lost, "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        "OrdererUnreachable",
        LATER,
    )
    assert ready["message"] == "UNAVAILABLE: gone"


def test_accepting_a_spec_turns_invalid_into_reconciling_and_keeps_a_ready_run_ready() -> None:
    refused = status.invalid({}, field="spec.x", message="bad", generation=1, now=NOW)
    fixed = status.accepted(refused, endpoint="e", generation=2, now=LATER)
    assert _condition(fixed, "Ready")["reason"] == "Reconciling"
    served, _ = _observe({}, _stats())
    kept = status.accepted(served, endpoint="e", generation=1, now=LATER)
    assert _condition(kept, "Ready") == _condition(served, "Ready")


def test_a_spark_stage_is_ready_only_while_its_job_runs() -> None:
    def ready(state: str | None) -> dict[str, Any]:
        new, _ = _observe({}, _stats(), valid=SPARK_RUN, spark=_spark(state))
        return _condition(new, "Ready")

    assert (ready(None)["status"], ready(None)["reason"]) == ("False", "SparkNotRunning")
    assert ready("SUBMITTED")["message"] == "the Spark job is SUBMITTED"
    assert ready("RUNNING")["status"] == "True"
    assert ready("FAILED")["reason"] == "SparkFailed"
    no_app, _ = _observe({}, _stats(), valid=SPARK_RUN, spark=None)
    assert _condition(no_app, "Ready")["message"] == "the Spark job is absent"
