"""``spec.orderers`` and ``spec.sliceTicks``: one run spread over N orderers by slices of
timestamp (docs/scale-out.md), with their CEL rules.

Generated from the fields that carry them to the orderer, as the parameters are
(:mod:`evb_operator.crd.parameters`): each property is named and typed by its field of
:class:`orderer.flags.serve.ServeCommand` (``orderers``, ``slice_ticks``: what the operator writes
into the orderer pods' configuration), described by that field's text (then what the CRD adds,
``Immutable.``: :data:`evb_operator.crd.texts.BORROWED`) and rendered by the parameters' own
renderer from a :class:`~orderer.config.SpecField`. The bounds are written here, not on the
field: the fields that check N and T are the service's (``ServiceConfig``, ``Slicing``), which the
operator may not import (``.importlinter``), and ServeCommand's fields carry no metadata. A test
holds the bounds to the orderer's (1 to ``MAX_ORDERERS`` orderers, T from 1; T at most int64's
largest, the API server's integers, where the orderer goes to 2^64-1) and the default to
``ServiceConfig``'s.

Why these rules:

- T is required when N > 1: every source computes a fragment's orderer from both (slice
  ``floor(ts / T)`` goes to orderer ``slice mod N``), and ``evb serve`` refuses N > 1 without T.
- T is refused with N = 1: it would mean nothing to a run of one orderer, and such an
  EventBuilder builds exactly what it built before ``sliceTicks`` existed. A CRD rule can be
  relaxed later without harm; tightening it would strand the objects it once accepted.
- Both immutable (transition rules, as ``sources``, ``flowControl`` and ``storage``): every
  source computes the owner of a slice alone from N and T, so a change in the middle of a run
  would send one slice to two orderers; each orderer records them in its data directory and
  refuses to start with others. As for those fields there is no Python twin: only the API server
  holds the old object. Where none refused a change, nothing follows it either: the operator
  patches no replica count and no ConfigMap (written once), and an orderer pod rolled with
  another N or T (a change of ``spec.orderer`` at the same time) refuses to start, saying so in
  its termination message.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from evb_operator.crd.parameters import _kind, _scalar
from evb_operator.crd.schema import Rule
from evb_operator.crd.texts import described
from orderer.config import SpecField, camel_case
from orderer.flags.serve import ServeCommand

__all__ = [
    "DEFAULT_ORDERERS",
    "MAX_ORDERERS",
    "MAX_SLICE_TICKS",
    "SLICING_RULES",
    "slicing_properties",
]

MAX_ORDERERS = 1024
"""The most orderers of one run: the orderer's own bound (``orderer.replay.slicing``; a test
holds them equal)."""
DEFAULT_ORDERERS = 1
"""One orderer: the run is not sliced (``ServiceConfig.orderers``'s default; a test checks)."""
MAX_SLICE_TICKS = 2**63 - 1
"""The API server's integers are int64; the orderer takes up to 2^64-1."""


@dataclass(frozen=True)
class _Setting:
    """A field of ServeCommand the spec carries, with what the spec says of it."""

    name: str
    """The field's name (``slice_ticks``); the property is its camelCase (``sliceTicks``)."""
    spec: SpecField
    """The bounds (the description is the field's text: :func:`slicing_properties`)."""
    default: int | None
    """The spec's default; None: unset."""


_SETTINGS = (
    _Setting("orderers", SpecField(minimum=1, maximum=MAX_ORDERERS), DEFAULT_ORDERERS),
    _Setting("slice_ticks", SpecField(minimum=1, maximum=MAX_SLICE_TICKS), None),
)


def slicing_properties() -> dict[str, Any]:
    """The spec's properties ``orderers`` and ``sliceTicks``: each named and typed by its field
    of ServeCommand (a setting without one fails here, at import) and described by its text."""
    hints = typing.get_type_hints(ServeCommand)
    known = {f.name for f in fields(ServeCommand)}
    properties: dict[str, Any] = {}
    for setting in _SETTINGS:
        assert setting.name in known, f"ServeCommand has no field {setting.name}"
        kind = _kind(hints[setting.name])
        name = camel_case(setting.name)
        spec = replace(setting.spec, description=described(name))
        properties[name] = _scalar(spec, kind, setting.default)
    return properties


def _needs_slice_ticks(spec: Mapping[str, Any]) -> bool:
    return spec.get("orderers", DEFAULT_ORDERERS) == 1 or "sliceTicks" in spec


def _slice_ticks_needs_orderers(spec: Mapping[str, Any]) -> bool:
    return "sliceTicks" not in spec or spec.get("orderers", DEFAULT_ORDERERS) > 1


def _immutable(field: str, why: str) -> Rule:
    """``spec.<field>`` keeps the value it was created with; the message names both values
    (``why`` goes into a CEL string: no quote in it)."""
    assert "'" not in why, why
    return Rule(
        path=(field,),
        cel="self == oldSelf",
        message=f"{field} cannot change during a run ({why}); create a new EventBuilder",
        message_expression=f"'{field} cannot change from ' + string(oldSelf) + ' to '"
        f" + string(self) + ' during a run ({why}); create a new EventBuilder'",
    )


SLICING_RULES: tuple[Rule, ...] = (
    Rule(
        path=(),
        cel="!has(self.orderers) || self.orderers == 1 || has(self.sliceTicks)",
        message="sliceTicks is required when orderers > 1: every source computes a fragment's"
        " orderer from it (slice floor(ts / sliceTicks) belongs to orderer slice mod orderers)",
        check=_needs_slice_ticks,
        field_path=".sliceTicks",
    ),
    Rule(
        path=(),
        cel="!has(self.sliceTicks) || (has(self.orderers) && self.orderers > 1)",
        message="sliceTicks has no meaning with one orderer: unset it, or set orderers above 1",
        check=_slice_ticks_needs_orderers,
        field_path=".sliceTicks",
    ),
    _immutable("orderers", "every source computes the orderer of each fragment from it"),
    _immutable("sliceTicks", "every source computes the orderer of each fragment from it"),
)
"""The rules of these fields (``crd.RULES`` holds them with the others)."""
