"""The phases of an EventBuilder's run (``status.phase``) and its condition types, spelled once.

The CRD's schema (:mod:`evb_operator.crd`: the status enum, its description, the values of
``spec.state``), the status the operator computes (:mod:`evb_operator.status`) and the handlers
(:mod:`evb_operator.handlers`) all take the names from :class:`RunPhase`, so a phase renamed here
is renamed everywhere, and one misspelt is an ``AttributeError``, not a status no one reads.

A run goes Pending -> Running -> Ended -> Completed or Failed (the last two only with a Spark
job); Invalid stands for a refused spec until the spec is accepted again (then Pending).

The conditions (``status.conditions``, :class:`ConditionType`) follow the Kubernetes API
conventions (each has ``type``, ``status`` True/False/Unknown, a CamelCase ``reason``, a
``message``, ``lastTransitionTime`` and the ``observedGeneration`` it was computed from):
``Ready`` sums the others up for ``kubectl wait --for=condition=Ready`` and GitOps health checks,
as a Pod's or a cert-manager Certificate's does; the others say which part is not ready.
"""

from __future__ import annotations

import enum

__all__ = [
    "FINAL_PHASES",
    "REQUESTED_STATES",
    "ConditionType",
    "RunPhase",
    "describe",
    "describe_conditions",
]


class RunPhase(enum.StrEnum):
    """``status.phase`` of an EventBuilder; a ``str``, so it goes into a patch as it is."""

    PENDING = "Pending"
    RUNNING = "Running"
    ENDED = "Ended"
    COMPLETED = "Completed"
    FAILED = "Failed"
    INVALID = "Invalid"


_MEANINGS = {
    RunPhase.PENDING: "orderer not reachable yet",
    RunPhase.ENDED: "EndRun done",
    RunPhase.COMPLETED: "Spark finished",
    RunPhase.FAILED: "Spark failed",
    RunPhase.INVALID: "spec rejected: see the Valid condition",
}

FINAL_PHASES = frozenset({RunPhase.ENDED, RunPhase.COMPLETED, RunPhase.FAILED})
"""Phases an unreachable orderer does not turn back into Pending (the run is over)."""

REQUESTED_STATES = (RunPhase.RUNNING, RunPhase.ENDED)
"""The values of ``spec.state``: the phase a user asks for (Running, the default, or Ended:
the end of run)."""


def describe() -> str:
    """Every phase with what it means, for the CRD's description of ``status.phase``."""
    return (
        ", ".join(
            f"{phase} ({_MEANINGS[phase]})" if phase in _MEANINGS else phase for phase in RunPhase
        )
        + "."
    )


class ConditionType(enum.StrEnum):
    """``status.conditions[].type`` of an EventBuilder."""

    READY = "Ready"
    VALID = "Valid"
    ORDERER_REACHABLE = "OrdererReachable"
    CONFIGURED = "Configured"
    RUN_ENDED = "RunEnded"
    TLS = "TLS"


_CONDITION_MEANINGS = {
    ConditionType.READY: "the spec is accepted and acted on, the orderer's pod is ready and"
    " answers GetStats, and the Spark job runs (or the spec has no Spark stage)",
    ConditionType.VALID: "the operator accepted the spec",
    ConditionType.ORDERER_REACHABLE: "the orderer answered the last GetStats",
    ConditionType.CONFIGURED: "the orderer runs the spec's live parameters",
    ConditionType.RUN_ENDED: "the orderer ended the run",
    ConditionType.TLS: "the orderer answered over the TLS the spec asks for",
}


def describe_conditions() -> str:
    """Every condition type with what its ``True`` means, for the CRD's description of
    ``status.conditions``."""
    return "; ".join(f"{kind}: {_CONDITION_MEANINGS[kind]}" for kind in ConditionType) + "."
