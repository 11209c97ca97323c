"""The Events and status fields an orderer's barrier log calls for: each incomplete or
heterogeneous barrier resolved since the last status update, a few per update, then a summary.

Apart from :mod:`evb_operator.status.report` because it is one concern with a memory of its own
(``barriers.lastReportedOffset``, kept in the status), and because a run over several orderers
(:mod:`evb_operator.status.orderers`) reports each orderer's log through it, each from that
orderer's entry of ``status.orderers``. Pure, as the rest of the status.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evb_operator.status.conditions import Notice
from orderer.stats import BarrierRecord, Stats

__all__ = ["BARRIER_EVENTS_PER_UPDATE", "barrier_report", "count"]


def count(mapping: Mapping[str, Any] | None, *path: str) -> int:
    """The integer at ``path`` in a status (0 where absent)."""
    node: Any = mapping or {}
    for key in path:
        if not isinstance(node, Mapping):
            return 0
        node = node.get(key, 0)
    return int(node or 0)


BARRIER_EVENTS_PER_UPDATE = 5
"""At most this many Events name one barrier each per status update; one more sums up the rest.
A run whose sources keep missing barriers must not flood the namespace's Events."""

_FLAGS = (("incomplete", "complete"), ("heterogeneous", "homogeneous"))
"""Each counter of ``stats.barriers`` worth reporting and the barrier log's flag it counts the
absence of."""


def barrier_report(
    previous: Mapping[str, Any], stats: Stats, counters: Mapping[str, int]
) -> tuple[dict[str, Any], list[Notice]]:
    """What the orderer's barrier log (``stats.barrier_log``, oldest first) adds since the
    last update: the status fields under ``barriers`` besides the ``counters`` (of this answer),
    and the Events.

    Each incomplete barrier is a Warning naming its output offset and the sources that sent none;
    each heterogeneous one names the type each source sent. ``barriers.lastReportedOffset`` (the
    newest barrier looked at) is the operator's memory, kept in the status so that a restarted
    operator repeats nothing; an orderer whose log is shorter than that offset started a new log
    (a new volume), and its barriers are reported from the start.

    At most :data:`BARRIER_EVENTS_PER_UPDATE` barriers get an Event of their own, the oldest
    first; one more sums up the rest. The answer holds only the newest barriers (the operator
    asks for ``handlers.timer.BARRIER_LOG_LIMIT``): when more resolved since the last update,
    the ones before the oldest returned are counted from the totals (this answer's counters less
    the previous status's) and the summary says so, without their offsets or sources."""
    before: Mapping[str, Any] = previous.get("barriers") or {}
    cursor = before.get("lastReportedOffset")
    out: dict[str, Any] = {}
    if cursor is not None and int(cursor) >= stats.next_offset:  # a new log
        cursor, before = None, {}
        if "lastIncomplete" in (previous.get("barriers") or {}):
            out["lastIncomplete"] = None  # a merge patch deletes it: it names the old log
    log = [entry for entry in stats.barrier_log if cursor is None or entry.offset > int(cursor)]
    notable = [entry for entry in log if not entry.complete or not entry.homogeneous]
    shown = BARRIER_EVENTS_PER_UPDATE
    at = _wall_clock(stats)
    notices = [_barrier_notice(entry, at) for entry in notable[:shown]]
    unlisted = {
        counter: max(
            0, counters[counter] - count(before, counter) - sum(not getattr(e, flag) for e in log)
        )
        for counter, flag in _FLAGS
    }
    if notable[shown:] or any(unlisted.values()):
        start = int(cursor) + 1 if cursor is not None else 0
        returned = len(stats.barrier_log)
        notices.append(_barrier_summary(notable[shown:], unlisted, start, returned))
    if log:
        out["lastReportedOffset"] = log[-1].offset
    elif cursor is not None:
        out["lastReportedOffset"] = int(cursor)
    incomplete = [entry for entry in log if not entry.complete]
    if incomplete:
        out["lastIncomplete"] = _incomplete(incomplete[-1], at)
    elif before.get("lastIncomplete"):
        out["lastIncomplete"] = before["lastIncomplete"]
    return out, notices


_Clock = Callable[[float], str | None]


def _wall_clock(stats: Stats) -> _Clock:
    """Orderer time -> ``YYYY-MM-DDTHH:MM:SSZ`` (the answer's ``wall_time`` is the Unix time at
    its orderer time ``now``); None for every time when the answer has no ``wall_time`` (0: an
    orderer from before it)."""
    wall, now = stats.wall_time, stats.now

    def clock(t: float) -> str | None:
        if not wall:
            return None
        unix = float(wall) - (float(now) - float(t))
        return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return clock


def _types(entry: BarrierRecord) -> str:
    types = sorted(entry.types.items())
    return ", ".join(f"source {source}: type {kind}" for source, kind in types) or "none"


def _sources(ids: Sequence[int]) -> str:
    return ", ".join(str(source) for source in ids)


def _barrier_notice(entry: BarrierRecord, at: _Clock) -> Notice:
    """One barrier's Event: a Warning for an incomplete one (the sources that sent no barrier
    fragment), Normal for a complete heterogeneous one (every source's fragment is in the output,
    the sources disagree on the type)."""
    when = at(entry.t)
    where = f"barrier at output offset {entry.offset}" + (f" (resolved {when})" if when else "")
    mixed = "" if entry.homogeneous else "heterogeneous "
    if not entry.complete:
        return Notice(
            "Warning",
            "IncompleteBarrier",
            f"incomplete {mixed}{where}: no barrier from source(s) {_sources(entry.missing)};"
            f" sent {_types(entry)}",
        )
    return Notice("Normal", "HeterogeneousBarrier", f"heterogeneous {where}: {_types(entry)}")


def _barrier_summary(
    rest: Sequence[BarrierRecord], unlisted: Mapping[str, int], start: int, returned: int
) -> Notice:
    """The barriers beyond the Events of this update, in one Event: how many incomplete and
    heterogeneous since which output offset, and which sources missed them."""
    counts = {
        counter: unlisted[counter] + sum(not getattr(e, flag) for e in rest)
        for counter, flag in _FLAGS
    }
    if rest and not any(unlisted.values()):
        start = rest[0].offset
    what = " and ".join(f"{n} more {counter}" for counter, n in counts.items() if n)
    message = f"and {what} barrier(s) since output offset {start}"
    if rest:
        message += f", the newest at {rest[-1].offset}"
    missed: dict[int, int] = {}
    for entry in rest:
        for source in entry.missing:
            missed[source] = missed.get(source, 0) + 1
    if missed:
        message += "; missed by " + ", ".join(
            f"source {source}: {n}" for source, n in sorted(missed.items())
        )
    lost = max(unlisted.values())
    if lost:
        where = (
            f"resolved before the {returned} newest the orderer returned"
            if returned
            else "not in the orderer's answer"
        )
        message += f"; {lost} of them {where} (counted from its totals)"
    incomplete = counts["incomplete"] > 0
    return Notice(
        "Warning" if incomplete else "Normal",
        "IncompleteBarriers" if incomplete else "HeterogeneousBarriers",
        message,
    )


def _incomplete(entry: BarrierRecord, at: _Clock) -> dict[str, Any]:
    """``status.barriers.lastIncomplete``: the newest incomplete barrier."""
    last: dict[str, Any] = {
        "offset": entry.offset,
        "missing": list(entry.missing),
        "types": {str(source): kind for source, kind in sorted(entry.types.items())},
    }
    when = at(entry.t)
    if when:
        last["resolved"] = when
    return last
