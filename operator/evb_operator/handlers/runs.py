"""The handlers that call the orderers: a live parameter changed (``Configure``), ``spec.run``
raised (``EndRun`` then ``BeginRun``), ``spec.state: Ended`` (``EndRun``).

One orderer is called through :mod:`orderer.client`; every orderer of a run over several through
:mod:`evb_operator.handlers.control`, and when one fails the handler is retried
(``kopf.TemporaryError``) without doing again what the others did. Registered with kopf by
:mod:`evb_operator.handlers.registrations`.
"""

from __future__ import annotations

from typing import Any

import kopf

from evb_operator import status as evb_status
from evb_operator.handlers import children, common, control
from evb_operator.phases import RunPhase
from evb_operator.specs import common as specs_common
from orderer import client as orderer_client

__all__ = ["begin_run", "configure_live", "end_run"]


async def configure_live(
    *, param: str = "", reason: str, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Push one live parameter to the running orderer (``Configure``): no restart, no child
    touched. At creation the ConfigMap already holds it.

    Several orderers: ``Configure`` at every one. Should one fail, ``observedGeneration`` stays
    where it was (``reconcile``, which ran first in this round, moved it; this puts it back), so
    ``Ready`` says the spec is not acted on yet, and the handler is retried."""
    if reason == "create":
        return
    orderer = common.orderer_of(**kwargs)
    if orderer.valid is None:
        return
    value = orderer.valid.orderer.to_mapping(camel=True)[param]
    if param == "barrierTimeout" and value is None:  # unset: back to 4 x buildWindow, now
        value = orderer.valid.orderer.effective_barrier_timeout
    if orderer.several:
        outcomes = await control.configure_each(
            orderer.endpoints,
            {param: value},
            security=await common.reach(orderer),
            timeout=common.CONTROL_TIMEOUT,
        )
        configs = [o.value for o in outcomes if o.value is not None]
        if configs:
            patch.status["window"] = float(configs[0].build_window)
        if control.failures(outcomes):
            patch.status["observedGeneration"] = kwargs["status"].get("observedGeneration")
        common.raise_failures(f"{param}={value!r} configured", outcomes)
        logger.info("configured %s=%r live at %d orderers", param, value, len(outcomes))
        return
    config = await common.call_orderer(orderer_client.configure_async, orderer, {param: value})
    logger.info("configured %s=%r live at %s", param, value, orderer.endpoint)
    patch.status["window"] = float(config.build_window)


def _run_number(value: Any) -> int:
    """``spec.run`` as kopf's old or new value: unset is the default, 1."""
    return 1 if value is None else int(value)


async def begin_run(
    old: Any,
    new: Any,
    reason: str,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """``spec.run`` raised: end the current run if it has not ended (``EndRun`` drains every
    queue), then ``BeginRun`` with the new number. Lowered, or raised once ``state`` is Ended:
    refused (the API server's CEL rules refuse it first; this holds where none did).

    Safe to retry: an orderer already at that run (or past it) is left alone, so a retry after
    ``BeginRun`` answered, or a run begun by hand (``evb begin-run``), begins nothing twice. At
    creation the orderer starts with the number (its ConfigMap)."""
    if reason == "create":
        return
    before, after = _run_number(old), _run_number(new)
    if after <= before:
        if after < before:
            raise kopf.PermanentError(
                f"spec.run: cannot be lowered from {before} to {after}: run numbers increase"
                " from run to run"
            )
        return
    orderer = common.orderer_of(**kwargs)
    if orderer.valid is None:
        return
    if orderer.valid.state == RunPhase.ENDED:
        raise kopf.PermanentError(
            f"spec.run: run {after} not begun: this EventBuilder ended (spec.state Ended)"
            " and begins no more runs; create a new EventBuilder"
        )
    if orderer.several:
        await _begin_each(orderer, after, body, patch, logger)
        return
    stats = await common.call_orderer(orderer_client.get_stats_async, orderer)
    if stats.run >= after:
        logger.info("the orderer at %s is at run %s already", orderer.endpoint, stats.run)
        return
    if not stats.run_ended:
        last = await common.call_orderer(orderer_client.end_run_async, orderer)
        logger.info("ended run %s at %s: %d fragments in order", stats.run, orderer.endpoint, last)
    begun = await common.call_orderer(orderer_client.begin_run_async, orderer, after)
    logger.info("began run %d at output offset %d", begun.run, begun.start_offset)
    patch.status.update(
        evb_status.begun(begun.run, begun.start_offset, generation=common.generation(body))
    )


async def _begin_each(
    orderer: common.Orderer, run: int, body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger
) -> None:
    """``BeginRun`` of ``run`` at every orderer of the run that is below it
    (:func:`control.begin_each`); the run's first offset in the status is the sum of the
    orderers' (the length of all their ordered logs before it)."""
    outcomes = await control.begin_each(
        orderer.endpoints,
        run,
        security=await common.reach(orderer),
        timeout=common.CONTROL_TIMEOUT,
    )
    for o in outcomes:
        if o.value is not None and not o.done_before:
            logger.info(
                "began run %d at orderer %d, output offset %d", run, o.index, o.value.start_offset
            )
    common.raise_failures(f"run {run} begun", outcomes)
    start = sum(o.value.start_offset for o in outcomes if o.value is not None)
    patch.status.update(evb_status.begun(run, start, generation=common.generation(body)))


async def end_run(
    new: Any,
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """``state: Ended``: the orderer's end of run (drain every queue); the Spark job then reads
    to the last offset and finishes. A run over several orderers: the release's Deployment goes
    to 0 replicas (no run begins again; ``specs.release.build_release_spec`` says why)."""
    if new != RunPhase.ENDED:
        return
    orderer = common.orderer_of(**kwargs)
    if orderer.several:
        outcomes = await control.end_each(
            orderer.endpoints, security=await common.reach(orderer), timeout=common.CONTROL_TIMEOUT
        )
        for o in outcomes:
            if o.value is not None and not o.done_before:
                logger.info("ended the run at orderer %d: %d fragments in order", o.index, o.value)
        common.raise_failures("the run ended", outcomes)
        last = sum(o.value for o in outcomes if o.value is not None)
    else:
        last = await common.call_orderer(orderer_client.end_run_async, orderer)
        logger.info("ended the run at %s: %d fragments in order", orderer.endpoint, last)
    patch.status.update(
        evb_status.ended(status, offset=last, generation=common.generation(body), now=common.now())
    )
    if orderer.valid is not None and orderer.valid.orderers > 1:
        await children.reapply(specs_common.RELEASE, "/spec/replicas", logger=logger, **kwargs)
