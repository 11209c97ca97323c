"""Reading a run spread over N orderers unit by unit (docs/scale-out.md, "The Spark source: N
orderers in slice order"): the planning from the orderers' slice indexes and the pieces' heads
(:class:`UnitPlanner`), and the rows of one unit from its offset ranges (:func:`unit_rows`), both
without Spark, so that the simulation's tests hold them to the simulation's merge and the Spark
job (:mod:`orderer.spark.source.sliced_source`) runs them as they are: the driver plans, each
executor builds its units.

**Planning.** The merged stream is the pieces of all orderers in slice order
(:class:`MergedPieces`, from the slice indexes). A *unit* runs from a piece's first sure start to
the next piece's first sure start (:func:`~orderer.replay.merged_stream.sure_starts`); a piece
with none joins the unit before. So the planner reads, of each piece, only its head up to its
first sure start and the last row of the piece before it (the row the rule looks back at), and
takes everything else from the index: where each piece begins and ends, its highest ordinary
timestamp (the high-water mark at a unit's start is the highest of everything before it) and its
rows in the merged stream (so that a unit knows the position of its first row without reading
the pieces before). A unit is planned once everything before its end is known: the piece it ends
in is in every orderer's index's range (each orderer has emitted a later slice, or its run is
complete), and every piece before it is closed.

**Offsets.** Where the next unit begins is a :class:`UnitStart`: its slice, orderer and offset,
its position in the merged stream, the high-water mark before it, and for each orderer the
lowest offset any later unit reads (what the query commits there, so that each orderer's
retention keeps exactly what is still needed). It holds everything a restarted query needs to
plan on from it, with nothing before it read again.

**Rows.** An executor reads a unit's ranges in order, leaves out the barrier copies their
orderer does not keep, numbers the rows from the unit's position (the ``offset`` of a run over
several orderers is the row's position in the merged stream), flags late by the contract over
the merged stream with the high-water mark carried in
(:func:`~orderer.replay.merged_stream.late_flags`) and, under ``late_policy: drop``, leaves out
what only the merge finds late (its position stays unused). A unit begins at an event start and
ends at one, so glom over the units one after another is glom over the merged stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from orderer.batch import EmittedBatch
from orderer.building.glom import fragment_rows
from orderer.errors import InterfaceError
from orderer.replay.merged_stream import Before, high_water_after, late_flags, sure_starts
from orderer.replay.slicing import Slicing
from orderer.stats import SliceIndex

__all__ = [
    "HeadReader",
    "MergedPieces",
    "PieceSpan",
    "PlannedUnits",
    "Range",
    "RunStart",
    "Unit",
    "UnitPlanner",
    "UnitStart",
    "merged_pieces",
    "split_units",
    "unit_rows",
]

_FIRST_HEAD = 64
"""Rows of a piece's head read first; each further read doubles, up to :data:`_MOST_HEAD`."""
_MOST_HEAD = 65536
_TAIL = 8
"""Rows read back from a piece's end to find its last row in the merged stream."""


def _higher(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True, slots=True)
class PieceSpan:
    """A piece of the merged stream as its orderer's slice index gives it."""

    slice: int
    orderer: int
    first: int
    """Output offset of its first row at its orderer."""
    until: int
    """Offset after its last row known: the orderer's next piece's first offset, or for its last
    piece the end of the durable output."""
    highest: int | None
    """Its highest ordinary timestamp (None: none)."""
    kept: int
    """Its rows in the merged stream."""
    closed: bool
    """Its end is known: its orderer has a later piece, or its run is complete."""


@dataclass(frozen=True, slots=True)
class MergedPieces:
    """The pieces of all orderers from a slice on, in slice order (:func:`merged_pieces`)."""

    pieces: tuple[PieceSpan, ...]
    known: int
    """How many of them (a prefix) are known to be all the merged stream's up to there: no
    orderer can still open a piece among them."""
    complete: bool
    """Every orderer's run is complete: ``pieces`` is the rest of the merged stream."""
    ends: tuple[int, ...]
    """Each orderer's end of durable output (``next_offset`` of its index)."""

    def following(self, orderer: int, slice_: int) -> int:
        """The lowest offset of ``orderer`` a unit that begins in slice ``slice_`` can read: its
        first piece above that slice, or (none) its end."""
        for piece in self.pieces:
            if piece.orderer == orderer and piece.slice > slice_:
                return piece.first
        return self.ends[orderer]


def merged_pieces(indexes: Sequence[SliceIndex]) -> MergedPieces:
    """The orderers' slice indexes (orderer ``k``'s at ``k``, each from the same slice on) as one
    list in slice order, with what is known of it: every orderer whose run is not complete may
    still open a piece above its last one (none: above any), so the pieces up to the lowest such
    last slice are all the merged stream's."""
    spans: list[PieceSpan] = []
    reaches = []  # each open orderer's last slice listed (-1: none yet)
    for k, index in enumerate(indexes):
        pieces = index.pieces
        for i, piece in enumerate(pieces):
            last = i + 1 == len(pieces)
            spans.append(
                PieceSpan(
                    piece.slice,
                    k,
                    piece.first_offset,
                    index.next_offset if last else pieces[i + 1].first_offset,
                    piece.highest_timestamp,
                    piece.kept,
                    index.complete or not last,
                )
            )
        if not index.complete:
            reaches.append(pieces[-1].slice if pieces else -1)
    spans.sort(key=lambda p: p.slice)
    complete = not reaches
    known = len(spans) if complete else sum(p.slice <= min(reaches) for p in spans)
    return MergedPieces(
        tuple(spans), known, complete, tuple(index.next_offset for index in indexes)
    )


@dataclass(frozen=True, slots=True)
class RunStart:
    """Where one run of the orderers' run tables begins in the merged stream: each orderer's
    first offset of it, the rows of the merged stream before it and their high-water mark."""

    starts: tuple[int, ...]
    position: int
    high_water: int | None


@dataclass(frozen=True, slots=True)
class UnitStart:
    """Where the next unit begins (the query's offset; the module's text says why each part)."""

    slice: int
    """The piece it begins in; -1: before the run's first piece (nothing read yet)."""
    orderer: int
    offset: int
    """Its first row's offset at its orderer."""
    position: int
    """Its first row's position in the merged stream."""
    piece_position: int
    """The position of its piece's first row."""
    high_water: int | None
    """The high-water mark before it: the highest ordinary timestamp of the merged stream."""
    needed: tuple[int, ...]
    """Per orderer, the lowest offset a unit from here on reads: what the query commits."""
    ended: bool = False
    """Nothing follows: every orderer's run is complete and read to its end."""

    @classmethod
    def initial(cls, orderers: int) -> UnitStart:
        return cls(-1, 0, 0, 0, 0, None, (0,) * orderers)

    @classmethod
    def run_start(cls, before: RunStart) -> UnitStart:
        """Before the first row of one run of the orderers' run tables (``evb spark-job
        --follow-runs``): its rows are numbered on from the runs before and flagged late
        against their high-water mark, as one stream, and nothing before it is read."""
        return cls(-1, 0, 0, before.position, before.position, before.high_water, before.starts)

    def to_json(self) -> dict[str, Any]:
        """The offset as Spark keeps it in the checkpoint (JSON)."""
        return {
            "slice": self.slice,
            "orderer": self.orderer,
            "offset": self.offset,
            "position": self.position,
            "piecePosition": self.piece_position,
            "highWater": self.high_water,
            "needed": list(self.needed),
            "ended": self.ended,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> UnitStart:
        high = value.get("highWater")
        return cls(
            int(value["slice"]),
            int(value["orderer"]),
            int(value["offset"]),
            int(value["position"]),
            int(value["piecePosition"]),
            None if high is None else int(high),
            tuple(int(n) for n in value["needed"]),
            bool(value.get("ended", False)),
        )


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets ``[first, until)`` of orderer ``orderer``'s output."""

    orderer: int
    first: int
    until: int


@dataclass(frozen=True, slots=True)
class Unit:
    """What one builder builds: its ranges, read in order, are its rows (and the copies their
    orderers do not keep, left out)."""

    position: int
    """Its first row's position in the merged stream."""
    high_water: int | None
    """The high-water mark before it."""
    ranges: tuple[Range, ...]
    rows: int
    """Its rows in the merged stream."""


@dataclass(frozen=True, slots=True)
class PlannedUnits:
    """Units planned from a start, and where the next one begins."""

    units: tuple[Unit, ...]
    end: UnitStart


class HeadReader(Protocol):
    """What the planner reads of the orderers: their slice indexes and rows without payloads."""

    def index(self, orderer: int, from_slice: int) -> SliceIndex:
        """Every piece of ``orderer`` from ``from_slice`` on (as far as its output is durable)."""
        ...

    def heads(
        self, orderer: int, first: int, until: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        """Timestamps and barrier types of ``orderer``'s offsets ``[first, until)``."""
        ...


@dataclass(frozen=True, slots=True)
class _Found:
    """A piece's first sure start: its offset, the merged stream's rows of the piece before it
    and the high-water mark there."""

    offset: int
    kept: int
    high_water: int | None


class UnitPlanner:
    """The driver's planning (the module's text): units from a :class:`UnitStart` on."""

    __slots__ = ("_drop", "_dt", "_reader", "slicing")

    def __init__(
        self, slicing: Slicing, dt: int | None, reader: HeadReader, *, drop_late: bool = False
    ) -> None:
        self.slicing = slicing
        self._dt = dt
        """glom's window, None when nothing is built (every row a sure start)."""
        self._reader = reader
        self._drop = drop_late
        """``late_policy: drop``: what only the merge finds late is left out, and the sure
        starts are those of the stream without it (an orderer under it emits nothing late of
        its own, so that is every row below the high-water mark)."""

    def _kept(self, orderer: int, ts: np.ndarray, barrier: np.ndarray) -> npt.NDArray[np.bool_]:
        return (barrier == 0) | (self.slicing.owner(ts) == orderer)

    def plan(
        self, start: UnitStart, *, max_rows: int | None = None, until: UnitStart | None = None
    ) -> PlannedUnits:
        """The units from ``start`` on, as many as are known (at least one once ``max_rows``
        rows are reached; none beyond ``until``, a plan made before and planned again)."""
        if start.ended:
            return PlannedUnits((), start)
        n = self.slicing.orderers
        merged = merged_pieces(
            [self._reader.index(k, max(start.slice, 0)) for k in range(n)]
        )
        known = merged.pieces[: merged.known]
        given = start
        if start.slice < 0:  # the run's first row begins the first unit
            if not known:
                if merged.complete:
                    return PlannedUnits((), self._ended(merged, start.position))
                return PlannedUnits((), start)
            first = known[0]
            start = UnitStart(
                first.slice, first.orderer, first.first, start.position, start.position,
                start.high_water, self._needed(merged, first.slice, first.orderer, first.first),
            )  # fmt: skip
            at = 0
        else:
            at = next(
                (i for i, p in enumerate(known)
                 if p.slice == start.slice and p.orderer == start.orderer),
                -1,
            )  # fmt: skip
            if at < 0:
                raise InterfaceError(
                    f"orderer {start.orderer} lists no piece of slice {start.slice}, where the "
                    "query's next unit begins: its output is not the one the query read"
                )
        units: list[Unit] = []
        rows = 0
        while True:
            planned = self._unit(start, known, at, merged)
            if planned is None:
                break
            unit, start, at = planned
            units.append(unit)
            rows += unit.rows
            if start.ended or start == until or (max_rows is not None and rows >= max_rows):
                break
        return PlannedUnits(tuple(units), start if units else given)

    def _unit(
        self, start: UnitStart, known: tuple[PieceSpan, ...], at: int, merged: MergedPieces
    ) -> tuple[Unit, UnitStart, int] | None:
        """The unit that begins at ``start`` (in ``known[at]``), where the next begins and its
        piece; None while it cannot be planned yet."""
        piece = known[at]
        if not piece.closed:
            return None
        ranges = [Range(piece.orderer, start.offset, piece.until)]
        position = start.piece_position + piece.kept
        high = _higher(start.high_water, piece.highest)
        j = at + 1
        while j < len(known):
            nxt = known[j]
            found = self._first_sure(known[j - 1], nxt, high)
            if found is not None:
                ranges.append(Range(nxt.orderer, nxt.first, found.offset))
                end = UnitStart(
                    nxt.slice, nxt.orderer, found.offset, position + found.kept, position,
                    found.high_water, self._needed(merged, nxt.slice, nxt.orderer, found.offset),
                )  # fmt: skip
                break
            if not nxt.closed:  # no sure start in what it holds so far: wait for more
                return None
            ranges.append(Range(nxt.orderer, nxt.first, nxt.until))  # it joins this unit
            position += nxt.kept
            high = _higher(high, nxt.highest)
            j += 1
        else:
            if not merged.complete or merged.known < len(merged.pieces):
                return None
            end = self._ended(merged, position)
        unit = Unit(
            start.position,
            start.high_water,
            tuple(r for r in ranges if r.until > r.first),
            end.position - start.position,
        )
        return unit, end, j

    def _needed(self, merged: MergedPieces, slice_: int, orderer: int, offset: int) -> tuple[
        int, ...
    ]:
        return tuple(
            offset if k == orderer else merged.following(k, slice_)
            for k in range(self.slicing.orderers)
        )

    @staticmethod
    def _ended(merged: MergedPieces, position: int) -> UnitStart:
        return UnitStart(-1, 0, 0, position, position, None, merged.ends, ended=True)

    def _before(self, piece: PieceSpan, high_water: int | None) -> Before:
        """The last row of ``piece`` (closed) in the merged stream, read back from its end
        (``high_water``: the mark through it). Under ``late_policy: drop`` a row the merge
        leaves out is below the mark before it, and the last row left in is a barrier or at the
        mark: the rows after it are below it, so the mark stays its timestamp."""
        back = _TAIL
        while True:
            first = max(piece.first, piece.until - back)
            ts, barrier = self._reader.heads(piece.orderer, first, piece.until)
            keep = self._kept(piece.orderer, ts, barrier)
            if self._drop and high_water is not None:
                keep &= (barrier != 0) | (ts >= np.uint64(high_water))
            kept = np.flatnonzero(keep)
            if kept.size:
                row = int(kept[-1])
                return Before(int(ts[row]), int(barrier[row]), high_water)
            if first == piece.first:
                raise InterfaceError(
                    f"orderer {piece.orderer}'s piece of slice {piece.slice} holds no row of "
                    "the merged stream, which its slice index says opens it"
                )
            back *= 2

    def _needs_before(self, ts: np.uint64, barrier: np.uint32, high: int | None) -> bool:
        """Whether telling if a piece's first row is a sure start needs the row before it. The
        row is above every row before it (a later slice), so it is one whatever that row is
        when it is a barrier, when nothing ordinary came before (the row before is a barrier,
        or there is none), or when it lies more than ``2 dt`` above the high-water mark (and
        so above the row before): then the rule needs no read back."""
        assert self._dt is not None
        return not (barrier != 0 or high is None or int(ts) - high > 2 * self._dt)

    def _first_sure(self, before_piece: PieceSpan, piece: PieceSpan, high: int | None) -> (
        _Found | None
    ):
        """``piece``'s first sure start, reading its head as far as it must; None when what it
        holds has none (all of it, once it is closed)."""
        if piece.until <= piece.first:
            return None
        before: Before | None = None
        looked_back = self._dt is None
        ts_parts: list[np.ndarray] = []
        barrier_parts: list[np.ndarray] = []
        read_to, size = piece.first, _FIRST_HEAD
        while read_to < piece.until:
            stop = min(piece.until, read_to + size)
            ts, barrier = self._reader.heads(piece.orderer, read_to, stop)
            if ts.shape[0] != stop - read_to:
                raise InterfaceError(
                    f"orderer {piece.orderer} gave {ts.shape[0]} rows of offsets "
                    f"[{read_to}, {stop})"
                )
            ts_parts.append(np.asarray(ts, dtype=np.uint64))
            barrier_parts.append(np.asarray(barrier, dtype=np.uint32))
            read_to, size = stop, min(2 * size, _MOST_HEAD)
            head_ts = np.concatenate(ts_parts)
            head_barrier = np.concatenate(barrier_parts)
            kept = np.flatnonzero(self._kept(piece.orderer, head_ts, head_barrier))
            left = kept  # the rows of the stream glom runs over
            if self._drop:
                left = kept[~late_flags(head_ts[kept], head_barrier[kept], high)]
            if not looked_back:  # whether its first row is a sure start may need the row before
                looked_back = True
                if self._needs_before(head_ts[left[0]], head_barrier[left[0]], high):
                    before = self._before(before_piece, high)
            sure = np.flatnonzero(sure_starts(head_ts[left], head_barrier[left], self._dt, before))
            if sure.size:
                row = int(left[int(sure[0])])
                r = int(np.searchsorted(kept, row))  # the merged stream's rows before it
                return _Found(
                    piece.first + row,
                    r,
                    high_water_after(head_ts[kept[:r]], head_barrier[kept[:r]], high),
                )
        return None


def split_units(units: Sequence[Unit], parts: int) -> list[tuple[Unit, ...]]:
    """Consecutive units dealt into at most ``parts`` partitions of about equal rows, in
    order (a partition holds whole units: it builds alone, exactly as glom over the stream)."""
    total = sum(u.rows for u in units)
    groups: list[tuple[Unit, ...]] = []
    current: list[Unit] = []
    done = 0
    for unit in units:
        current.append(unit)
        done += unit.rows
        if len(groups) + 1 < parts and done * parts >= total * (len(groups) + 1):
            groups.append(tuple(current))
            current = []
    if current:
        groups.append(tuple(current))
    return groups


def _kept_rows(batch: EmittedBatch, keep: npt.NDArray[np.bool_]) -> pa.RecordBatch:
    """The batch's fragment rows (offsets to be replaced) where ``keep``."""
    rows = fragment_rows(batch)
    return rows if bool(keep.all()) else rows.filter(pa.array(keep))


def unit_rows(
    unit: Unit,
    read: Callable[[Range], Iterable[EmittedBatch]],
    slicing: Slicing,
    *,
    drop_late: bool = False,
) -> Iterator[pa.RecordBatch]:
    """A unit's rows of the merged stream (FRAGMENT_SCHEMA, ``offset`` their position), read
    range by range with ``read`` (payloads and all): kept copies only, late by the contract over
    the merged stream from the high-water mark carried in; ``drop_late``: ``late_policy: drop``,
    what only the merge finds late is left out. The rows must be as many as the index said."""
    position = unit.position
    high = unit.high_water
    for part in unit.ranges:
        for batch in read(part):
            if not len(batch):
                continue
            ts, barrier = batch.timestamp, batch.barrier
            keep = (barrier == 0) | (slicing.owner(ts) == part.orderer)
            rows = _kept_rows(batch, keep)
            kept_ts, kept_barrier = ts[keep], barrier[keep]
            n = int(kept_ts.shape[0])
            late = late_flags(kept_ts, kept_barrier, high)
            high = high_water_after(kept_ts, kept_barrier, high)
            positions = np.arange(position, position + n, dtype=np.int64)
            position += n
            flagged = batch.late[keep]
            rows = rows.set_column(0, "offset", pa.array(positions))
            rows = rows.set_column(4, "late", pa.array(late))
            if drop_late and bool((late & ~flagged).any()):  # as the orderers drop theirs
                rows = rows.filter(pa.array(~(late & ~flagged)))
            if rows.num_rows:
                yield rows
    if position != unit.position + unit.rows:
        raise InterfaceError(
            f"the unit at position {unit.position} read {position - unit.position} rows of the "
            f"merged stream where the slice indexes count {unit.rows}"
        )
