"""An EventBuilder's status, and the Events worth posting, from what the operator observed.

Called by the status timer (:mod:`evb_operator.handlers.timer`) with the orderer's ``GetStats``
answer (:func:`orderer.client.get_stats_async`, a :class:`orderer.stats.Stats`), the orderer's
StatefulSet and the SparkApplication, and by the handlers with what their calls did
(:func:`accepted`, :func:`invalid`, :func:`begun`, :func:`ended`). Pure: the previous status
comes in (counters from one update to the next are compared through it, so the operator keeps
no memory of its own and survives restarts), the new status fields and the :class:`Notice` list
go out; the caller patches and posts.
A run over several orderers: :func:`observe_orderers`, with every orderer's answer
(:mod:`evb_operator.status.orderers` sums them and writes an entry per orderer); the barrier
Events are :mod:`evb_operator.status.barriers`'s, the conditions' pieces
:mod:`evb_operator.status.conditions`'.

Generations, as Kubernetes users read them (a Deployment's status works the same way):
``status.observedGeneration`` is the ``metadata.generation`` the operator last acted on (accepted
or refused; only the create/update handlers move it, never the status timer), and every condition
carries the ``observedGeneration`` it was computed from. ``Ready`` stays False (``Reconciling``)
while the spec's generation is newer than the one acted on, so ``kubectl wait
--for=condition=Ready`` after an ``apply`` does not return on the previous spec's readiness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evb_operator.phases import FINAL_PHASES, ConditionType, RunPhase
from evb_operator.specs.live import PageAddress
from evb_operator.status.barriers import BARRIER_EVENTS_PER_UPDATE, barrier_report, count
from evb_operator.status.conditions import Notice, Verdict, find, set_condition
from evb_operator.status.orderers import OrdererAnswer, drift, observe_each
from evb_operator.typed_spec import Tls
from evb_operator.validation import ValidSpec
from orderer.stats import Stats

__all__ = [
    "BARRIER_EVENTS_PER_UPDATE",
    "Notice",
    "OrdererAnswer",
    "Verdict",
    "accepted",
    "begun",
    "ended",
    "invalid",
    "observe",
    "observe_orderers",
    "ready",
    "set_condition",
]

SPARK_DONE = {
    "COMPLETED": RunPhase.COMPLETED,
    "FAILED": RunPhase.FAILED,
    "SUBMISSION_FAILED": RunPhase.FAILED,
}
"""The SparkApplication's final states (the Spark operator's names) and the phase each means."""

SPARK_RUNNING = "RUNNING"
"""The Spark operator's state of a job whose driver runs (the one state in which it builds)."""

_VALID = Verdict(True, "Accepted", "the spec is valid")


def _run_ended(offset: int) -> Verdict:
    return Verdict(True, "EndRun", f"the run ended at offset {offset}")


def _generation_of(status: Mapping[str, Any]) -> int | None:
    value = status.get("observedGeneration")
    return None if value is None else int(value)


def accepted(
    previous: Mapping[str, Any], *, endpoint: str, generation: int | None, now: str
) -> dict[str, Any]:
    """The status of a spec the operator accepted (its children exist): a ``Valid=True``
    condition, the endpoint, ``observedGeneration``, and Pending unless the run already has a
    phase of its own. ``Ready`` turns False (``Reconciling``) only when there is none yet or it
    said the spec was invalid: otherwise the next status update judges it."""
    conditions = set_condition(
        previous.get("conditions"), ConditionType.VALID, _VALID, now=now, generation=generation
    )
    was = find(conditions, ConditionType.READY)
    if was is None or was.get("reason") == "InvalidSpec":
        waiting = Verdict(
            False, "Reconciling", "the children exist; waiting for the orderer's pod to answer"
        )
        conditions = set_condition(
            conditions, ConditionType.READY, waiting, now=now, generation=generation
        )
    new: dict[str, Any] = {"conditions": conditions, "endpoint": endpoint}
    if generation is not None:
        new["observedGeneration"] = generation
    if previous.get("phase") in (None, RunPhase.INVALID):
        new["phase"] = RunPhase.PENDING
    return new


def begun(run: int, start_offset: int, *, generation: int | None) -> dict[str, Any]:
    """The status once ``BeginRun`` answered: the run and its first offset; not ended (the
    status timer brings the phase and the conditions back to the orderer's)."""
    new: dict[str, Any] = {"run": run, "runStartOffset": start_offset, "runEnded": False}
    if generation is not None:
        new["observedGeneration"] = generation
    return new


def ended(
    previous: Mapping[str, Any], *, offset: int, generation: int | None, now: str
) -> dict[str, Any]:
    """The status once ``EndRun`` answered with the run's last ``offset``: Ended, unless the
    Spark job already finished (Completed or Failed say more)."""
    new: dict[str, Any] = {"runEnded": True, "nextOffset": offset}
    if generation is not None:
        new["observedGeneration"] = generation
    if previous.get("phase") not in (RunPhase.COMPLETED, RunPhase.FAILED):
        new["phase"] = RunPhase.ENDED
    new["conditions"] = set_condition(
        previous.get("conditions"),
        ConditionType.RUN_ENDED,
        _run_ended(offset),
        now=now,
        generation=generation,
    )
    return new


def invalid(
    previous: Mapping[str, Any], *, field: str, message: str, generation: int | None, now: str
) -> dict[str, Any]:
    """The status of a spec the operator refuses: phase Invalid, ``Valid=False`` and
    ``Ready=False`` saying which field and why; the generation counts as acted on (refused)."""
    refused = Verdict(False, "InvalidSpec", f"{field}: {message}")
    conditions = set_condition(
        previous.get("conditions"), ConditionType.VALID, refused, now=now, generation=generation
    )
    new: dict[str, Any] = {
        "phase": RunPhase.INVALID,
        "conditions": set_condition(
            conditions, ConditionType.READY, refused, now=now, generation=generation
        ),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    return new


def ready(
    *,
    acted: int | None,
    generation: int | None,
    statefulset: Mapping[str, Any] | None,
    unreachable: str | None,
    spark_required: bool,
    spark_state: str | None,
    orderers: int = 1,
) -> Verdict:
    """The ``Ready`` condition: True when the spec of ``generation`` was acted on (``acted`` is
    ``status.observedGeneration``), the orderers' StatefulSet has its pods ready, every orderer
    answers (``unreachable`` is None; else which do not and why), and the Spark job is RUNNING
    or the spec has none. False otherwise, with the first reason in that order: what a user must
    look at first. ``orderers``: N, the orderers of the run (only the message says it)."""
    if generation is not None and acted != generation:
        return Verdict(
            False,
            "Reconciling",
            f"generation {generation} is not acted on yet (last acted on: {acted})",
        )
    pods = _pods_not_ready(statefulset)
    if pods is not None:
        return Verdict(False, "OrdererPodNotReady", pods)
    if unreachable is not None:
        return Verdict(False, "OrdererUnreachable", unreachable)
    if spark_required and spark_state != SPARK_RUNNING:
        if spark_state in SPARK_DONE:
            failed = SPARK_DONE[spark_state] == RunPhase.FAILED
            reason = "SparkFailed" if failed else "SparkCompleted"
            return Verdict(False, reason, f"the Spark job is {spark_state}")
        return Verdict(False, "SparkNotRunning", f"the Spark job is {spark_state or 'absent'}")
    job = "the Spark job is RUNNING" if spark_required else "the spec has no Spark stage"
    if orderers > 1:
        pods = f"the {orderers} orderers' pods are ready and answer"
        return Verdict(True, "Serving", f"{pods}; {job}")
    return Verdict(True, "Serving", f"the orderer's pod is ready and answers; {job}")


def _pods_not_ready(statefulset: Mapping[str, Any] | None) -> str | None:
    """Why the StatefulSet's pods are not all ready, or None when they are."""
    if statefulset is None:
        return "the orderer's StatefulSet does not exist or cannot be read"
    name = statefulset.get("metadata", {}).get("name", "")
    wanted = int((statefulset.get("spec") or {}).get("replicas", 1))
    ready_pods = int((statefulset.get("status") or {}).get("readyReplicas") or 0)
    if wanted < 1:
        return f"StatefulSet {name} is scaled to {wanted} pods"
    if ready_pods < wanted:
        return f"StatefulSet {name}: {ready_pods}/{wanted} pods ready"
    return None


def observe(
    previous: Mapping[str, Any],
    *,
    valid: ValidSpec,
    endpoint: str,
    stats: Stats | None,
    error: str | None,
    spark: Mapping[str, Any] | None,
    statefulset: Mapping[str, Any] | None,
    generation: int | None,
    now: str,
    page: PageAddress | None = None,
) -> tuple[dict[str, Any], list[Notice]]:
    """New status fields and the Events they call for, for a run of one orderer.

    ``stats`` is None when the orderer could not be reached (``error`` says why); ``spark`` is
    the SparkApplication's body, or None when there is none (yet); ``statefulset`` the
    orderer's StatefulSet, or None when it cannot be read; ``generation`` the
    ``metadata.generation`` of the spec ``valid`` comes from; ``page`` the live page of
    ``spec.spark.ui`` (None: there is none).
    """
    notices: list[Notice] = []
    verdicts: dict[ConditionType, Verdict] = {ConditionType.VALID: _VALID}
    new: dict[str, Any] = {"endpoint": endpoint, "lastUpdate": now}
    phase = previous.get("phase")

    if stats is None:
        verdicts[ConditionType.ORDERER_REACHABLE] = Verdict(
            False, "Unreachable", error or "GetStats failed"
        )
        phase = _unanswered(previous, phase)
        notices += _lost(previous, error or "GetStats failed")
    else:
        verdicts[ConditionType.ORDERER_REACHABLE] = Verdict(
            True, "GetStats", f"the orderer answers at {endpoint}"
        )
        new.update(_counters(stats))
        wrong = drift(valid, stats.config)
        verdicts[ConditionType.CONFIGURED] = (
            Verdict(False, "Drift", "; ".join(wrong))
            if wrong
            else Verdict(True, "InSync", "the orderer runs the spec's live parameters")
        )
        if new["runEnded"]:
            verdicts[ConditionType.RUN_ENDED] = _run_ended(new["nextOffset"])
        phase = RunPhase.ENDED if new["runEnded"] else RunPhase.RUNNING
        barriers, notices = barrier_report(previous, stats, new["barriers"])
        new["barriers"].update(barriers)
        notices += _late_burst(previous, new, valid)
    unreachable = None if stats is not None else error or "GetStats failed"
    return _with_spark_and_ready(
        previous,
        new,
        verdicts,
        notices,
        phase,
        valid=valid,
        spark=spark,
        statefulset=statefulset,
        unreachable=unreachable,
        generation=generation,
        now=now,
        page=page,
    )


def observe_orderers(
    previous: Mapping[str, Any],
    *,
    valid: ValidSpec,
    endpoint: str,
    answers: Sequence[OrdererAnswer],
    spark: Mapping[str, Any] | None,
    statefulset: Mapping[str, Any] | None,
    generation: int | None,
    now: str,
    page: PageAddress | None = None,
) -> tuple[dict[str, Any], list[Notice]]:
    """:func:`observe` for a run over several orderers: ``answers`` holds every orderer's, in
    index order (:mod:`evb_operator.status.orderers` says how they are summed); ``endpoint``
    is the run's address (its Service, which answers for any one orderer and names the others);
    ``page`` as :func:`observe`'s (one live page for the run: the job's).

    ``OrdererReachable`` and ``Ready`` are True only when every orderer answers, and name those
    that do not; ``Configured`` only when every orderer that answers runs the spec's live
    parameters, naming those that do not; the run has ended (``RunEnded``, phase Ended) only
    when every orderer says so."""
    view = observe_each(previous, valid=valid, answers=answers)
    verdicts: dict[ConditionType, Verdict] = {
        ConditionType.VALID: _VALID,
        ConditionType.ORDERER_REACHABLE: view.reachable,
    }
    new: dict[str, Any] = {"endpoint": endpoint, "lastUpdate": now, **view.fields}
    notices = list(view.notices)
    phase = previous.get("phase")
    if view.unreachable is not None:
        notices += _lost(previous, view.unreachable)
    if view.configured is not None:
        verdicts[ConditionType.CONFIGURED] = view.configured
    if view.phase is None:
        phase = _unanswered(previous, phase)
    elif view.unreachable is None or phase not in FINAL_PHASES:
        phase = view.phase
    if view.run_ended:
        verdicts[ConditionType.RUN_ENDED] = _run_ended(new["nextOffset"])
    if view.phase is not None:
        notices += _late_burst(previous, new, valid)
    return _with_spark_and_ready(
        previous,
        new,
        verdicts,
        notices,
        phase,
        valid=valid,
        spark=spark,
        statefulset=statefulset,
        unreachable=view.unreachable,
        generation=generation,
        now=now,
        orderers=len(answers),
        page=page,
    )


def _unanswered(previous: Mapping[str, Any], phase: Any) -> Any:
    """The phase when no orderer answers: Pending, unless the run is over."""
    return phase if phase in FINAL_PHASES else RunPhase.PENDING


def _lost(previous: Mapping[str, Any], why: str) -> list[Notice]:
    """A Warning when the orderers answered at the last update and do not now."""
    was = find(previous.get("conditions"), ConditionType.ORDERER_REACHABLE)
    if was is not None and was.get("status") == "True":
        return [Notice("Warning", "OrdererUnreachable", why)]
    return []


def _with_spark_and_ready(
    previous: Mapping[str, Any],
    new: dict[str, Any],
    verdicts: dict[ConditionType, Verdict],
    notices: list[Notice],
    phase: Any,
    *,
    valid: ValidSpec,
    spark: Mapping[str, Any] | None,
    statefulset: Mapping[str, Any] | None,
    unreachable: str | None,
    generation: int | None,
    now: str,
    orderers: int = 1,
    page: PageAddress | None = None,
) -> tuple[dict[str, Any], list[Notice]]:
    """What one orderer and several share: the Spark job's state (its final state is the
    run's phase) and its live page, TLS, ``Ready``, and the conditions written."""
    spark_state = None
    if spark is not None:
        state = (spark.get("status") or {}).get("applicationState") or {}
        spark_state = state.get("state")
        new["spark"] = {
            "name": spark.get("metadata", {}).get("name", ""),
            "state": spark_state or "PENDING",
        }
        if state.get("errorMessage"):
            new["spark"]["errorMessage"] = state["errorMessage"]
        elif (previous.get("spark") or {}).get("errorMessage") is not None:
            # the job was resubmitted (its state has no error now): None, which the status
            # patch (a merge patch) takes as removing the old message
            new["spark"]["errorMessage"] = None
        if spark_state in SPARK_DONE and phase != RunPhase.PENDING:
            phase = SPARK_DONE[spark_state]
        if spark_state in SPARK_DONE and previous.get("spark", {}).get("state") != spark_state:
            failed = SPARK_DONE[spark_state] == RunPhase.FAILED
            notices.append(
                Notice(
                    "Warning" if failed else "Normal",
                    "SparkFailed" if failed else "SparkCompleted",
                    state.get("errorMessage") or f"the Spark job is {spark_state}",
                )
            )
    _page(previous, new, page)
    if valid.tls is not None:
        served = unreachable is None
        verdicts[ConditionType.TLS] = _tls_condition(valid.tls, valid.auth is not None, served)
    verdicts[ConditionType.READY] = ready(
        acted=_generation_of(previous),
        generation=generation,
        statefulset=statefulset,
        unreachable=unreachable,
        spark_required=valid.has_spark,
        spark_state=spark_state,
        orderers=orderers,
    )
    conditions: list[dict[str, Any]] = list(previous.get("conditions") or ())
    for kind, verdict in verdicts.items():
        conditions = set_condition(conditions, kind, verdict, now=now, generation=generation)
    new["phase"] = phase or RunPhase.PENDING
    new["conditions"] = conditions
    return new, notices


def _page(previous: Mapping[str, Any], new: dict[str, Any], page: PageAddress | None) -> None:
    """``status.spark.ui``: the live page's URL, known from the spec alone (so written even
    before the SparkApplication can be read). Gone from the spec: None, which the status patch
    (a merge patch) takes as removing it, only when the previous status had one."""
    if page is not None:
        new.setdefault("spark", {})["ui"] = page.url
    elif (previous.get("spark") or {}).get("ui") is not None:
        new.setdefault("spark", {})["ui"] = None


def _counters(stats: Stats) -> dict[str, Any]:
    """The status fields a ``GetStats`` answer fills."""
    totals = stats.totals
    sources = stats.sources.values()
    new: dict[str, Any] = {
        "window": float(stats.config.build_window),
        "fragments": totals.received,
        "emitted": totals.emitted,
        "late": totals.late,
        "dropped": totals.dropped,
        "queued": stats.queued,
        "nextOffset": stats.next_offset,
        "sources": len(stats.sources),
        "deadSources": sum(1 for s in sources if s.dead),
        "pausedSources": sum(1 for s in sources if s.paused),
        "barriers": {
            k: getattr(stats.barriers, k)
            for k in ("complete", "incomplete", "homogeneous", "heterogeneous")
        },
        "missing": {str(k): v for k, v in stats.missing.items()},
        "runEnded": stats.run_ended,
        "run": stats.run,
        "runStartOffset": stats.run_start_offset,
    }
    if stats.high_water_mark is not None:
        new["highWaterMark"] = str(stats.high_water_mark)
    consumers = stats.consumers.values()
    if consumers:  # the slowest consumer's, in fragments and in seconds
        new["consumerLag"] = max(c.lag for c in consumers)
        new["consumerLagSeconds"] = max(float(c.lag_seconds) for c in consumers)
    return new


def _tls_condition(tls: Tls, token: bool, served: bool) -> Verdict:
    """TLS=True once the orderer answered the operator over TLS (the operator never falls back
    to plaintext, so an answer proves the endpoint serves TLS); False until then. ``token``:
    the spec has ``spec.auth`` too."""
    how = "mutual TLS" if tls.mutual else "TLS"
    if token:
        how += " with a bearer token"
    if served:
        return Verdict(
            True,
            "Served",
            f"the orderer serves {how} with the certificate of Secret {tls.secret_name}",
        )
    return Verdict(False, "NotVerified", f"the orderer has not answered over {how} yet")


def _late_burst(
    previous: Mapping[str, Any], new: Mapping[str, Any], valid: ValidSpec
) -> list[Notice]:
    """A Warning when more late fragments than ``alerts.lateBurst`` came since the last update."""
    notices = []
    late = new["late"] - count(previous, "late")
    if late >= valid.alerts.late_burst:
        notices.append(
            Notice(
                "Warning",
                "LateDataBurst",
                f"{late} late fragments since the last update ({new['late']} in this run,"
                f" {new['dropped']} dropped); a source lags more than buildWindow"
                f" ({new['window']:g} s)",
            )
        )
    return notices
