"""The rules every reader of the merged stream applies (docs/scale-out.md, "The merged stream" and
"Events across slice boundaries"), written once: the late flag by the contract over the merged
stream with the high-water mark carried in (:func:`late_flags`), the sure starts
(:func:`sure_starts`), the units they bound (:func:`unit_bounds`) and glom over each unit
(:func:`unit_event_starts`).

Why a module of its own: two readers apply them. The simulation (:mod:`orderer.replay.
sliced_merge`) holds the whole merged stream and applies each rule to all of it at once; the Spark
job over N orderers (:mod:`orderer.replay.unit_plan`, :mod:`orderer.spark.source.sliced_source`)
holds one stretch at a time, a piece's head on the driver, a unit on an executor, and carries in
what the stretch needs of the stream before it: the high-water mark (from the slice index) and, for
the sure-start rule, the row just before (:class:`Before`). Each rule here takes that carried state,
and applied to the whole stream without it (None) it is the simulation's; the tests hold the two
readers to each other.

**Sure start** (:func:`sure_starts`): a position where glom starts an event whatever came before:
a barrier there or just before it; a step up of more than ``dt`` from a fragment that was at the
high-water mark (the highest ordinary timestamp so far: the open event began at or below it); a
difference of more than ``2 dt`` from the fragment before (the open event's first is within
``dt`` of that fragment). "At the high-water mark" is judged against ordinary timestamps only,
the mark the slice index carries (its ``highest_timestamp``), so that a reader holding only a
piece's head and the index can decide it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer.building.glom import event_starts

__all__ = [
    "Before",
    "high_water_after",
    "late_flags",
    "sure_starts",
    "unit_bounds",
    "unit_event_starts",
]

_U64 = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Before:
    """The merged stream's row just before a stretch, as far as the sure-start rule looks back:
    its timestamp and barrier type, and the high-water mark through it (the highest ordinary
    timestamp of the stream up to and including it; None: no ordinary fragment yet)."""

    timestamp: int
    barrier: int
    high_water: int | None

    @property
    def at_high_water(self) -> bool:
        """It is an ordinary fragment at the high-water mark (the highest so far)."""
        return self.barrier == 0 and self.high_water is not None and (
            self.timestamp >= self.high_water
        )


def high_water_after(
    ts: npt.NDArray[np.uint64], barrier: npt.NDArray[np.integer], high_water: int | None
) -> int | None:
    """The high-water mark after a stretch (``high_water``: the mark before it)."""
    ordinary = ts[np.asarray(barrier) == 0]
    if not ordinary.size:
        return high_water
    top = int(ordinary.max())
    return top if high_water is None else max(top, high_water)


def late_flags(
    ts: npt.NDArray[np.uint64],
    barrier: npt.NDArray[np.integer],
    high_water: int | None = None,
    resets: list[int] | None = None,
) -> npt.NDArray[np.bool_]:
    """The contract's late flag of every row of a stretch of an ordered stream: an ordinary
    fragment below the high-water mark. The mark is the highest ordinary timestamp before the
    row (the highest one is never late, so the highest non-late one is the highest of all),
    ``high_water`` the mark before the stretch (None: nothing before it); ``resets``: the rows
    after which it is forgotten (``reset_on_begin_run``)."""
    late = np.zeros(ts.size, dtype=np.bool_)
    ordinary = np.asarray(barrier) == 0
    seed = high_water
    for a, b in itertools.pairwise([0, *(resets or []), ts.size]):
        if b <= a:
            seed = None
            continue
        plain = ordinary[a:b]
        high = np.maximum.accumulate(np.where(plain, ts[a:b], np.uint64(0)))
        seen = np.logical_or.accumulate(plain)
        if seed is None:
            late[a + 1 : b] = plain[1:] & seen[:-1] & (ts[a + 1 : b] < high[:-1])
        else:  # the mark carried in stands before the stretch's first row
            mark = np.empty(b - a, dtype=np.uint64)
            mark[0] = seed
            np.maximum(high[:-1], np.uint64(seed), out=mark[1:])
            late[a:b] = plain & (ts[a:b] < mark)
        seed = None  # a reset forgets it
    return late


def sure_starts(
    ts: npt.NDArray[np.uint64],
    barrier: npt.NDArray[np.integer],
    dt: int | None,
    before: Before | None = None,
) -> npt.NDArray[np.bool_]:
    """Which rows of a stretch of the merged stream are sure starts (the module's text), given
    the row before it (None: the stretch begins the stream, and its first row is one). Without
    building (``dt`` None) every row is an event of its own, so every row is one."""
    n = int(ts.shape[0])
    if dt is None:
        return np.ones(n, dtype=np.bool_)
    sure = np.zeros(n, dtype=np.bool_)
    if not n:
        return sure
    ordinary = np.asarray(barrier) == 0
    top = np.maximum.accumulate(np.where(ordinary, ts, np.uint64(0)))
    if before is not None and before.high_water is not None:
        np.maximum(top, np.uint64(before.high_water), out=top)
    highest = ordinary & (ts == top)  # at the high-water mark, which it holds
    if before is None:
        sure[0] = True
        prev, cur = ts[:-1], ts[1:]
        prev_barrier, cur_barrier = barrier[:-1], barrier[1:]
        prev_highest = highest[:-1]
        out = sure[1:]
    else:
        prev = np.concatenate([np.array([before.timestamp], dtype=np.uint64), ts[:-1]])
        cur = ts
        prev_barrier = np.concatenate([np.array([before.barrier]), np.asarray(barrier[:-1])])
        cur_barrier = barrier
        prev_highest = np.concatenate([[before.at_high_water], highest[:-1]])
        out = sure
    up = cur > prev
    step = np.where(up, cur - prev, prev - cur)
    gap = up & (step > np.uint64(dt)) & prev_highest
    wide = step > np.uint64(2 * dt) if 2 * dt < _U64 else np.zeros(step.size, np.bool_)
    out[:] = (np.asarray(cur_barrier) != 0) | (np.asarray(prev_barrier) != 0) | gap | wide
    return sure


def unit_bounds(
    firsts: npt.NDArray[np.int64], sure: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], int]:
    """Where the units of a merged stream begin, given each piece's first row (``firsts``,
    ascending, the first 0) and its sure starts: at each piece's first sure start, a piece
    with none joining the unit before; and how many pieces had none (docs/scale-out.md,
    "Events across slice boundaries"). Returns the bounds with the stream's end appended."""
    n = int(sure.shape[0])
    if not n:
        return np.zeros(1, np.int64), 0
    positions = np.flatnonzero(sure)
    unit = positions[np.minimum(np.searchsorted(positions, firsts), positions.size - 1)]
    unit = np.where(unit >= firsts, unit, n)  # a piece with no sure start from its start on
    without = int((unit[:-1] >= firsts[1:]).sum()) + int(unit[-1] >= n)
    return np.append(np.unique(unit[unit < n]), n).astype(np.int64), without


def unit_event_starts(
    ts: npt.NDArray[np.uint64],
    barrier: npt.NDArray[np.integer],
    bounds: npt.NDArray[np.int64],
    dt: int | None,
    max_fragments: int = 1000,
) -> npt.NDArray[np.int64]:
    """Event starts of a stretch built unit by unit: glom run afresh from each bound to the next
    (``bounds``: the units' first rows and the stretch's end), as each unit's builder runs it.
    Each bound is a sure start, so these are glom's starts over the whole stretch."""
    parts = [
        event_starts(ts[a:b], barrier[a:b], dt=dt, max_fragments=max_fragments) + a
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        if b > a
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
