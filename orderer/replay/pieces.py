"""The slice index of one orderer's output (docs/scale-out.md, "The merged stream"): where each of
its pieces begins, the highest ordinary timestamp in it and how many of its rows are in the merged
stream, cut batch by batch (:class:`PieceCutter`) and folded into a list (:class:`PieceList`).

Why here, below the service and the Spark job: the service keeps the index of its live output
(``GetSliceIndex``, :mod:`orderer.service.slices` adds the durability rule), and the Spark job
over a finished run's N data directories (``evb spark-job --path d0,d1,d2``) makes the same index
from each ordered log, where no orderer serves it. One cut, one fold: the index a reader plans with
is the same whether an orderer served it or the reader made it from the log.

Why each piece carries its ``kept`` rows: the merged stream numbers its rows (the Spark job's
``offset`` of a run over several orderers is a row's position in it), and a piece's offsets also
hold the barrier copies its orderer does not keep (copies of other orderers' slices, which only
held it). A reader that plans from the index alone needs each piece's count in the merged stream
to number the next piece's rows without reading this one's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from orderer.batch import EmittedBatch
from orderer.replay.slicing import Slicing
from orderer.stats import Piece, SliceIndex

__all__ = ["DEFAULT_LIMIT", "PieceCut", "PieceCutter", "PieceList"]

DEFAULT_LIMIT = 65536
"""Pieces in a ``GetSliceIndex`` reply when the request says 0 (about 2 MB of reply at most)."""


@dataclass(frozen=True, slots=True)
class PieceCut:
    """What one emitted batch adds to the slice index."""

    end_offset: int
    """Output offset after the batch: the cut is folded in once the output below is durable."""
    highest: int | None
    """The highest ordinary timestamp among the batch's rows before its first new piece (they
    continue the piece the output before ended in); None: none."""
    kept: int
    """How many of those rows are in the merged stream (not a copy this orderer does not keep)."""
    opened: tuple[Piece, ...]
    """The pieces that begin in the batch, each with its highest ordinary timestamp and its kept
    rows in the batch."""


class PieceCutter:
    """The piece rule over an orderer's output, one emitted batch after another, in order (on
    the orderer's thread, in recovery, or over an ordered log read back): the piece the output
    so far ended in is carried."""

    __slots__ = ("_current", "_index", "_slicing")

    def __init__(self, slicing: Slicing, index: int) -> None:
        self._slicing = slicing
        self._index = index
        self._current: int | None = None

    def cut(self, emitted: EmittedBatch) -> PieceCut:
        return self.cut_rows(emitted.first_seq, emitted.timestamp, emitted.barrier)

    def cut_rows(self, first: int, ts: np.ndarray, barrier: np.ndarray) -> PieceCut:
        """:meth:`cut` of the rows at offsets ``first, first + 1, ...`` given by their timestamps
        and barrier types alone (a log read without payloads)."""
        n = int(ts.shape[0])
        end = first + n
        if not n:
            return PieceCut(end, None, 0, ())
        pieces = self._slicing.pieces(self._index, ts, barrier, self._current)
        starts = pieces.starts
        ordinary = barrier == 0
        carried = not starts.size or starts[0] > 0  # rows before the first new piece
        bounds = np.concatenate([[0], starts]) if carried else starts
        highest = np.maximum.reduceat(np.where(ordinary, ts, np.uint64(0)), bounds).tolist()
        holds = np.logical_or.reduceat(ordinary, bounds).tolist()
        kept = np.add.reduceat(pieces.kept.astype(np.int64), bounds).tolist()
        tops = [h if o else None for h, o in zip(highest, holds, strict=True)]
        slices = pieces.piece[starts].tolist()
        opened = tuple(
            Piece(s, first + row, top, count)
            for s, row, top, count in zip(
                slices, starts.tolist(), tops[int(carried) :], kept[int(carried) :], strict=True
            )
        )
        if opened:
            self._current = opened[-1].slice
        return PieceCut(end, tops[0] if carried else None, kept[0] if carried else 0, opened)


class PieceList:
    """The pieces of an orderer's output folded cut by cut, ascending by slice (and so by
    offset)."""

    __slots__ = ("_highest", "_kept", "_offsets", "_slices", "next_offset")

    def __init__(self) -> None:
        self._slices: list[int] = []
        self._offsets: list[int] = []
        self._highest: list[int | None] = []
        self._kept: list[int] = []
        self.next_offset = 0
        """The list holds the pieces of the output below this offset."""

    def fold(self, cut: PieceCut) -> None:
        """A cut of the output, in output order."""
        if self._highest:
            if cut.highest is not None:
                top = self._highest[-1]
                self._highest[-1] = cut.highest if top is None else max(top, cut.highest)
            self._kept[-1] += cut.kept
        for piece in cut.opened:
            self._slices.append(piece.slice)
            self._offsets.append(piece.first_offset)
            self._highest.append(piece.highest_timestamp)
            self._kept.append(piece.kept)
        self.next_offset = max(self.next_offset, cut.end_offset)

    def __len__(self) -> int:
        return len(self._slices)

    def read(self, from_slice: int, limit: int, *, complete: bool) -> SliceIndex:
        """The pieces of slice ``from_slice`` and above, ``limit`` at most (0:
        :data:`DEFAULT_LIMIT`); ``complete``: no piece follows and the last one is whole."""
        start = bisect.bisect_left(self._slices, from_slice)
        stop = min(len(self._slices), start + (limit or DEFAULT_LIMIT))
        pieces = tuple(
            Piece(self._slices[i], self._offsets[i], self._highest[i], self._kept[i])
            for i in range(start, stop)
        )
        return SliceIndex(pieces, complete, self.next_offset)
