"""The operator's calls to every orderer of a run over several (``spec.orderers`` > 1,
docs/scale-out.md): ``GetStats`` for the status here; ``Configure`` for a live edit, ``EndRun`` and
``BeginRun`` for ``spec.state: Ended`` and ``spec.run`` from :mod:`orderer.client.each`, which
``evb end-run`` and ``evb begin-run`` share.

Called by :mod:`evb_operator.handlers`, which translates the failures into kopf's errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from evb_operator.status.orderers import OrdererAnswer
from orderer import client as orderer_client
from orderer.client.each import (
    Outcome,
    begin_each,
    configure_each,
    each,
    end_each,
    failures,
    outcome,
)
from orderer.stats import Stats

__all__ = ["Outcome", "begin_each", "configure_each", "end_each", "failures", "stats_each"]


async def stats_each(
    endpoints: Sequence[str],
    *,
    security: orderer_client.ChannelSecurity | None,
    timeout: float,
    barrier_log_limit: int = 0,
) -> list[OrdererAnswer]:
    """Every orderer's ``GetStats``, in index order (None and why for one that does not
    answer)."""

    async def one(index: int, endpoint: str) -> Outcome[Stats]:
        call = orderer_client.get_stats_async(
            endpoint, barrier_log_limit=barrier_log_limit, timeout=timeout, security=security
        )
        return await outcome(index, endpoint, call)

    return [
        OrdererAnswer(o.index, o.endpoint, o.value, None if o.error is None else str(o.error))
        for o in await each(endpoints, one)
    ]
