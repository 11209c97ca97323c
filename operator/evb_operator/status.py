"""An EventBuilder's status, and the Events worth posting, from what the operator observed.

Called by the status timer in :mod:`evb_operator.handlers` with the orderer's ``GetStats`` answer
(:func:`orderer.client.get_stats_async`, the ``evb replay --stats`` layout) and the
SparkApplication. Pure: the previous status comes in (counters from one update to the next are
compared through it, so the operator keeps no memory of its own and survives restarts), the new
status fields and the :class:`Notice` list go out; the caller patches and posts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evb_operator.phases import FINAL_PHASES, RunPhase
from evb_operator.validation import ValidSpec
from orderer.config import LIVE_PARAMETERS

__all__ = ["Notice", "accepted", "ended", "invalid", "observe", "set_condition"]

SPARK_DONE = {
    "COMPLETED": RunPhase.COMPLETED,
    "FAILED": RunPhase.FAILED,
    "SUBMISSION_FAILED": RunPhase.FAILED,
}
"""The SparkApplication's final states (the Spark operator's names) and the phase each means."""


@dataclass(frozen=True)
class Notice:
    """A Kubernetes Event to post on the EventBuilder."""

    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    """CamelCase reason (``IncompleteBarrier``)."""
    message: str


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    *,
    type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """``conditions`` with ``type`` set; ``lastTransitionTime`` moves only when the status
    does."""
    value = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for condition in conditions or ():
        if condition.get("type") != type:
            out.append(dict(condition))
            continue
        found = True
        since = condition.get("lastTransitionTime", now)
        if condition.get("status") != value:
            since = now
        out.append(
            {
                "type": type,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
            }
        )
    if not found:
        out.append(
            {
                "type": type,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
            }
        )
    return out


def _valid(conditions: Sequence[Mapping[str, Any]] | None, now: str) -> list[dict[str, Any]]:
    return set_condition(
        conditions,
        type="Valid",
        status=True,
        reason="Accepted",
        message="the spec is valid",
        now=now,
    )


def _run_ended(
    conditions: Sequence[Mapping[str, Any]] | None, offset: int, now: str
) -> list[dict[str, Any]]:
    return set_condition(
        conditions,
        type="RunEnded",
        status=True,
        reason="EndRun",
        message=f"the run ended at offset {offset}",
        now=now,
    )


def accepted(previous: Mapping[str, Any], *, endpoint: str, now: str) -> dict[str, Any]:
    """The status of a spec the operator accepted (its children exist): a ``Valid=True``
    condition, the endpoint, and Pending unless the run already has a phase of its own."""
    new: dict[str, Any] = {
        "conditions": _valid(previous.get("conditions"), now),
        "endpoint": endpoint,
    }
    if previous.get("phase") in (None, RunPhase.INVALID):
        new["phase"] = RunPhase.PENDING
    return new


def ended(previous: Mapping[str, Any], *, offset: int, now: str) -> dict[str, Any]:
    """The status once ``EndRun`` answered with the run's last ``offset``: Ended, unless the
    Spark job already finished (Completed or Failed say more)."""
    new: dict[str, Any] = {"runEnded": True, "nextOffset": offset}
    if previous.get("phase") not in (RunPhase.COMPLETED, RunPhase.FAILED):
        new["phase"] = RunPhase.ENDED
    new["conditions"] = _run_ended(previous.get("conditions"), offset, now)
    return new


def invalid(previous: Mapping[str, Any], *, field: str, message: str, now: str) -> dict[str, Any]:
    """The status of a spec the operator refuses: phase Invalid and a ``Valid=False`` condition
    saying which field and why."""
    return {
        "phase": RunPhase.INVALID,
        "conditions": set_condition(
            previous.get("conditions"),
            type="Valid",
            status=False,
            reason="InvalidSpec",
            message=f"{field}: {message}",
            now=now,
        ),
    }


def _count(mapping: Mapping[str, Any] | None, *path: str) -> int:
    node: Any = mapping or {}
    for key in path:
        if not isinstance(node, Mapping):
            return 0
        node = node.get(key, 0)
    return int(node or 0)


def _drift(valid: ValidSpec, reported: Mapping[str, Any]) -> list[str]:
    """Live parameters whose value in the orderer differs from the spec's."""
    wanted = valid.orderer.to_mapping()
    return [
        f"{name}: spec {wanted[name]!r}, orderer {reported.get(name)!r}"
        for name in LIVE_PARAMETERS
        if wanted[name] != reported.get(name)
    ]


def observe(
    previous: Mapping[str, Any],
    *,
    valid: ValidSpec,
    endpoint: str,
    stats: Mapping[str, Any] | None,
    error: str | None,
    spark: Mapping[str, Any] | None,
    now: str,
) -> tuple[dict[str, Any], list[Notice]]:
    """New status fields and the Events they call for.

    ``stats`` is None when the orderer could not be reached (``error`` says why); ``spark`` is
    the SparkApplication's body, or None when there is none (yet).
    """
    notices: list[Notice] = []
    conditions = _valid(previous.get("conditions"), now)
    new: dict[str, Any] = {"endpoint": endpoint, "lastUpdate": now}
    phase = previous.get("phase")

    if stats is None:
        conditions = set_condition(
            conditions,
            type="OrdererReachable",
            status=False,
            reason="Unreachable",
            message=error or "GetStats failed",
            now=now,
        )
        if phase not in FINAL_PHASES:
            phase = RunPhase.PENDING
        was_reachable = any(
            c.get("type") == "OrdererReachable" and c.get("status") == "True"
            for c in previous.get("conditions") or ()
        )
        if was_reachable:
            notices.append(Notice("Warning", "OrdererUnreachable", error or "GetStats failed"))
    else:
        conditions = set_condition(
            conditions,
            type="OrdererReachable",
            status=True,
            reason="GetStats",
            message=f"the orderer answers at {endpoint}",
            now=now,
        )
        totals = stats.get("totals", {})
        barriers = {
            k: _count(stats, "barriers", k)
            for k in ("complete", "incomplete", "homogeneous", "heterogeneous")
        }
        sources = stats.get("sources", {})
        new.update(
            window=float(stats["config"]["build_window"]),
            fragments=_count(totals, "received"),
            emitted=_count(totals, "emitted"),
            late=_count(totals, "late"),
            dropped=_count(totals, "dropped"),
            queued=_count(stats, "queued"),
            nextOffset=_count(stats, "next_offset"),
            sources=len(sources),
            deadSources=sum(1 for s in sources.values() if s.get("dead")),
            pausedSources=sum(1 for s in sources.values() if s.get("paused")),
            barriers=barriers,
            missing={str(k): int(v) for k, v in (stats.get("missing") or {}).items()},
            runEnded=bool(stats.get("run_ended")),
        )
        if stats.get("high_water_mark") is not None:
            new["highWaterMark"] = str(stats["high_water_mark"])
        drift = _drift(valid, stats["config"])
        conditions = set_condition(
            conditions,
            type="Configured",
            status=not drift,
            reason="InSync" if not drift else "Drift",
            message="the orderer runs the spec's live parameters"
            if not drift
            else "; ".join(drift),
            now=now,
        )
        if new["runEnded"]:
            conditions = _run_ended(conditions, new["nextOffset"], now)
        phase = RunPhase.ENDED if new["runEnded"] else RunPhase.RUNNING
        notices += _counter_notices(previous, new, valid)

    if spark is not None:
        state = (spark.get("status") or {}).get("applicationState") or {}
        new["spark"] = {
            "name": spark.get("metadata", {}).get("name", ""),
            "state": state.get("state", "PENDING"),
        }
        if state.get("errorMessage"):
            new["spark"]["errorMessage"] = state["errorMessage"]
        if state.get("state") in SPARK_DONE and phase != RunPhase.PENDING:
            phase = SPARK_DONE[state["state"]]
        if state.get("state") in SPARK_DONE and previous.get("spark", {}).get("state") != state.get(
            "state"
        ):
            failed = SPARK_DONE[state["state"]] == RunPhase.FAILED
            notices.append(
                Notice(
                    "Warning" if failed else "Normal",
                    "SparkFailed" if failed else "SparkCompleted",
                    state.get("errorMessage") or f"the Spark job is {state['state']}",
                )
            )
    if "tls" in valid.spec:
        conditions = set_condition(conditions, **_tls_condition(valid, stats is not None), now=now)
    new["phase"] = phase or RunPhase.PENDING
    new["conditions"] = conditions
    return new, notices


def _tls_condition(valid: ValidSpec, served: bool) -> dict[str, Any]:
    """TLS=True once the orderer answered the operator over TLS (the operator never falls back
    to plaintext, so an answer proves the endpoint serves TLS); False until then."""
    tls = valid.spec["tls"]
    how = "mutual TLS" if tls["mutual"] else "TLS"
    if "auth" in valid.spec:
        how += " with a bearer token"
    if served:
        return {
            "type": "TLS",
            "status": True,
            "reason": "Served",
            "message": f"the orderer serves {how} with the certificate of Secret"
            f" {tls['secretName']}",
        }
    return {
        "type": "TLS",
        "status": False,
        "reason": "NotVerified",
        "message": f"the orderer has not answered over {how} yet",
    }


def _counter_notices(
    previous: Mapping[str, Any], new: Mapping[str, Any], valid: ValidSpec
) -> list[Notice]:
    notices = []
    incomplete = new["barriers"]["incomplete"] - _count(previous, "barriers", "incomplete")
    if incomplete > 0:
        missing = ", ".join(
            f"source {k}: {v}"
            for k, v in sorted(new["missing"].items(), key=lambda item: int(item[0]))
        )
        notices.append(
            Notice(
                "Warning",
                "IncompleteBarrier",
                f"{incomplete} incomplete barrier(s) since the last update"
                f" ({new['barriers']['incomplete']} in this run); barriers missed so far by"
                f" {missing or 'no source'}",
            )
        )
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
