"""The orderer's parameters in the ``EventBuilder`` spec, generated from the fields of
:class:`orderer.config.OrdererConfig`.

Why generated: each field holds its default, its text (the docstring under it, whose summary is
the description: :func:`~orderer.config.spec_field`), and in its
:class:`~orderer.config.SpecField` (its ``metadata``) the bounds and whether it is live, so a
parameter is written once, where the orderer reads it, and the CRD cannot drift from it. A
property is named as :meth:`~orderer.config.OrdererConfig.to_mapping` spells it with
``camel=True``; its type is the field's annotation (``None`` allowed means unset, no default); a
nested group (:class:`~orderer.config.FlowControl`) is an object of its fields, defaulted to
``{}`` so its own defaults apply.
"""

from __future__ import annotations

import types
import typing
from dataclasses import Field, fields, is_dataclass
from typing import Any

from evb_operator.crd.schema import MAX_SECONDS, _integer, _number, _object, _string
from orderer.config import OrdererConfig, SpecField, camel_case, spec_field

__all__ = ["orderer_properties"]


def orderer_properties() -> dict[str, Any]:
    """The spec's properties of the orderer's parameters, in the order of the fields."""
    return _properties(OrdererConfig())


def _properties(defaults: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(type(defaults))
    return {
        camel_case(f.name): _property(f, hints[f.name], getattr(defaults, f.name))
        for f in fields(defaults)
    }


def _property(f: Field[Any], hint: Any, default: Any) -> dict[str, Any]:
    spec = spec_field(f)
    description = spec.description + (" Live." if spec.live else "")
    if is_dataclass(default):
        return _object(description, _properties(default), default={})
    kind = _kind(hint)
    if kind is tuple:
        assert spec.items is not None, f"{f.name}: a list needs its items' SpecField"
        schema: dict[str, Any] = {
            "type": "array",
            "description": description,
            "items": _scalar(spec.items, _kind(typing.get_args(hint)[0]), None),
        }
        if spec.max_items is not None:
            schema["maxItems"] = spec.max_items
        schema["x-kubernetes-list-type"] = "set"
        return schema
    return _scalar(spec, kind, default, description)


def _kind(hint: Any) -> Any:
    """The type of an annotation, ``None`` left out (``float | None`` -> ``float``)."""
    if isinstance(hint, types.UnionType):
        (kind,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return kind
    return typing.get_origin(hint) or hint


def _scalar(
    spec: SpecField, kind: Any, default: Any, description: str | None = None
) -> dict[str, Any]:
    text = spec.description if description is None else description
    if kind is bool:
        schema: dict[str, Any] = {"type": "boolean", "description": text}
        if default is not None:
            schema["default"] = default
        return schema
    if kind is str:
        more: dict[str, Any] = {"enum": list(spec.enum)} if spec.enum else {}
        if default is not None:
            more["default"] = default
        return _string(text, **more)
    assert spec.minimum is not None, f"{text}: a number needs its minimum"
    if kind is int:
        maximum = None if spec.maximum is None else int(spec.maximum)
        return _integer(text, minimum=int(spec.minimum), maximum=maximum, default=default)
    if kind is float:
        return _number(
            text,
            minimum=spec.minimum,
            exclusive=spec.exclusive_minimum,
            maximum=MAX_SECONDS if spec.maximum is None else spec.maximum,
            default=default,
        )
    raise TypeError(f"{text}: no CRD type for {kind!r}")
