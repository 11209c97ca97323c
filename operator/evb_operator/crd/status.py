"""The status half of the ``EventBuilder`` CRD: the status schema and the printer columns.

Apart from :mod:`evb_operator.crd.definition` (which puts them into the CRD it builds) because
they change with what the operator observes (:mod:`evb_operator.status`), not with what a user
may ask for.

The schema allows every field :mod:`evb_operator.status` writes (the API server drops the others
from a status patch, silently): ``observedGeneration`` and conditions as the Kubernetes API
conventions spell them (``metav1.Condition``: type, status, reason, message,
lastTransitionTime, observedGeneration), so ``kubectl wait --for=condition=Ready`` works.

The printer columns give their unit where a value has one (seconds, an offset in the ordered
log, fragments); those of priority 1 show with ``kubectl get -o wide`` only. Each names a field
of the status schema (``tests/operator/crd/test_crd.py`` checks it).
"""

from __future__ import annotations

from typing import Any

from evb_operator.phases import ConditionType, RunPhase, describe, describe_conditions

__all__ = ["PRINTER_COLUMNS", "STATUS_SCHEMA"]

_COUNTER = {"type": "integer", "format": "int64", "minimum": 0}
_GENERATION = {**_COUNTER, "minimum": 1}


def _condition() -> dict[str, Any]:
    """One condition, as ``metav1.Condition`` declares it (same patterns and bounds)."""
    return {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": {
                "type": "string",
                "maxLength": 316,
                "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            },
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1024,
                "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                "description": "Why, in CamelCase (for machines).",
            },
            "message": {
                "type": "string",
                "maxLength": 32768,
                "description": "Why, for humans.",
            },
            "lastTransitionTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the status last changed.",
            },
            "observedGeneration": {
                **_GENERATION,
                "description": "metadata.generation of the spec the condition was computed"
                " from: older than metadata.generation means out of date.",
            },
        },
    }


def _barriers_schema() -> dict[str, Any]:
    """``status.barriers``: the orderer's totals, and where the operator is in its barrier log
    (the Events of :mod:`evb_operator.status` report each barrier after that offset once)."""
    source_ids = {"type": "array", "items": {"type": "integer", "minimum": 0}}
    return {
        "type": "object",
        "description": "Barriers resolved by the orderer in this run.",
        "properties": {
            **{
                name: _COUNTER
                for name in ("complete", "incomplete", "homogeneous", "heterogeneous")
            },
            "lastReportedOffset": {
                **_COUNTER,
                "description": "Output offset of the newest barrier the operator has reported"
                " on (in an Event or a summary Event): a restarted operator reports only the"
                " barriers after it.",
            },
            "lastIncomplete": {
                "type": "object",
                "description": "The newest incomplete barrier.",
                "properties": {
                    "offset": {**_COUNTER, "description": "Its output offset."},
                    "missing": {**source_ids, "description": "Sources that sent no barrier."},
                    "types": {
                        "type": "object",
                        "description": "Per source id: the barrier type it sent.",
                        "additionalProperties": {"type": "integer", "format": "int64"},
                    },
                    "resolved": {
                        "type": "string",
                        "format": "date-time",
                        "description": "When the orderer resolved it.",
                    },
                },
            },
        },
    }


def _orderer_schema() -> dict[str, Any]:
    """One entry of ``status.orderers`` (a run over several orderers,
    :mod:`evb_operator.status.orderers`): where the orderer answers, whether it does, and its own
    counters (the run's fields are their sums). An orderer that does not answer keeps its last
    known counters, with ``ready`` false and ``message`` saying why."""
    counter = _COUNTER
    return {
        "type": "object",
        "required": ["index", "endpoint", "ready"],
        "properties": {
            "index": {**counter, "description": "The orderer's number, 0 to N-1."},
            "endpoint": {"type": "string", "description": "gRPC address of this orderer."},
            "ready": {
                "type": "boolean",
                "description": "It answered the last GetStats and runs the spec's live parameters.",
            },
            "message": {"type": "string", "description": "Why it is not ready."},
            "run": {**counter, "description": "Number of its current run."},
            "runEnded": {"type": "boolean", "description": "It ended the run."},
            "window": {"type": "number", "description": "buildWindow in force in it (seconds)."},
            "fragments": {**counter, "description": "Fragments it received."},
            "emitted": {**counter, "description": "Fragments it emitted."},
            "late": {**counter, "description": "Its late fragments."},
            "dropped": {**counter, "description": "Its late fragments dropped."},
            "queued": {**counter, "description": "Fragments waiting in its queues."},
            "nextOffset": {**counter, "description": "Length of its ordered log."},
            "runStartOffset": {
                **counter,
                "description": "Its output offset of the current run's first fragment.",
            },
            "barriers": _barriers_schema(),
        },
    }


def _status_schema() -> dict[str, Any]:
    counter = _COUNTER
    return {
        "type": "object",
        "description": "What the operator observed (from the orderer's GetStats, its"
        " StatefulSet and the SparkApplication; several orderers: every orderer's GetStats,"
        " summed).",
        "properties": {
            "observedGeneration": {
                **_GENERATION,
                "description": "metadata.generation the operator last acted on (accepted or"
                " refused).",
            },
            "phase": {
                "type": "string",
                "enum": [phase.value for phase in RunPhase],
                "description": describe(),
            },
            "endpoint": {
                "type": "string",
                "description": "gRPC address of the orderer (several orderers: of the run's"
                " Service, which answers for any one and names the others).",
            },
            "window": {
                "type": "number",
                "description": "buildWindow in force in the orderer (seconds).",
            },
            "fragments": {**counter, "description": "Fragments received."},
            "emitted": {**counter, "description": "Fragments emitted."},
            "late": {**counter, "description": "Late fragments (emitted flagged or dropped)."},
            "dropped": {**counter, "description": "Late fragments dropped (latePolicy drop)."},
            "queued": {**counter, "description": "Fragments waiting in the orderer's queues."},
            "nextOffset": {
                **counter,
                "description": "Offset of the next ordered fragment: the ordered log's length.",
            },
            "highWaterMark": {
                "type": "string",
                "description": "Largest timestamp emitted (uint64, as a string).",
            },
            "sources": {**counter, "description": "Sources known to the orderer."},
            "deadSources": {**counter, "description": "Sources declared dead."},
            "pausedSources": {**counter, "description": "Sources paused by flow control."},
            "consumerLag": {
                **counter,
                "description": "Ordered fragments the slowest consumer (e.g. the Spark job) has "
                "not committed yet: nextOffset less the lowest committed offset. Absent until a "
                "consumer commits.",
            },
            "consumerLagSeconds": {
                "type": "number",
                "minimum": 0,
                "description": "Age in seconds of the oldest ordered fragment the slowest"
                " consumer has not committed (0 when it has committed everything). Absent until"
                " a consumer commits.",
            },
            "barriers": _barriers_schema(),
            "missing": {
                "type": "object",
                "description": "Per source id: barriers it missed.",
                "additionalProperties": counter,
            },
            "runEnded": {"type": "boolean", "description": "The orderer ended the run."},
            "run": {**counter, "description": "Number of the orderer's current run."},
            "runStartOffset": {
                **counter,
                "description": "Output offset of the current run's first fragment.",
            },
            "spark": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "state": {
                        "type": "string",
                        "description": "The SparkApplication's applicationState.state.",
                    },
                    "errorMessage": {"type": "string"},
                    "ui": {
                        "type": "string",
                        "description": "Where the live page is inside the cluster"
                        " (spec.spark.ui): http://NAME-live.NAMESPACE.svc:PORT/, a read-only"
                        " page of the run's figures and histograms; absent without one.",
                    },
                },
            },
            "orderers": {
                "type": "array",
                "description": "A run over several orderers (spec.orderers > 1): each orderer,"
                " in index order; the counters above are their sums (a barrier counts once at"
                " each orderer).",
                "items": _orderer_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["index"],
            },
            "lastUpdate": {"type": "string", "format": "date-time"},
            "conditions": {
                "type": "array",
                "description": describe_conditions(),
                "items": _condition(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


STATUS_SCHEMA: dict[str, Any] = _status_schema()


def _of_condition(kind: ConditionType, field: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].{field}'


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": describe()},
    {
        "name": "Run",
        "type": "integer",
        "jsonPath": ".status.run",
        "description": "Number of the orderer's current run.",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": _of_condition(ConditionType.READY, "status"),
        "description": "The Ready condition (True, False).",
    },
    {
        "name": "Window (s)",
        "type": "number",
        "jsonPath": ".status.window",
        "description": "buildWindow in force in the orderer, in seconds.",
    },
    {
        "name": "Fragments",
        "type": "integer",
        "jsonPath": ".status.fragments",
        "description": "Fragments received.",
    },
    {
        "name": "Late",
        "type": "integer",
        "jsonPath": ".status.late",
        "description": "Late fragments.",
    },
    {
        "name": "Output (offset)",
        "type": "integer",
        "jsonPath": ".status.nextOffset",
        "description": "Offset of the next ordered fragment: fragments in the ordered log.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Queued (fragments)",
        "type": "integer",
        "priority": 1,
        "jsonPath": ".status.queued",
        "description": "Fragments waiting in the orderer's queues.",
    },
    {
        "name": "Dead sources",
        "type": "integer",
        "priority": 1,
        "jsonPath": ".status.deadSources",
        "description": "Sources declared dead.",
    },
    {
        "name": "Consumer lag (fragments)",
        "type": "integer",
        "priority": 1,
        "jsonPath": ".status.consumerLag",
        "description": "Ordered fragments the slowest consumer has not committed yet.",
    },
    {
        "name": "Spark",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.spark.state",
        "description": "The SparkApplication's state.",
    },
    {
        "name": "Reason",
        "type": "string",
        "priority": 1,
        "jsonPath": _of_condition(ConditionType.READY, "reason"),
        "description": "Why Ready is what it is.",
    },
]
"""``kubectl get eventbuilders``; those with ``priority: 1`` with ``-o wide`` only."""
