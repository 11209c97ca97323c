"""The orderers' part of the status of a run over several (``spec.orderers`` > 1,
docs/scale-out.md): what each orderer answered, summed for the run, and one entry per orderer
under ``status.orderers``.

Called by :func:`evb_operator.status.report.observe_orderers` with each orderer's ``GetStats``
answer (:class:`OrdererAnswer`, made by the status timer in :mod:`evb_operator.handlers.timer`);
the run's conditions, the Spark job and the phase's last word stay
:mod:`evb_operator.status.report`'s. Pure, as the rest of the status: the previous status comes
in, the new fields go out.

How the run's fields are made from N orderers (docs/scale-out.md, "What equals a single-orderer
run"):

- summed: the fragments received, emitted, late and dropped, the queued ones, ``nextOffset``
  and ``runStartOffset`` (fragments in all the orderers' ordered logs), the barrier counters and
  each source's missed barriers (a barrier reaches every orderer, and counts once at each, as
  ``evb send`` counts it);
- an orderer that does not answer now counts with its entry of the previous status (its last
  known counters), so that the run's totals do not fall while it restarts;
- the sources (known, dead, paused) counted once over the orderers that answer: every source
  sends to every orderer;
- the high-water mark the highest, the run the lowest (the run every orderer has reached), the
  run ended only when every orderer answers that it ended; the window the first answer's (an
  orderer that runs another is named by the ``Configured`` condition);
- the consumer lag: each consumer's lag summed over the orderers (a consumer of the run commits
  at every orderer), the slowest consumer's; in seconds, the oldest over all.

Each orderer's barrier log is reported from its own entry (``status.orderers[k].barriers``:
its counters and where the operator is in its log, :func:`~evb_operator.status.barriers.
barrier_report`), its Events prefixed with the orderer: every orderer resolves its copy of each
barrier, and they can resolve differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evb_operator.phases import RunPhase
from evb_operator.status.barriers import barrier_report, count
from evb_operator.status.conditions import Notice, Verdict
from evb_operator.validation import ValidSpec
from orderer.config import LIVE_PARAMETERS, OrdererConfig
from orderer.stats import Stats

__all__ = ["OrdererAnswer", "OrderersView", "drift", "observe_each"]

BARRIER_COUNTERS = ("complete", "incomplete", "homogeneous", "heterogeneous")
"""The barrier counters of ``status.barriers`` and of each orderer's entry."""

_SUMMED = ("fragments", "emitted", "late", "dropped", "queued", "nextOffset", "runStartOffset")
"""The entry's counters the run's status sums (:func:`_entry`'s names)."""


@dataclass(frozen=True)
class OrdererAnswer:
    """What the status timer got from orderer ``index`` of the run."""

    index: int
    endpoint: str
    """The address it was asked at (in a cluster: its pod's name under the headless Service)."""
    stats: Stats | None
    """Its ``GetStats`` answer; None when it did not answer."""
    error: str | None = None
    """Why it did not answer."""


@dataclass(frozen=True)
class OrderersView:
    """What the orderers say, for :func:`evb_operator.status.report.observe_orderers` to put
    beside the Spark job's state and the StatefulSet's."""

    fields: dict[str, Any]
    """The run's status fields: the summed counters and ``orderers``, the entries."""
    reachable: Verdict
    configured: Verdict | None
    """None when no orderer answers (nothing to compare)."""
    notices: list[Notice] = field(default_factory=list)
    unreachable: str | None = None
    """Which orderers do not answer and why (None: every one answers)."""
    run_ended: bool = False
    """Every orderer answers that the run ended."""
    phase: RunPhase | None = None
    """Running or Ended; None when no orderer answers."""


def drift(valid: ValidSpec, config: OrdererConfig) -> list[str]:
    """Live parameters whose value in the orderer differs from the spec's, both read the same
    way (:meth:`OrdererConfig.to_mapping`: ``source_timeout`` ``off`` when disabled)."""
    wanted, reported = valid.orderer.to_mapping(), config.to_mapping()
    return [
        f"{name}: spec {wanted[name]!r}, orderer {reported[name]!r}"
        for name in LIVE_PARAMETERS
        if wanted[name] != reported[name]
    ]


def _named(answer: OrdererAnswer) -> str:
    return f"orderer {answer.index} ({answer.endpoint})"


def _previous_entries(previous: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(e.get("index", -1)): e for e in previous.get("orderers") or ()}


def _entry(
    answer: OrdererAnswer, before: Mapping[str, Any], valid: ValidSpec
) -> tuple[dict[str, Any], list[Notice]]:
    """Orderer ``answer.index``'s entry of ``status.orderers`` and its barrier Events; one that
    does not answer keeps its previous entry's counters (``before``), marked not ready."""
    entry: dict[str, Any] = {"index": answer.index, "endpoint": answer.endpoint}
    stats = answer.stats
    if stats is None:
        entry["ready"] = False
        entry["message"] = f"does not answer: {answer.error or 'GetStats failed'}"
        for key in (*_SUMMED, "run", "runEnded", "window", "barriers"):
            if key in before:
                entry[key] = before[key]
        return entry, []
    totals = stats.totals
    wrong = drift(valid, stats.config)
    entry.update(
        ready=not wrong,
        run=stats.run,
        runEnded=stats.run_ended,
        window=float(stats.config.build_window),
        fragments=totals.received,
        emitted=totals.emitted,
        late=totals.late,
        dropped=totals.dropped,
        queued=stats.queued,
        nextOffset=stats.next_offset,
        runStartOffset=stats.run_start_offset,
    )
    if wrong:
        entry["message"] = "runs other live parameters: " + "; ".join(wrong)
    counters = {name: getattr(stats.barriers, name) for name in BARRIER_COUNTERS}
    log, notices = barrier_report(before, stats, counters)
    barriers: dict[str, Any] = {**counters, **log}
    entry["barriers"] = {k: v for k, v in barriers.items() if v is not None}
    mine = [Notice(n.type, n.reason, f"orderer {answer.index}: {n.message}") for n in notices]
    return entry, mine


def _summed(entries: Sequence[Mapping[str, Any]], answered: Sequence[Stats]) -> dict[str, Any]:
    """The run's counters from the entries (an unreachable orderer's last known) and the
    answers (what only a live orderer says)."""
    new: dict[str, Any] = {key: sum(count(e, key) for e in entries) for key in _SUMMED}
    new["barriers"] = {
        name: sum(count(e, "barriers", name) for e in entries) for name in BARRIER_COUNTERS
    }
    missing: dict[str, int] = {}
    for stats in answered:
        for source, n in stats.missing.items():
            missing[str(source)] = missing.get(str(source), 0) + n
    new["missing"] = missing
    if not answered:
        return new
    sources = {s for stats in answered for s in stats.sources}
    dead = {s for stats in answered for s, v in stats.sources.items() if v.dead}
    paused = {s for stats in answered for s, v in stats.sources.items() if v.paused}
    new.update(
        window=float(answered[0].config.build_window),
        sources=len(sources),
        deadSources=len(dead),
        pausedSources=len(paused),
        run=min(stats.run for stats in answered),
    )
    marks = [stats.high_water_mark for stats in answered if stats.high_water_mark is not None]
    if marks:
        new["highWaterMark"] = str(max(marks))
    lags: dict[str, int] = {}
    seconds: list[float] = []
    for stats in answered:
        for name, consumer in stats.consumers.items():
            lags[name] = lags.get(name, 0) + consumer.lag
            seconds.append(float(consumer.lag_seconds))
    if lags:
        new["consumerLag"] = max(lags.values())
        new["consumerLagSeconds"] = max(seconds)
    return new


def observe_each(
    previous: Mapping[str, Any], *, valid: ValidSpec, answers: Sequence[OrdererAnswer]
) -> OrderersView:
    """The run's fields and the orderers' conditions from every orderer's answer (in index
    order, one per orderer)."""
    before = _previous_entries(previous)
    entries: list[dict[str, Any]] = []
    notices: list[Notice] = []
    for answer in answers:
        entry, theirs = _entry(answer, before.get(answer.index, {}), valid)
        entries.append(entry)
        notices += theirs
    answered = [a.stats for a in answers if a.stats is not None]
    new = _summed(entries, answered)
    new["orderers"] = entries
    silent = [a for a in answers if a.stats is None]
    unreachable = (
        "; ".join(f"{_named(a)} does not answer: {a.error or 'GetStats failed'}" for a in silent)
        or None
    )
    n = len(answers)
    if unreachable is None:
        reachable = Verdict(True, "GetStats", f"all {n} orderers answer")
    else:
        reachable = Verdict(False, "Unreachable", f"{len(silent)} of {n}: {unreachable}")
    if not answered:
        return OrderersView(new, reachable, None, notices, unreachable)
    wrong = [
        f"orderer {a.index}: {'; '.join(d)}"
        for a in answers
        if a.stats is not None and (d := drift(valid, a.stats.config))
    ]
    configured = (
        Verdict(False, "Drift", "; ".join(wrong))
        if wrong
        else Verdict(
            True,
            "InSync",
            f"the {len(answered)} orderers that answer run the spec's live parameters",
        )
    )
    ended = not silent and all(stats.run_ended for stats in answered)
    new["runEnded"] = ended
    return OrderersView(
        new,
        reachable,
        configured,
        notices,
        unreachable,
        run_ended=ended,
        phase=RunPhase.ENDED if ended else RunPhase.RUNNING,
    )
