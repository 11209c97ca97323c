"""Pieces of the ``EventBuilder`` CRD's schema: typed property builders and :class:`Rule` (a CEL
rule with its Python twin). A builder takes its property's description (the field's text:
:func:`~evb_operator.crd.texts.described`), or the spec path it describes.

Apart from :mod:`evb_operator.crd.definition` so that the parts of the spec schema that live
in their own modules (:mod:`evb_operator.crd.runs`) build their properties and rules the same
way, without importing the CRD they are part of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evb_operator.crd.texts import described

__all__ = ["MAX_SECONDS", "Rule"]

MAX_SECONDS = 86400.0
"""Upper bound of every duration in the spec (one day): a larger value is a typo."""

_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_SPARK_MEMORY_PATTERN = r"^[0-9]+([kKmMgGtT][bB]?)?$"


def _number(
    description: str,
    *,
    minimum: float,
    exclusive: bool = False,
    maximum: float = MAX_SECONDS,
    default: float | None = None,
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "number",
        "description": description,
        "minimum": minimum,
        "maximum": maximum,
    }
    if exclusive:
        schema["exclusiveMinimum"] = True
    if default is not None:
        schema["default"] = default
    return schema


def _integer(
    description: str, *, minimum: int, maximum: int | None = None, default: int | None = None
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "integer",
        "format": "int64",
        "description": description,
        "minimum": minimum,
    }
    if maximum is not None:
        schema["maximum"] = maximum
    if default is not None:
        schema["default"] = default
    return schema


def _string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _object(
    description: str,
    properties: dict[str, Any],
    *,
    required: list[str] | None = None,
    default: dict[str, Any] | None = None,
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "description": description}
    if default is not None:
        schema["default"] = default
    schema["properties"] = properties
    if required:
        schema["required"] = required
    return schema


def _quantity(description: str, **more: Any) -> dict[str, Any]:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": _QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
        **more,
    }


def _image(section: str) -> dict[str, Any]:
    """The ``image`` and ``imagePullPolicy`` properties of a section that runs pods
    (``section``: its spec path, ``spark``)."""
    return {
        "image": _string(described(f"{section}.image"), minLength=1),
        "imagePullPolicy": _string(
            described(f"{section}.imagePullPolicy"), enum=["Always", "IfNotPresent", "Never"]
        ),
    }


def _spark_pod(section: str, default_memory: str) -> dict[str, Any]:
    """The size of a Spark driver or executor (``section``: its spec path): ``cores`` and
    ``memory`` (Spark's notation)."""
    return {
        "cores": _integer(described(f"{section}.cores"), minimum=1, maximum=64, default=1),
        "memory": _string(
            described(f"{section}.memory"), pattern=_SPARK_MEMORY_PATTERN, default=default_memory
        ),
    }


def _resources(description: str, default: dict[str, Any]) -> dict[str, Any]:
    """A container's ``resources``, Kubernetes' object: its parts are described here, no field
    of the typed spec holding them (it passes the object on verbatim)."""
    quantities = {"type": "object", "additionalProperties": _quantity("A quantity.")}
    return _object(
        description,
        {
            "requests": {**quantities, "description": "Minimum resources (cpu, memory)."},
            "limits": {**quantities, "description": "Maximum resources (cpu, memory)."},
        },
        default=default,
    )


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry and its Python twin."""

    path: tuple[str, ...]
    """Where the rule sits, as property names from ``spec`` (``()`` is the spec itself)."""
    cel: str
    """The CEL expression the API server evaluates (``self`` is the object at ``path``)."""
    message: str
    """What the user is told when the rule fails."""
    check: Callable[[Mapping[str, Any]], bool] | None = None
    """The same rule in Python over the defaulted object at ``path``; None for transition rules
    (they read ``oldSelf``, which only the API server has)."""
    field_path: str | None = None
    """The CEL ``fieldPath`` (relative to ``path``, ``.barrierTimeout``) a failure names."""
    changed: Callable[[Mapping[str, Any], Mapping[str, Any]], str | None] | None = None
    """A transition rule's twin, for whoever holds the old object too (the operator's last
    handled spec): ``(old, new)`` -> the first offending field (relative to ``path``), or None."""
    message_expression: str | None = None
    """A CEL ``messageExpression`` (the values in the message, ``oldSelf`` and ``self``); the
    API server falls back to ``message`` when it cannot evaluate it."""

    @property
    def field(self) -> str:
        """The field path a failure is reported under (``spec.barrierTimeout``)."""
        return ".".join(("spec", *self.path)) + (self.field_path or "")

    def entry(self) -> dict[str, str]:
        entry = {"rule": self.cel, "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        return entry
