"""``evb release``: the release of a dead source for a run spread over several orderers.

Why it exists (docs/scale-out.md, "Release of a dead source"): a source that has sent to two
slices' owners has a watermark at every orderer from then on, so the window rule never applies
to it again; when it goes silent, every orderer waits for it for ever, where one orderer would
have released the others' data after ``build_window``. Once a source has been silent at every
orderer (no fragment, watermark or end) for ``source_timeout`` (the contract's word for a source
that is gone) and is not ended everywhere, an end of source goes to every orderer. Its next
fragment re-opens it where it lands, as any end is re-opened.

Why a client and not something inside an orderer: the end travels as a source's own does
(``Submit``), so each orderer writes it in its arrival log at the time it took it in and a
replay of that log gives the same output; and no orderer needs to reach the others. Why never
while an orderer is down: a source that cannot reach a failed orderer is silent for that reason,
not dead; a round that cannot read every orderer's ``GetStats`` releases nothing.

It runs without Kubernetes (a command beside the run's orderers) and, on Kubernetes, as the
operator's release controller would run it. Silence is measured on each orderer's own clock
(``Stats.now`` against the source's ``last_arrival`` there); the shortest silence over the
orderers is the source's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orderer.client import AsyncSourceClient, get_stats_async
from orderer.errors import ServiceUnavailable
from orderer.stats import Stats

__all__ = ["Released", "release_round", "watch"]

log = logging.getLogger("evb.release")


@dataclass(frozen=True, slots=True)
class Released:
    """A source the round released: ended at every orderer after ``silent`` seconds."""

    source: int
    silent: float


def dead_sources(stats: Sequence[Stats]) -> list[Released]:
    """The sources to release, from every orderer's ``GetStats`` of one round: silent at every
    orderer for the run's ``source_timeout`` (orderer 0's) and not ended at every orderer. A
    source no orderer has heard from is not silent: it never began."""
    timeout = stats[0].config.source_timeout
    if timeout is None:
        return []
    sources = sorted({s for one in stats for s in one.sources})
    released = []
    for source in sources:
        silences = []
        ended = True
        for one in stats:
            state = one.sources.get(source)
            if state is None or state.last_arrival is None:
                continue
            silences.append(one.now - state.last_arrival)
            ended = ended and state.ended
        if silences and not ended and min(silences) >= timeout:
            released.append(Released(source, min(silences)))
    return released


async def release_round(targets: Sequence[str], **connection: Any) -> list[Released]:
    """One look at every orderer and the releases it calls for, sent. Raises
    ``ServiceUnavailable`` (releasing nothing) when an orderer does not answer."""
    stats = [await get_stats_async(t, barrier_log_limit=0, **connection) for t in targets]
    released = dead_sources(stats)
    if released:
        # a client of its own for these ends alone: a client resends the ends it sent after a
        # reconnect, which must not outlive this round (the source may come back)
        async with AsyncSourceClient(list(targets), **connection) as client:
            for release in released:
                log.info(
                    "source %d silent for %.1f s at every orderer: released (an end of "
                    "source to each)",
                    release.source,
                    release.silent,
                )
                await client.end_source(release.source)
    return released


async def watch(
    targets: Sequence[str], *, interval: float = 1.0, **connection: Any
) -> list[Released]:
    """Release rounds every ``interval`` seconds until every orderer's run has ended; what was
    released. An orderer that does not answer skips the round (logged), never the command.
    Says first that it watches, and what: a release that is not running yet releases
    nothing, and whoever starts it (a shift, a script) can see that it is."""
    log.info(
        "watching %d orderer(s) for silent sources every %g s: %s",
        len(targets), interval, ", ".join(targets),
    )
    released: list[Released] = []
    while True:
        try:
            released += await release_round(targets, **connection)
            ended = [
                (await get_stats_async(t, barrier_log_limit=0, **connection)).run_ended
                for t in targets
            ]
            if all(ended):
                return released
        except ServiceUnavailable as error:
            log.info("no release this round, an orderer is not answering: %s", error)
        await asyncio.sleep(interval)
