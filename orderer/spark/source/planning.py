"""How the ``evb`` data source plans its reads of one orderer, on the driver: where a read may
end (:class:`Planner`: at an event start, within the trigger's limit, the open event only once
the run ended; :func:`target_end`: how far the orderer's output goes, or where the option
``run``'s run ends), and how a read splits into partitions (:class:`OffsetRange`,
:func:`plan_partitions`; a finished run's log one record batch at a time, :func:`plan_log`).

Why event starts: a partition that holds whole events builds them alone, exactly as the
sequential glom (the data source's docstring, :mod:`orderer.spark.source.datasource`, says
more). The timestamps the plans are made of are read without payloads (``payload=False``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from pyspark.sql.datasource import InputPartition

from orderer.spark.source.access import channel_security, retried, run_end
from orderer.spark.source.options import Options

__all__ = [
    "OffsetRange",
    "Planner",
    "plan_log",
    "plan_partitions",
    "target_end",
]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One partition: the offsets ``[first, until)``, whole events (pickled to an executor)."""

    first: int
    until: int
    target: str | None
    segments: tuple[str, ...] = ()
    reconnect_timeout: float = 120.0
    security: tuple[tuple[str, str], ...] = ()


def plan_partitions(
    starts: np.ndarray, first: int, until: int, parts: int
) -> list[tuple[int, int]]:
    """Cut ``[first, until)`` into at most ``parts`` offset ranges of about equal size, each
    beginning at an event start (``starts``: absolute offsets of the event starts, ascending)."""
    if until <= first:
        return []
    cuts = [first]
    for k in range(1, parts):
        ideal = first + (until - first) * k // parts
        at = int(np.searchsorted(starts, ideal, "left"))
        if at < len(starts) and cuts[-1] < int(starts[at]) < until:
            cuts.append(int(starts[at]))
    cuts.append(until)
    return list(itertools.pairwise(cuts))


def _scan_target(options: Options, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps and barrier types of ``[first, until)``, without payloads."""
    from orderer.client import OrderedStreamReader

    assert options.target is not None
    if until <= first:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
    batches = list(
        OrderedStreamReader(
            options.target,
            first,
            until=until,
            payload=False,
            reconnect_timeout=options.reconnect_timeout,
            connect_timeout=options.reconnect_timeout,
            security=channel_security(options.security),
        )
    )
    return (
        np.concatenate([b.timestamp for b in batches]),
        np.concatenate([b.barrier for b in batches]),
    )


def target_end(options: Options) -> tuple[int, bool]:
    """(durable end of the ordered log, whether the run ended); with the option ``run``, (that
    run's end, True) once the run table gives it one, else (the durable end, False)."""
    from orderer.client import get_stats

    assert options.target is not None
    target = options.target
    stats = retried(  # an orderer killed and restarting: the query waits, it does not end
        lambda: get_stats(  # every latestOffset: one barrier record, not the default thousand
            target,
            barrier_log_limit=1,
            timeout=options.reconnect_timeout,
            connect_timeout=options.reconnect_timeout,
            security=channel_security(options.security),
        ),
        target, options.reconnect_timeout,
    )  # fmt: skip
    available = stats.next_offset
    if options.run is None:
        return available, stats.run_ended
    end = run_end(stats.runs, options.run)
    return (available, False) if end is None else (min(available, end), True)


class Planner:
    """Where a read may end and how it splits, from the timestamps of the orderer's output."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._plans: dict[tuple[int, int], np.ndarray] = {}

    def end(self, first: int, available: int, ended: bool, limit: int | None) -> int:
        """The furthest event start at or below ``first + limit`` (at least one whole event),
        ``available`` itself once the run ended; ``first`` when no event is complete yet."""
        if available <= first:
            return first
        cap = available if limit is None else min(available, first + limit)
        if not self.options.glom.builds:
            self._plans[(first, cap)] = np.arange(first, cap, dtype=np.int64)
            return cap
        scan_to = min(available, cap + 1)  # one more: is `cap` itself an event start?
        ts, barrier = _scan_target(self.options, first, scan_to)
        starts = first + self.options.starts(ts, barrier)
        if cap == available and ended:
            end = available
        else:
            closed = starts[(starts > first) & (starts <= cap)]
            if closed.size:
                end = int(closed[-1])
            elif scan_to < available:  # one event longer than the limit: take it whole
                longer = min(available, first + self.options.glom.largest_event + 1)
                ts, barrier = _scan_target(self.options, first, longer)
                starts = first + self.options.starts(ts, barrier)
                later = starts[starts > first]
                end = int(later[0]) if later.size else (available if ended else first)
            else:
                end = available if ended else first
        self._plans[(first, end)] = starts[starts < end]
        return end

    def partitions(self, first: int, until: int) -> list[tuple[int, int]]:
        starts = self._plans.pop((first, until), None)
        if starts is None:  # planned by an earlier driver (a restart): plan again
            if self.options.glom.builds:
                ts, barrier = _scan_target(self.options, first, until)
                starts = first + self.options.starts(ts, barrier)
            else:
                starts = np.arange(first, until, dtype=np.int64)
        self._plans = {k: v for k, v in self._plans.items() if k[0] >= until}
        return plan_partitions(starts, first, until, self.options.partitions)


def plan_log(
    chunks: Iterable[tuple[int, np.ndarray, np.ndarray]],
    first: int,
    until: int,
    parts: int,
    starts: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> list[tuple[int, int]]:
    """:func:`plan_partitions` of ``[first, until)`` from the log's chunks (``(offset of the
    first row, timestamps, barrier types)``, in offset order, covering the range), one chunk at a
    time: the driver holds one chunk and the still open event, never the whole run.

    Why it can: every event start found in a chunk (glommed with the open event carried in front
    of it) is final, as in :func:`~orderer.building.glom.glom_batches`, and the plan needs only the
    first event start at or after each of the ``parts - 1`` ideal cuts."""
    if until <= first:
        return []
    ideals = [first + (until - first) * k // parts for k in range(1, parts)]
    found: list[int | None] = [None] * len(ideals)
    carry_at = first
    carry_ts = np.zeros(0, np.uint64)
    carry_barrier = np.zeros(0, np.int64)
    pending = 0  # ideals before this one have their event start
    for at, ts, barrier in chunks:
        low, high = max(first, at), min(until, at + len(ts))
        if low >= high:
            continue
        ts = np.concatenate([carry_ts, ts[low - at : high - at].astype(np.uint64)])
        barrier = np.concatenate([carry_barrier, barrier[low - at : high - at].astype(np.int64)])
        found_here = carry_at + starts(ts, barrier)
        while pending < len(ideals):
            k = int(np.searchsorted(found_here, ideals[pending], "left"))
            if k == found_here.size:
                break
            found[pending] = int(found_here[k])
            pending += 1
        last = int(found_here[-1])
        carry_ts, carry_barrier = ts[last - carry_at :], barrier[last - carry_at :]
        carry_at = last
    cuts = [first]
    for start in found:
        if start is not None and cuts[-1] < start < until:
            cuts.append(start)
    cuts.append(until)
    return list(itertools.pairwise(cuts))
