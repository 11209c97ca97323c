"""One parameter list for a call the client offers twice, blocking and asyncio.

Why: :func:`~orderer.client.readers.subscribe` takes what
:class:`~orderer.client.readers.OrderedStreamReader` takes, and the blocking
:class:`~orderer.client.blocking.SourceClient` sends what
:class:`~orderer.client.sources.AsyncSourceClient` sends. Written out twice, the two lists
could drift apart; declared once, callers are checked against the one list (mypy, through
``ParamSpec``), and ``inspect.signature``, ``help`` and the docs show it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["method_parameters_of", "parameters_of"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


def _signed(function: Callable[..., Any], model: Callable[..., object]) -> Any:
    """``function`` as ``inspect.signature`` shows it: ``model``'s parameters, its own result."""
    returns = inspect.signature(function).return_annotation
    signature = inspect.signature(model).replace(return_annotation=returns)
    function.__signature__ = signature  # type: ignore[attr-defined]
    return function


def parameters_of(
    model: Callable[_P, object],
) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """The decorated function takes ``model``'s parameters (a class: its constructor's)."""
    return lambda function: _signed(function, model)


def method_parameters_of(
    model: Callable[Concatenate[Any, _P], object],
) -> Callable[[Callable[Concatenate[_S, ...], _R]], Callable[Concatenate[_S, _P], _R]]:
    """The decorated method takes the parameters of ``model``, a method of another class."""
    return lambda method: _signed(method, model)
