"""An EventBuilder's status, and the Events worth posting, from what the operator observed.

Called by the status timer in :mod:`evb_operator.handlers` with the orderer's ``GetStats`` answer
(:func:`orderer.client.get_stats_async`, a :class:`orderer.stats.Stats`), the orderer's
StatefulSet and the SparkApplication. Pure: the previous status comes in (counters from one update
to the next are compared through it, so the operator keeps no memory of its own and survives
restarts), the new status fields and the :class:`Notice` list go out; the caller patches and posts.

Generations, as Kubernetes users read them (a Deployment's status works the same way):
``status.observedGeneration`` is the ``metadata.generation`` the operator last acted on (accepted
or refused; only the create/update handlers move it, never the status timer), and every condition
carries the ``observedGeneration`` it was computed from. ``Ready`` stays False (``Reconciling``)
while the spec's generation is newer than the one acted on, so ``kubectl wait
--for=condition=Ready`` after an ``apply`` does not return on the previous spec's readiness.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evb_operator.phases import FINAL_PHASES, ConditionType, RunPhase
from evb_operator.validation import ValidSpec
from orderer.config import LIVE_PARAMETERS, OrdererConfig
from orderer.stats import BarrierRecord, Stats

__all__ = [
    "Notice",
    "accepted",
    "begun",
    "ended",
    "invalid",
    "observe",
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


@dataclass(frozen=True)
class Notice:
    """A Kubernetes Event to post on the EventBuilder."""

    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    """CamelCase reason (``IncompleteBarrier``)."""
    message: str


@dataclass(frozen=True)
class Verdict:
    """One condition's value: what :func:`set_condition` writes under a type."""

    status: bool
    reason: str
    """CamelCase, as the Kubernetes API conventions ask (a machine reads it)."""
    message: str
    """For a human: what is (not) ready and why."""


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type: ConditionType,
    verdict: Verdict,
    *,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """``conditions`` with ``type`` set to ``verdict``, computed from the spec of
    ``generation`` (``observedGeneration``; left out when unknown); ``lastTransitionTime`` moves
    only when the status does, as the conventions ask."""
    value = "True" if verdict.status else "False"
    since = now
    out: list[dict[str, Any]] = []
    for condition in conditions or ():
        if condition.get("type") != type:
            out.append(dict(condition))
        elif condition.get("status") == value:
            since = condition.get("lastTransitionTime", now)
    entry: dict[str, Any] = {
        "type": str(type),
        "status": value,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    return sorted([*out, entry], key=lambda c: _ORDER.get(c.get("type", ""), len(_ORDER)))


_ORDER = {str(kind): index for index, kind in enumerate(ConditionType)}
"""Conditions in :class:`ConditionType` order (Ready first): a stable list, so a status update
that changes nothing patches nothing."""

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
    was = _find(conditions, ConditionType.READY)
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


def _find(conditions: Sequence[Mapping[str, Any]] | None, type: ConditionType) -> Any:
    return next((c for c in conditions or () if c.get("type") == type), None)


def ready(
    *,
    acted: int | None,
    generation: int | None,
    statefulset: Mapping[str, Any] | None,
    unreachable: str | None,
    spark_required: bool,
    spark_state: str | None,
) -> Verdict:
    """The ``Ready`` condition: True when the spec of ``generation`` was acted on (``acted`` is
    ``status.observedGeneration``), the orderer's StatefulSet has its pod ready, the orderer
    answers (``unreachable`` is None; else why not), and the Spark job is RUNNING or the spec
    has none. False otherwise, with the first reason in that order: what a user must look at
    first."""
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


def _count(mapping: Mapping[str, Any] | None, *path: str) -> int:
    node: Any = mapping or {}
    for key in path:
        if not isinstance(node, Mapping):
            return 0
        node = node.get(key, 0)
    return int(node or 0)


def _drift(valid: ValidSpec, config: OrdererConfig) -> list[str]:
    """Live parameters whose value in the orderer differs from the spec's, both read the same
    way (:meth:`OrdererConfig.to_mapping`: ``source_timeout`` ``off`` when disabled)."""
    wanted, reported = valid.orderer.to_mapping(), config.to_mapping()
    return [
        f"{name}: spec {wanted[name]!r}, orderer {reported[name]!r}"
        for name in LIVE_PARAMETERS
        if wanted[name] != reported[name]
    ]


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
) -> tuple[dict[str, Any], list[Notice]]:
    """New status fields and the Events they call for.

    ``stats`` is None when the orderer could not be reached (``error`` says why); ``spark`` is
    the SparkApplication's body, or None when there is none (yet); ``statefulset`` the
    orderer's StatefulSet, or None when it cannot be read; ``generation`` the
    ``metadata.generation`` of the spec ``valid`` comes from.
    """
    notices: list[Notice] = []
    verdicts: dict[ConditionType, Verdict] = {ConditionType.VALID: _VALID}
    new: dict[str, Any] = {"endpoint": endpoint, "lastUpdate": now}
    phase = previous.get("phase")

    if stats is None:
        verdicts[ConditionType.ORDERER_REACHABLE] = Verdict(
            False, "Unreachable", error or "GetStats failed"
        )
        if phase not in FINAL_PHASES:
            phase = RunPhase.PENDING
        was = _find(previous.get("conditions"), ConditionType.ORDERER_REACHABLE)
        if was is not None and was.get("status") == "True":
            notices.append(Notice("Warning", "OrdererUnreachable", error or "GetStats failed"))
    else:
        verdicts[ConditionType.ORDERER_REACHABLE] = Verdict(
            True, "GetStats", f"the orderer answers at {endpoint}"
        )
        new.update(_counters(stats))
        drift = _drift(valid, stats.config)
        verdicts[ConditionType.CONFIGURED] = (
            Verdict(False, "Drift", "; ".join(drift))
            if drift
            else Verdict(True, "InSync", "the orderer runs the spec's live parameters")
        )
        if new["runEnded"]:
            verdicts[ConditionType.RUN_ENDED] = _run_ended(new["nextOffset"])
        phase = RunPhase.ENDED if new["runEnded"] else RunPhase.RUNNING
        barriers, notices = _barrier_report(previous, stats, new["barriers"])
        new["barriers"].update(barriers)
        notices += _late_burst(previous, new, valid)

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
    if "tls" in valid.spec:
        verdicts[ConditionType.TLS] = _tls_condition(valid, stats is not None)
    verdicts[ConditionType.READY] = ready(
        acted=_generation_of(previous),
        generation=generation,
        statefulset=statefulset,
        unreachable=None if stats is not None else error or "GetStats failed",
        spark_required=valid.has_spark,
        spark_state=spark_state,
    )
    conditions: list[dict[str, Any]] = list(previous.get("conditions") or ())
    for kind, verdict in verdicts.items():
        conditions = set_condition(conditions, kind, verdict, now=now, generation=generation)
    new["phase"] = phase or RunPhase.PENDING
    new["conditions"] = conditions
    return new, notices


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


def _tls_condition(valid: ValidSpec, served: bool) -> Verdict:
    """TLS=True once the orderer answered the operator over TLS (the operator never falls back
    to plaintext, so an answer proves the endpoint serves TLS); False until then."""
    tls = valid.spec["tls"]
    how = "mutual TLS" if tls["mutual"] else "TLS"
    if "auth" in valid.spec:
        how += " with a bearer token"
    if served:
        return Verdict(
            True,
            "Served",
            f"the orderer serves {how} with the certificate of Secret {tls['secretName']}",
        )
    return Verdict(False, "NotVerified", f"the orderer has not answered over {how} yet")


def _late_burst(
    previous: Mapping[str, Any], new: Mapping[str, Any], valid: ValidSpec
) -> list[Notice]:
    """A Warning when more late fragments than ``alerts.lateBurst`` came since the last update."""
    notices = []
    late = new["late"] - _count(previous, "late")
    if late >= valid.spec["alerts"]["lateBurst"]:
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


# ----------------------------------------------------------------------------- barriers

BARRIER_EVENTS_PER_UPDATE = 5
"""At most this many Events name one barrier each per status update; one more sums up the rest.
A run whose sources keep missing barriers must not flood the namespace's Events."""

_FLAGS = (("incomplete", "complete"), ("heterogeneous", "homogeneous"))
"""Each counter of ``stats.barriers`` worth reporting and the barrier log's flag it counts the
absence of."""


def _barrier_report(
    previous: Mapping[str, Any], stats: Stats, counters: Mapping[str, int]
) -> tuple[dict[str, Any], list[Notice]]:
    """What the orderer's barrier log (``stats.barrier_log``, oldest first) adds since the
    last update: the status fields under ``barriers`` besides the ``counters`` (of this answer),
    and the Events.

    Each incomplete barrier is a Warning naming its output offset and the sources that sent none;
    each heterogeneous one names the type each source sent. ``barriers.lastReportedOffset`` (the
    newest barrier looked at) is the operator's memory, kept in the status so that a restarted
    operator repeats nothing; an orderer whose log is shorter than that offset started a new log
    (a new volume), and its barriers are reported from the start.

    At most :data:`BARRIER_EVENTS_PER_UPDATE` barriers get an Event of their own, the oldest
    first; one more sums up the rest. The answer holds only the newest barriers (the operator
    asks for ``handlers.BARRIER_LOG_LIMIT``): when more resolved since the last update, the ones
    before the oldest returned are counted from the totals (this answer's counters less the
    previous status's) and the summary says so, without their offsets or sources."""
    before: Mapping[str, Any] = previous.get("barriers") or {}
    cursor = before.get("lastReportedOffset")
    out: dict[str, Any] = {}
    if cursor is not None and int(cursor) >= stats.next_offset:  # a new log
        cursor, before = None, {}
        if "lastIncomplete" in (previous.get("barriers") or {}):
            out["lastIncomplete"] = None  # a merge patch deletes it: it names the old log
    log = [entry for entry in stats.barrier_log if cursor is None or entry.offset > int(cursor)]
    notable = [entry for entry in log if not entry.complete or not entry.homogeneous]
    shown = BARRIER_EVENTS_PER_UPDATE
    at = _wall_clock(stats)
    notices = [_barrier_notice(entry, at) for entry in notable[:shown]]
    unlisted = {
        counter: max(
            0, counters[counter] - _count(before, counter) - sum(not getattr(e, flag) for e in log)
        )
        for counter, flag in _FLAGS
    }
    if notable[shown:] or any(unlisted.values()):
        start = int(cursor) + 1 if cursor is not None else 0
        returned = len(stats.barrier_log)
        notices.append(_barrier_summary(notable[shown:], unlisted, start, returned))
    if log:
        out["lastReportedOffset"] = log[-1].offset
    elif cursor is not None:
        out["lastReportedOffset"] = int(cursor)
    incomplete = [entry for entry in log if not entry.complete]
    if incomplete:
        out["lastIncomplete"] = _incomplete(incomplete[-1], at)
    elif before.get("lastIncomplete"):
        out["lastIncomplete"] = before["lastIncomplete"]
    return out, notices


_Clock = Callable[[float], str | None]


def _wall_clock(stats: Stats) -> _Clock:
    """Orderer time -> ``YYYY-MM-DDTHH:MM:SSZ`` (the answer's ``wall_time`` is the Unix time at
    its orderer time ``now``); None for every time when the answer has no ``wall_time`` (0: an
    orderer from before it)."""
    wall, now = stats.wall_time, stats.now

    def clock(t: float) -> str | None:
        if not wall:
            return None
        unix = float(wall) - (float(now) - float(t))
        return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return clock


def _types(entry: BarrierRecord) -> str:
    types = sorted(entry.types.items())
    return ", ".join(f"source {source}: type {kind}" for source, kind in types) or "none"


def _sources(ids: Sequence[int]) -> str:
    return ", ".join(str(source) for source in ids)


def _barrier_notice(entry: BarrierRecord, at: _Clock) -> Notice:
    """One barrier's Event: a Warning for an incomplete one (the sources that sent no barrier
    fragment), Normal for a complete heterogeneous one (every source's fragment is in the output,
    the sources disagree on the type)."""
    when = at(entry.t)
    where = f"barrier at output offset {entry.offset}" + (f" (resolved {when})" if when else "")
    mixed = "" if entry.homogeneous else "heterogeneous "
    if not entry.complete:
        return Notice(
            "Warning",
            "IncompleteBarrier",
            f"incomplete {mixed}{where}: no barrier from source(s) {_sources(entry.missing)};"
            f" sent {_types(entry)}",
        )
    return Notice("Normal", "HeterogeneousBarrier", f"heterogeneous {where}: {_types(entry)}")


def _barrier_summary(
    rest: Sequence[BarrierRecord], unlisted: Mapping[str, int], start: int, returned: int
) -> Notice:
    """The barriers beyond the Events of this update, in one Event: how many incomplete and
    heterogeneous since which output offset, and which sources missed them."""
    counts = {
        counter: unlisted[counter] + sum(not getattr(e, flag) for e in rest)
        for counter, flag in _FLAGS
    }
    if rest and not any(unlisted.values()):
        start = rest[0].offset
    what = " and ".join(f"{n} more {counter}" for counter, n in counts.items() if n)
    message = f"and {what} barrier(s) since output offset {start}"
    if rest:
        message += f", the newest at {rest[-1].offset}"
    missed: dict[int, int] = {}
    for entry in rest:
        for source in entry.missing:
            missed[source] = missed.get(source, 0) + 1
    if missed:
        message += "; missed by " + ", ".join(
            f"source {source}: {n}" for source, n in sorted(missed.items())
        )
    lost = max(unlisted.values())
    if lost:
        where = (
            f"resolved before the {returned} newest the orderer returned"
            if returned
            else "not in the orderer's answer"
        )
        message += f"; {lost} of them {where} (counted from its totals)"
    incomplete = counts["incomplete"] > 0
    return Notice(
        "Warning" if incomplete else "Normal",
        "IncompleteBarriers" if incomplete else "HeterogeneousBarriers",
        message,
    )


def _incomplete(entry: BarrierRecord, at: _Clock) -> dict[str, Any]:
    """``status.barriers.lastIncomplete``: the newest incomplete barrier."""
    last: dict[str, Any] = {
        "offset": entry.offset,
        "missing": list(entry.missing),
        "types": {str(source): kind for source, kind in sorted(entry.types.items())},
    }
    when = at(entry.t)
    if when:
        last["resolved"] = when
    return last
