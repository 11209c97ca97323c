"""What a flag's value may be (argparse ``type``\\ s that name the flag in their error) and the
flag of a parameter's name.

Why here and not in :mod:`orderer.cli.arguments`: the flags the operator writes
(:mod:`orderer.flags.serve`, :mod:`orderer.flags.forward`) are defined below the command line,
and check their values with the same types as every other flag of ``evb``. Numeric flags are
checked by their type (:func:`number`), so that a nonsensical value is refused before anything
starts, in a message naming the flag as typed (``--rate``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from orderer.config import camel_case

__all__ = [
    "COUNT",
    "NATURAL",
    "PORT",
    "SECONDS",
    "SECONDS_OR_ZERO",
    "SLICE_TICKS",
    "SOURCE_ID",
    "file_default",
    "flag",
    "number",
    "peer_list",
    "split_peers",
]


def number(
    kind: type[int] | type[float],
    minimum: float,
    *,
    exclusive: bool = False,
    maximum: float | None = None,
) -> Callable[[str], Any]:
    """An argparse ``type``: an int or a finite float, at least (or, ``exclusive``, more than)
    ``minimum``; argparse names the flag in the error."""
    bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
    if maximum is not None:
        bound += f" and <= {maximum:g}"
    what = f"an integer {bound}" if kind is int else f"a number {bound}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})") from None
        too_small = value <= minimum if exclusive else value < minimum
        too_large = maximum is not None and value > maximum
        if too_small or too_large or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})")
        return value

    return parse


def split_peers(value: object) -> tuple[str, ...]:
    """The orderers' addresses of ``--peers`` (``HOST:PORT,HOST:PORT``) or of the ``peers`` key
    of a ``--config`` file (that text, or a list of addresses), in index order. ``ValueError``
    saying what is wrong: an address that is empty, holds a blank, or is given twice."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or not all(isinstance(p, str) for p in parts):
        raise ValueError("must be the orderers' addresses, HOST:PORT,... or a list of them")
    peers = tuple(part.strip() for part in parts)
    for peer in peers:
        if not peer or any(c.isspace() for c in peer):
            raise ValueError(f"{peer!r} is not an address (HOST:PORT)")
    if len(set(peers)) != len(peers):
        raise ValueError("an address is given twice: each orderer has its own")
    return peers


def peer_list(text: str) -> tuple[str, ...]:
    """An argparse ``type``: :func:`split_peers`, its error naming the flag."""
    try:
        return split_peers(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} (got {text!r})") from None


COUNT = number(int, 1)
NATURAL = number(int, 0)
SOURCE_ID = number(int, 0, maximum=2**32 - 1)
PORT = number(int, 0, maximum=65535)
SECONDS = number(float, 0, exclusive=True)
SECONDS_OR_ZERO = number(float, 0)
SLICE_TICKS = number(int, 1, maximum=2**64 - 1)


def flag(name: str) -> str:
    """The flag of a parameter: ``build_window`` -> ``--build-window``."""
    return "--" + name.replace("_", "-")


def file_default(value: object, key: str) -> str:
    """The help's default of a flag of ``evb serve`` that its ``--config`` file can set too."""
    return f"(default: {value}, or {camel_case(key)} in --config)"
