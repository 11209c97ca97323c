"""The outputs of N time-sliced orderers merged into one stream, events built slice by slice, and
the comparison with one orderer's output of the same run (docs/scale-out.md).

**Merge** (:func:`merge`): orderer ``o``'s output is cut into *pieces*: a piece begins at each
fragment whose slice is above every slice ``o`` emitted before, and holds what ``o`` emits until
the next such fragment (its late fragments included). Pieces are numbered by that slice, which
``o`` owns, so no two orderers have a piece of the same number, and the merged stream is the
pieces in slice order, each in its orderer's own order. Barrier copies at an orderer that does
not own the barrier's slice only held that orderer; they are left out. This is what a consumer
reading the N orderers in slice order sees, written here as one stable sort.

**Building** (:func:`built_starts`): each slice's events are built on their own, from the
first *sure start* at or after the start of its piece up to the next slice's: a position where
glom starts an event whatever came before it (a barrier there or just before it; a step up of
more than ``dt`` from a fragment that was the highest so far; a difference of more than
``2 dt``). From a sure start on, glom's chain does not depend on what came before, so events
built this way are exactly glom's over the whole merged stream, and none is split at a slice
boundary; one that straddles it is built by the earlier slice's builder.

**Comparison** (:func:`compare`): fragments are matched by their number (the router replaces
each payload with it), so every count is exact: fragments found at another place (the fewest
that must move to turn one order into the other), late flags that differ, events (glom with
``dt``) that are not the same fragments in the same order, barrier fragments whose resolution
differs.

Events are glom's own (:func:`orderer.building.glom.event_starts`, with glom's default
``--maxfragments``), the rule the Spark job builds with: a second copy of the rule is what this
simulation must not have. What the comparison finds is typed (:class:`Differences` and its parts,
:class:`OutputSummary`), so its readers (the command line's table, ``--stats``, the tests) name
fields a type checker knows; :meth:`Differences.to_json` is the layout of ``--stats``
(docs/scale-out.md, "The simulation and its sweeps").
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer.batch import EmittedBatch
from orderer.building.glom import event_starts
from orderer.replay.merged_stream import late_flags, sure_starts, unit_bounds, unit_event_starts
from orderer.replay.slicing import Slicing

__all__ = [
    "BarrierDifferences",
    "BarrierResolutions",
    "Differences",
    "EventDifferences",
    "FragmentDifferences",
    "LateDifferences",
    "Merged",
    "Output",
    "OutputSummary",
    "Stream",
    "built_starts",
    "compare",
    "merge",
]

_Resolution = tuple[bool, bool, tuple[int, ...]]
"""A barrier's resolution: complete, homogeneous, the missing sources."""


def _starts(
    ts: npt.NDArray[np.uint64], barrier: npt.NDArray[np.uint32], dt: int
) -> npt.NDArray[np.int64]:
    """Where glom (window ``dt``, its default ``--maxfragments``) starts the events of an
    ordered stream; none in an empty one."""
    return event_starts(ts, barrier, dt=dt) if ts.size else np.zeros(0, np.int64)


@dataclass(frozen=True, slots=True)
class BarrierResolutions:
    """How one orderer's barrier resolutions went out (each counted once, however many barrier
    fragments it holds)."""

    complete: int
    incomplete: int


@dataclass(frozen=True, slots=True)
class OutputSummary:
    """What one orderer's run holds (``single`` in ``--stats``, beside its counters)."""

    fragments: int
    late: int
    barrier_resolutions: BarrierResolutions
    events: int | None
    """glom's events (None: no ``dt`` given, no events built)."""

    def to_json(self) -> dict[str, Any]:
        """The ``--stats`` layout: ``events`` only where events were built."""
        out = dataclasses.asdict(self)
        if self.events is None:
            del out["events"]
        return out


@dataclass(frozen=True, slots=True)
class FragmentDifferences:
    """Fragments in each output, in one only, and left out by the merge (``late_policy:
    drop``, the fragments only the merged stream makes late)."""

    single: int
    sliced: int
    only_single: int
    only_sliced: int
    dropped_by_merge: int


@dataclass(frozen=True, slots=True)
class LateDifferences:
    """Late flags: each output's, those that differ on a common fragment, and those the merge
    changed from what the orderers flagged (:class:`Merged`'s ``raised``, ``lowered``)."""

    single: int
    sliced: int
    differ: int
    raised_by_merge: int
    lowered_by_merge: int


@dataclass(frozen=True, slots=True)
class BarrierDifferences:
    """Barrier fragments whose resolution differs from one orderer's, resolutions of one
    orderer whose barriers lie in more than one slice (the merged stream splits them), and
    barriers whose copies the orderers resolved differently."""

    differ: int
    split: int
    copies_disagree: int


@dataclass(frozen=True, slots=True)
class EventDifferences:
    """Events of one orderer against the slices' builders' (docs/scale-out.md, "Events across
    slice boundaries")."""

    single: int
    sliced: int
    differ: int
    """Events of one orderer that the slices' builders do not build identically (the same
    fragments, in the same order)."""
    straddling: int
    """Events of the merged stream that cross a piece boundary (built whole)."""
    differ_if_built_alone: int
    """Events that would differ had each slice been built from its piece's first fragment."""
    pieces_without_sure_start: int
    equal_to_glom_of_merged: bool
    """Whether the slices' builders made exactly glom's events over the whole merged stream."""


@dataclass(frozen=True, slots=True)
class Differences:
    """The differences between one orderer's output and the merged one, counted exactly
    (:func:`compare`)."""

    fragments: FragmentDifferences
    moved: int
    """The fewest fragments that must move to turn one order into the other."""
    late: LateDifferences
    barriers: BarrierDifferences
    events: EventDifferences | None
    """None: no ``dt`` given, no events built."""

    def to_json(self) -> dict[str, Any]:
        """The ``--stats`` layout: ``events`` only where events were built."""
        out = dataclasses.asdict(self)
        if self.events is None:
            del out["events"]
        return out


@dataclass(slots=True)
class Stream:
    """An ordered output, as far as the comparison needs it."""

    id: npt.NDArray[np.int64]
    ts: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    late: npt.NDArray[np.bool_]
    resolution: dict[int, _Resolution]
    """Per barrier row: the resolution it went out in."""
    group: dict[int, int]
    """Per barrier row: which resolution (counted from 0) it went out in."""

    def __len__(self) -> int:
        return int(self.id.shape[0])


class Output:
    """One orderer's output, gathered chunk by chunk, column by column (joined one column at a
    time, each column's chunks let go as it is joined: a long run's output is not held twice)."""

    __slots__ = ("_columns", "_groups", "_n_groups", "_resolution", "_stream")
    _DTYPES = (np.int64, np.uint64, np.uint32, np.bool_)

    def __init__(self) -> None:
        self._columns: list[list[np.ndarray]] = [[] for _ in self._DTYPES]
        self._resolution: dict[int, _Resolution] = {}
        self._groups: dict[int, int] = {}
        self._n_groups = 0
        self._stream: Stream | None = None

    def add(self, emitted: EmittedBatch, log: list[dict[str, Any]]) -> None:
        if len(emitted):
            ids = emitted.payload.view("<u8").astype(np.int64)
            if ids.size != len(emitted):
                raise ValueError("an emitted fragment without its 8-byte number")
            columns: tuple[np.ndarray, ...] = (
                ids, emitted.timestamp, emitted.barrier, emitted.late
            )
            for chunks, column in zip(self._columns, columns, strict=True):
                chunks.append(column)
        for entry in log:
            group = self._n_groups
            self._n_groups += 1
            value = (bool(entry["complete"]), bool(entry["homogeneous"]), tuple(entry["missing"]))
            for row in range(entry["offset"], entry["offset"] + len(entry["types"])):
                self._resolution[row] = value
                self._groups[row] = group
        self._stream = None

    def stream(self) -> Stream:
        if self._stream is None:
            joined = []
            for i, dtype in enumerate(self._DTYPES):
                chunks, self._columns[i] = self._columns[i], []
                joined.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype))
                del chunks
            ids, ts, barrier, late = joined
            self._stream = Stream(
                ids, ts, barrier, late, dict(self._resolution), dict(self._groups)
            )
        return self._stream

    def summary(self, dt: int | None) -> OutputSummary:
        """What one orderer's run holds: fragments, late ones, events (glom with ``dt``; none
        without), barrier resolutions."""
        s = self.stream()
        groups: dict[int, bool] = {}
        for row, group in s.group.items():
            groups[group] = s.resolution[row][0]
        complete = sum(groups.values())
        return OutputSummary(
            fragments=len(s),
            late=int(s.late.sum()),
            barrier_resolutions=BarrierResolutions(complete, len(groups) - complete),
            events=None if dt is None else int(_starts(s.ts, s.barrier, dt).size),
        )


@dataclass(slots=True)
class Merged(Stream):
    """The merged stream, with each row's piece (the slice that opened it)."""

    piece: npt.NDArray[np.uint64]
    copies_disagree: int
    raised: int
    """Fragments an orderer emitted not late that the merged stream makes late (below a
    fragment of another orderer's earlier piece): flagged late here."""
    lowered: int
    """Fragments an orderer flagged late that the merged stream does not (only with
    ``reset_on_begin_run``, where each orderer forgets its high-water mark at its own copy)."""
    dropped: int
    """Of the raised, those left out under ``late_policy: drop``."""
    """Barriers whose copies the orderers resolved differently (complete, homogeneous or the
    missing sources)."""
    positions: npt.NDArray[np.int64] | None = None
    """Each row's position in the merged stream before the merge left out what it alone found
    late (None: nothing left out, a row's position is its row): what a reader that numbers the
    stream from the slice indexes calls its ``offset`` (:mod:`orderer.replay.unit_plan`)."""


def merge(
    outputs: list[Output], slicing: Slicing, *, drop_late: bool = False, reset: bool = False
) -> Merged:
    """The orderers' outputs as one stream: pieces in slice order, owned barriers only, late
    flags the contract's over the merged stream (``drop_late``: what only the merge finds late
    is left out; ``reset``: ``reset_on_begin_run``). Each orderer's kept rows fall into runs (a
    piece, cut where a left-out copy was); the merged columns are those runs' views joined in
    piece order, so nothing is sorted row by row."""
    streams = [o.stream() for o in outputs]
    runs: list[tuple[int, int, int, int]] = []  # (piece, orderer, first row, row after)
    copies: dict[int, set[_Resolution]] = {}
    for o, s in enumerate(streams):
        pieces = slicing.pieces(o, s.ts, s.barrier)
        keep, piece = pieces.kept, pieces.piece
        cut = np.flatnonzero((piece[1:] != piece[:-1]) | ~keep[1:] | ~keep[:-1]) + 1
        for a, b in zip(np.append(0, cut).tolist(), np.append(cut, len(s)).tolist(), strict=True):
            if b > a and keep[a]:
                runs.append((int(piece[a]), o, a, b))
        for row, value in s.resolution.items():
            copies.setdefault(int(s.id[row]), set()).add(value)
    runs.sort()
    lengths = np.array([b - a for _, _, a, b in runs], dtype=np.int64)
    merged_at = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    resolution: dict[int, _Resolution] = {}
    group: dict[int, int] = {}
    for (_, o, a, b), at in zip(runs, merged_at, strict=False):
        s = streams[o]
        for row in np.flatnonzero(s.barrier[a:b]).tolist():
            resolution[at + row] = s.resolution[a + row]
            group[at + row] = o << 32 | s.group[a + row]

    def column(name: str, dtype: type) -> np.ndarray:
        parts = [getattr(streams[o], name)[a:b] for _, o, a, b in runs]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    ids, ts, barrier, flagged = (
        column("id", np.int64), column("ts", np.uint64), column("barrier", np.uint32),
        column("late", np.bool_),
    )
    piece = np.repeat(np.array([p for p, _, _, _ in runs], dtype=np.uint64), lengths)
    resets = sorted(
        row + 1 for row, (complete, homogeneous, _) in resolution.items()
        if complete and homogeneous and barrier[row] == 1
    ) if reset else []
    late = late_flags(ts, barrier, None, resets)
    raised = late & ~flagged
    lowered = int((flagged & ~late).sum())
    dropped = 0
    positions = None
    if drop_late and raised.any():  # what the merge makes late goes as the orderer's late did
        keep = ~raised
        dropped = int(raised.sum())
        positions = np.flatnonzero(keep).astype(np.int64)
        shift = np.cumsum(keep) - 1
        resolution = {int(shift[row]): value for row, value in resolution.items()}
        group = {int(shift[row]): value for row, value in group.items()}
        ids, ts, barrier, late, piece = ids[keep], ts[keep], barrier[keep], late[keep], piece[keep]
    return Merged(
        ids, ts, barrier, late, resolution, group, piece,
        sum(len(values) > 1 for values in copies.values()), int(raised.sum()), lowered, dropped,
        positions,
    )


def built_starts(
    m: Merged, dt: int | None, max_fragments: int = 1000
) -> tuple[npt.NDArray[np.int64], int]:
    """Event starts of the merged stream as the slices' builders make them, each from its
    piece's first sure start to the next's (:func:`~orderer.replay.merged_stream.unit_bounds`);
    and how many pieces held no sure start (their fragments built by the builder before: a run
    of events longer than a slice)."""
    n = len(m)
    if not n:
        return np.zeros(0, np.int64), 0
    if dt is None or max_fragments == 0:  # one event per row: every row a unit's start
        return np.arange(n, dtype=np.int64), 0
    bounds, without = unit_bounds(_piece_firsts(m), sure_starts(m.ts, m.barrier, dt))
    return unit_event_starts(m.ts, m.barrier, bounds, dt, max_fragments), without


def _piece_firsts(m: Merged) -> npt.NDArray[np.int64]:
    """The first row of each piece of the merged stream."""
    return np.flatnonzero(np.concatenate([[True], m.piece[1:] != m.piece[:-1]])).astype(np.int64)


def _index(n: int) -> np.dtype[Any]:
    """The narrowest signed integer that numbers ``n`` positions (a 10^8-fragment run's
    comparison holds several such arrays at once)."""
    return np.dtype(np.int32 if n < 2**31 - 1 else np.int64)


def _same_events(
    starts_a: npt.NDArray[np.int64], n_a: int, starts_b: npt.NDArray[np.int64], n_b: int,
    where: npt.NDArray[np.integer],
) -> int:
    """How many events of stream a are events of stream b (the same fragments, in the same
    order); ``where``: each position of a in b (-1: not in b)."""
    if not starts_a.size:
        return 0
    index = _index(max(n_a, n_b) + 1)
    len_a: npt.NDArray[np.integer] = np.diff(np.append(starts_a, n_a)).astype(index)
    len_b: npt.NDArray[np.integer] = np.zeros(n_b + 1, dtype=index)
    len_b[starts_b] = np.diff(np.append(starts_b, n_b))
    joined = np.zeros(n_a, dtype=np.bool_)  # position i and i + 1 of a are neighbours in b
    joined[:-1] = (where[1:] == where[:-1] + 1) & (where[:-1] >= 0)
    breaks: npt.NDArray[np.integer] = np.zeros(n_a + 1, dtype=index)
    np.cumsum(~joined, out=breaks[1:])
    inner = breaks[starts_a + len_a - 1] - breaks[starts_a]
    first = where[starts_a]
    return int(((first >= 0) & (inner == 0) & (len_b[np.maximum(first, 0)] == len_a)).sum())


def _moved(where: npt.NDArray[np.integer], n_b: int) -> int:
    """The fewest fragments that must move to turn one order into the other: the fragments
    present in both, less the longest run of them in the same order in both. ``where``: the
    common fragments' positions in b, in a's order. Both orders agree up to every position where
    a's first k fragments are b's first k; the longest run is only sought between them."""
    if not where.size:
        return 0
    present = np.zeros(n_b, dtype=np.bool_)
    present[where] = True
    rank: npt.NDArray[np.integer] = np.cumsum(present, dtype=_index(n_b + 1))
    del present
    rank = rank[where]
    rank -= 1
    high = np.maximum.accumulate(rank)
    high -= np.arange(rank.size, dtype=high.dtype)
    ends = np.flatnonzero(high == 0)
    del high
    moved = 0
    starts = np.append(0, ends[:-1] + 1)
    for i in np.flatnonzero(ends > starts).tolist():
        block = rank[starts[i] : ends[i] + 1].tolist()
        moved += len(block) - _longest_increasing(block)
    return moved


def _longest_increasing(values: list[int]) -> int:
    tails: list[int] = []
    for value in values:
        i = bisect_left(tails, value)
        if i == len(tails):
            tails.append(value)
        else:
            tails[i] = value
    return len(tails)


def _barriers(single: Stream, m: Merged, slicing: Slicing) -> BarrierDifferences:
    """Barrier fragments whose resolution differs from one orderer's; resolutions of one
    orderer whose barriers lie in more than one slice (the merged stream splits them)."""
    mine = {int(m.id[row]): value for row, value in m.resolution.items()}
    differ = sum(mine.get(int(single.id[row])) != value for row, value in single.resolution.items())
    slices: dict[int, set[int]] = {}
    for row, group in single.group.items():
        slices.setdefault(group, set()).add(int(single.ts[row]) // slicing.slice_ticks)
    return BarrierDifferences(
        differ=differ,
        split=sum(len(s) > 1 for s in slices.values()),
        copies_disagree=m.copies_disagree,
    )


def compare(
    single: Stream | Output, m: Merged, n_fragments: int, dt: int | None, slicing: Slicing
) -> Differences:
    """The differences between one orderer's output and the merged one, counted exactly; events
    only with glom's window ``dt``."""
    s = single.stream() if isinstance(single, Output) else single
    position: npt.NDArray[np.integer] = np.full(
        n_fragments, -1, dtype=_index(max(n_fragments, len(m)) + 1)
    )
    position[m.id] = np.arange(len(m), dtype=position.dtype)
    where = position[s.id]
    del position
    common = where >= 0
    n_common = int(common.sum())
    return Differences(
        fragments=FragmentDifferences(
            single=len(s),
            sliced=len(m),
            only_single=len(s) - n_common,
            only_sliced=len(m) - n_common,
            dropped_by_merge=m.dropped,
        ),
        moved=_moved(where[common], len(m)),
        late=LateDifferences(
            single=int(s.late.sum()),
            sliced=int(m.late.sum()),
            differ=int((s.late[common] != m.late[where[common]]).sum()),
            raised_by_merge=m.raised,
            lowered_by_merge=m.lowered,
        ),
        barriers=_barriers(s, m, slicing),
        events=None if dt is None else _events(s, m, where, dt),
    )


def _events(
    s: Stream, m: Merged, where: npt.NDArray[np.integer], dt: int
) -> EventDifferences:
    """Events of one orderer against the slices' builders', and what building every slice
    alone (from its piece's first fragment, no sure start sought) would have split."""
    single = _starts(s.ts, s.barrier, dt)
    built, without = built_starts(m, dt)
    n = len(m)
    whole = _starts(m.ts, m.barrier, dt)
    firsts = _piece_firsts(m) if n else whole
    alone = unit_event_starts(m.ts, m.barrier, np.append(firsts, n), dt)
    ends = np.append(built[1:], n) - 1
    identity: npt.NDArray[np.integer] = np.arange(n, dtype=_index(n + 1))
    return EventDifferences(
        single=int(single.size),
        sliced=int(built.size),
        differ=int(single.size) - _same_events(single, len(s), built, n, where),
        straddling=int((m.piece[built] != m.piece[ends]).sum()) if n else 0,
        differ_if_built_alone=int(built.size) - _same_events(built, n, alone, n, identity),
        pieces_without_sure_start=without,
        equal_to_glom_of_merged=bool(np.array_equal(built, whole)),
    )
