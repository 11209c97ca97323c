"""The pieces an EventBuilder's status is written with: a condition's value (:class:`Verdict`),
the conditions list (:func:`set_condition`) and an Event to post (:class:`Notice`).

Apart from :mod:`evb_operator.status.report` because its parts (the barrier Events of
:mod:`evb_operator.status.barriers`, the orderers of a run over several in
:mod:`evb_operator.status.orderers`) write them too, and ``report`` imports those parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evb_operator.phases import ConditionType

__all__ = ["Notice", "Verdict", "find", "set_condition"]


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


def find(conditions: Sequence[Mapping[str, Any]] | None, type: ConditionType) -> Any:
    """The condition of that type, or None."""
    return next((c for c in conditions or () if c.get("type") == type), None)
