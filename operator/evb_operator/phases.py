"""The phases of an EventBuilder's run (``status.phase``), spelled once.

The CRD's schema (:mod:`evb_operator.crd`: the status enum, its description, the values of
``spec.state``), the status the operator computes (:mod:`evb_operator.status`) and the handlers
(:mod:`evb_operator.handlers`) all take the names from :class:`RunPhase`, so a phase renamed here
is renamed everywhere, and one misspelt is an ``AttributeError``, not a status no one reads.

A run goes Pending -> Running -> Ended -> Completed or Failed (the last two only with a Spark
job); Invalid stands for a refused spec until the spec is accepted again (then Pending).
"""

from __future__ import annotations

import enum

__all__ = ["FINAL_PHASES", "REQUESTED_STATES", "RunPhase", "describe"]


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
