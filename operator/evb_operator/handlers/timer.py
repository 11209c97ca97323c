"""The status timer: every ``EVB_STATS_INTERVAL`` seconds, the status from ``GetStats`` (every
orderer's, for a run over several), the orderer's StatefulSet and the SparkApplication (the
``Ready`` condition sums them up), and the Events they call for (:mod:`evb_operator.status`
computes both). Registered with kopf by :mod:`evb_operator.handlers.registrations`.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from evb_operator import constants as c
from evb_operator import kube
from evb_operator import status as evb_status
from evb_operator.handlers import common, control
from evb_operator.specs import common as specs_common
from evb_operator.specs import live as specs_live
from orderer import client as orderer_client
from orderer.errors import EvbError
from orderer.stats import Stats

__all__ = ["BARRIER_LOG_LIMIT", "RPC_TIMEOUT", "STATS_INTERVAL", "refresh_status"]

STATS_INTERVAL = float(os.environ.get(c.ENV_STATS_INTERVAL, "10"))
RPC_TIMEOUT = min(5.0, STATS_INTERVAL)
"""Seconds a GetStats may take: an unreachable orderer must not stall the status timer."""
BARRIER_LOG_LIMIT = 1000
"""Resolved barriers each ``GetStats`` of the status timer asks for (the newest): enough for
every barrier of one status period. Barriers mark run control (begin, end, pause), a few per run;
a thousand in one period would be a hundred a second at the default ten-second period. Should
more resolve in one period, the oldest of them are not in the answer: the summary Event counts
them from the orderer's totals, without their offsets or sources
(``status.barriers.barrier_report``). The answer stays small (a few tens of kB)."""


async def refresh_status(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Status from ``GetStats``, the orderer's StatefulSet (its pod ready?) and the
    SparkApplication, and where the live page is; Events for what needs attention."""
    orderer = common.orderer_of(**kwargs)
    valid = orderer.valid
    if valid is None:
        return
    stats: Stats | None = None
    error: str | None = None
    answers: list[evb_status.OrdererAnswer] = []
    try:
        reach = await common.channel_security(valid, orderer.namespace)
        if orderer.several:
            answers = await control.stats_each(
                orderer.endpoints,
                security=reach,
                timeout=RPC_TIMEOUT,
                barrier_log_limit=BARRIER_LOG_LIMIT,
            )
        else:
            stats = await orderer_client.get_stats_async(
                orderer.endpoint,
                barrier_log_limit=BARRIER_LOG_LIMIT,
                timeout=RPC_TIMEOUT,
                security=reach,
            )
    except EvbError as failure:
        error = str(failure)
        answers = [
            evb_status.OrdererAnswer(k, e, None, error) for k, e in enumerate(orderer.endpoints)
        ]
    children: dict[str, dict[str, Any] | None] = {}
    read = [specs_common.STATEFULSET]
    if valid.has_spark:
        read.append(specs_common.SPARKAPPLICATION)
    for child in read:
        try:
            children[child.kind] = await kube.current().get(
                child.api_version, child.kind, orderer.namespace, child.name(orderer.owner)
            )
        except kube.KubeError as failure:
            logger.warning("cannot read the %s: %s", child.kind, failure)
    spark = children.get(specs_common.SPARKAPPLICATION.kind)
    statefulset = children.get(specs_common.STATEFULSET.kind)
    page = specs_live.page_address(orderer.owner, orderer.namespace, valid.spark)
    if orderer.several:
        new, notices = evb_status.observe_orderers(
            status,
            valid=valid,
            endpoint=orderer.endpoint,
            answers=answers,
            spark=spark,
            statefulset=statefulset,
            generation=common.generation(body),
            now=common.now(),
            page=page,
        )
    else:
        new, notices = evb_status.observe(
            status,
            valid=valid,
            endpoint=orderer.endpoint,
            stats=stats,
            error=error,
            spark=spark,
            statefulset=statefulset,
            generation=common.generation(body),
            now=common.now(),
            page=page,
        )
    patch.status.update(new)
    for notice in notices:
        kopf.event(body, type=notice.type, reason=notice.reason, message=notice.message)
