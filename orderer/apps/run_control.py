"""``evb end-run``, ``evb begin-run`` and ``evb source`` over a run of several orderers
(docs/scale-out.md).

Why: a run over N orderers is ended (and the next begun) at every orderer or it is not ended: an
orderer left running keeps its queues and never closes its pieces, so the Spark job waits at them.
``--target a,b,c`` names the orderers in their order, or one orderer started with ``--peers``
names them all in its answer; each is checked to be the orderer of its index, as ``evb stats``
checks them. One orderer of a run over several named alone, without ``--peers``, is refused
(ending a third of a run by mistake cannot be undone). The calls are those the operator makes
(:mod:`orderer.client.each`): every orderer at once, and a second ``evb end-run`` after one
orderer failed ends only the orderers whose run has not ended.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from orderer.apps.run_stats import OrdererView, check_roles, split_targets
from orderer.client import ChannelSecurity, get_stats, set_source_state
from orderer.client.each import Outcome, begin_each, end_each, failures
from orderer.client.roles import peers_of
from orderer.errors import ServiceUnavailable
from orderer.stats import RunSpan

__all__ = [
    "RunOrderers",
    "begin_everywhere",
    "end_everywhere",
    "run_orderers",
    "source_state_everywhere",
]


@dataclass(frozen=True)
class RunOrderers:
    """Where a control command goes: the run's orderers in index order (one: a plain orderer)."""

    targets: list[str]
    sliced: bool


def run_orderers(
    target: str,
    *,
    security: ChannelSecurity | None,
    connect_timeout: float | None,
    timeout: float,
) -> RunOrderers:
    """The orderers ``target`` stands for, their roles checked (one line, exit 2, naming the
    first out of place); one that does not answer is named (exit 3) before anything is asked of
    the others, so that a run is not left ended at some orderers."""
    targets = split_targets(target)

    def ask(address: str) -> Any:
        return get_stats(
            address, barrier_log_limit=1, timeout=timeout, security=security,
            connect_timeout=connect_timeout,
        )  # fmt: skip

    first = ask(targets[0])
    if len(targets) == 1:
        named = peers_of(targets[0], first.slicing)  # one without --peers is refused
        if named is None:
            return RunOrderers(targets, sliced=False)
        targets = named
        answers = {first.slicing.index: first}
    else:
        answers = {0: first}
    views = []
    for k, address in enumerate(targets):
        try:
            views.append(OrdererView(k, address, answers[k] if k in answers else ask(address)))
        except ServiceUnavailable as error:
            raise type(error)(f"orderer {k} ({address}): {error}; nothing was asked of the "
                              "others: run it again once every orderer answers") from None
    check_roles(views)
    return RunOrderers(targets, sliced=True)


def _checked(what: str, outcomes: list[Outcome[Any]]) -> None:
    failed = failures(outcomes)
    if failed:
        done = [o.index for o in outcomes if o.error is None]
        raise ServiceUnavailable(
            "; ".join(f"orderer {o.index} ({o.endpoint}): {o.error}" for o in failed)
            + f" — {what} at orderer(s) {', '.join(map(str, done)) or 'none'}; run the command "
            "again once every orderer answers (it does only what is left)"
        )


def end_everywhere(
    targets: list[str], *, security: ChannelSecurity | None, timeout: float
) -> list[dict[str, Any]]:
    """``EndRun`` at every orderer whose run has not ended; each orderer's output offset after
    the run's last fragment, as JSON-ready rows."""
    outcomes = asyncio.run(end_each(targets, security=security, timeout=timeout))
    _checked("the run is ended", outcomes)
    return [
        {"orderer": o.index, "target": o.endpoint, "next_offset": o.value,
         "ended_before": o.done_before}
        for o in outcomes
    ]  # fmt: skip


def begin_everywhere(
    targets: list[str], run: int | None, *, security: ChannelSecurity | None, timeout: float
) -> list[dict[str, Any]]:
    """``BeginRun`` at every orderer below ``run`` (None: the run after the highest any orderer
    is at), each after its own ``EndRun``; each orderer's run and its first offset."""
    if run is None:
        highest = max(
            get_stats(t, barrier_log_limit=1, timeout=timeout, security=security).run
            for t in targets
        )
        run = highest + 1
    outcomes: list[Outcome[RunSpan]] = asyncio.run(
        begin_each(targets, run, security=security, timeout=timeout)
    )
    _checked(f"run {run} is begun", outcomes)
    return [
        {"orderer": o.index, "target": o.endpoint, "run": o.value.run,
         "start_offset": o.value.start_offset, "begun_before": o.done_before}
        for o in outcomes if o.value is not None
    ]  # fmt: skip


def source_state_everywhere(
    targets: list[str], source: int, dead: bool, *, security: ChannelSecurity | None,
    timeout: float,
) -> list[dict[str, Any]]:
    """Mark ``source`` dead (or revive it) at every orderer, in index order: a source holds
    barriers at every orderer of the run (each takes every barrier), so marking it at one only
    would leave the others waiting. Marking twice changes nothing, so a second run of the
    command after a failure part-way is safe; the failure names the orderer."""
    rows = []
    for k, address in enumerate(targets):
        try:
            mark = set_source_state(address, source, dead, timeout=timeout, security=security)
        except ServiceUnavailable as error:
            raise type(error)(
                f"orderer {k} ({address}): {error}; marked at orderer(s) "
                f"{', '.join(map(str, range(k))) or 'none'}: run it again once every orderer "
                "answers"
            ) from None
        rows.append({"orderer": k, "target": address, "was_known": mark.was_known,
                     "dead": mark.dead})  # fmt: skip
    return rows
