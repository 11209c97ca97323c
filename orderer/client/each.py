"""Calls to every orderer of a run over several (docs/scale-out.md): ``Configure``, ``EndRun``
and ``BeginRun`` at each, for the operator (``spec.state: Ended``, ``spec.run``, a live edit) and
``evb end-run`` / ``evb begin-run`` over ``--target a,b,c`` alike.

Each call goes to every orderer at once and each orderer's outcome comes back on its own
(:class:`Outcome`): one orderer that does not answer stops nothing at the others, and a retry
does again only what did not happen.

Why a retry does nothing twice: ``EndRun`` goes only to the orderers whose ``GetStats`` says the
run has not ended (an ended orderer would write a second end-of-run record), ``BeginRun`` only to
those below the run asked for (one at it or past it has begun it: the orderer refuses a run
number that does not rise), each after its own ``EndRun`` if its run has not ended; ``Configure``
sets a parameter to a value, which a second call sets again to the same value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from orderer.client.control import (
    begin_run_async,
    configure_async,
    end_run_async,
    get_stats_async,
)
from orderer.config import OrdererConfig
from orderer.errors import EvbError
from orderer.stats import RunSpan
from orderer.wire.security import ChannelSecurity

__all__ = ["Outcome", "begin_each", "configure_each", "each", "end_each", "failures", "outcome"]

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one orderer's call gave: its value, or the error that stopped it."""

    index: int
    endpoint: str
    value: T | None = None
    error: EvbError | None = None
    done_before: bool = False
    """Nothing was asked: the orderer had done it already (a retry, or a run begun by hand)."""


async def each(
    endpoints: Sequence[str], call: Callable[[int, str], Awaitable[Outcome[T]]]
) -> list[Outcome[T]]:
    return list(await asyncio.gather(*(call(k, e) for k, e in enumerate(endpoints))))


async def outcome(index: int, endpoint: str, call: Awaitable[T]) -> Outcome[T]:
    try:
        return Outcome(index, endpoint, await call)
    except EvbError as error:
        return Outcome(index, endpoint, error=error)


def failures(outcomes: Sequence[Outcome[T]]) -> list[Outcome[T]]:
    """The outcomes that failed, in index order."""
    return [o for o in outcomes if o.error is not None]


async def configure_each(
    endpoints: Sequence[str],
    changes: dict[str, object],
    *,
    security: ChannelSecurity | None,
    timeout: float,
) -> list[Outcome[OrdererConfig]]:
    """``Configure`` at every orderer."""

    async def one(index: int, endpoint: str) -> Outcome[OrdererConfig]:
        call = configure_async(endpoint, changes, timeout=timeout, security=security)
        return await outcome(index, endpoint, call)

    return await each(endpoints, one)


async def end_each(
    endpoints: Sequence[str],
    *,
    security: ChannelSecurity | None,
    timeout: float,
) -> list[Outcome[int]]:
    """``EndRun`` at every orderer whose run has not ended; each outcome's value is the
    orderer's output offset after the run's last fragment."""

    async def one(index: int, endpoint: str) -> Outcome[int]:
        try:
            stats = await get_stats_async(
                endpoint, timeout=timeout, security=security
            )
            if stats.run_ended:
                return Outcome(index, endpoint, stats.next_offset, done_before=True)
            last = await end_run_async(endpoint, timeout=timeout, security=security)
        except EvbError as error:
            return Outcome(index, endpoint, error=error)
        return Outcome(index, endpoint, last)

    return await each(endpoints, one)


async def begin_each(
    endpoints: Sequence[str],
    run: int,
    *,
    security: ChannelSecurity | None,
    timeout: float,
) -> list[Outcome[RunSpan]]:
    """``BeginRun`` of ``run`` at every orderer below it, each after its ``EndRun`` if its run
    has not ended; an orderer at ``run`` or past it is left alone (its current run's span, marked
    ``done_before``)."""

    async def one(index: int, endpoint: str) -> Outcome[RunSpan]:
        try:
            stats = await get_stats_async(
                endpoint, timeout=timeout, security=security
            )
            if stats.run >= run:
                span = RunSpan(stats.run, stats.run_start_offset)
                return Outcome(index, endpoint, span, done_before=True)
            if not stats.run_ended:
                await end_run_async(endpoint, timeout=timeout, security=security)
            begun = await begin_run_async(
                endpoint, run, timeout=timeout, security=security
            )
        except EvbError as error:
            return Outcome(index, endpoint, error=error)
        return Outcome(index, endpoint, begun)

    return await each(endpoints, one)
