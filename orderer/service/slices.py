"""What an orderer of a run spread over several by time slices (docs/scale-out.md) does with its
slices: it takes only the ordinary fragments of its own (:class:`SliceOwner`), and it keeps its
slice index, where each piece of its output begins and the highest ordinary timestamp in it
(:class:`PieceCutter`, :class:`PieceIndex`), which ``GetSliceIndex`` serves.

Why refuse another orderer's fragment: the slices of a run are cut by one rule every source
computes alone (:class:`~orderer.replay.slicing.Slicing`); a fragment that reaches the wrong
orderer is ordered there against that orderer's data and clock, and is missing where the merged
stream looks for it. A source that routes wrong is broken, so its stream ends (INVALID_ARGUMENT
naming the fragment) before anything of the message is taken, as a malformed message does.

Why a slice index: a consumer reading the run in slice order (the Spark source) must know where
each orderer's pieces begin without reading every timestamp of the run, and the high-water mark
at a piece's start (the highest of the earlier pieces' highest timestamps) to flag late as the
contract does over the merged stream. The piece rule is :meth:`Slicing.pieces
<orderer.replay.slicing.Slicing.pieces>`, the simulation's own; here each emitted batch is cut
with it, the piece the output before ended in carried from batch to batch.

**Durability.** The index has no file of its own: it is rebuilt by recovery, whose replay of the
arrival log emits the whole output again from offset 0 (whatever retention deleted of the
ordered log) and hands each batch to a :class:`PieceCutter`
(:func:`~orderer.service.recovery.recover`'s ``emitted``). So it survives kill -9 with nothing
more to write, and nothing to keep consistent with the logs. Live, a batch is cut on the
orderer's thread as its output is taken (per fragment work stays off the event loop), and the
cut is folded into the index only once the write round that makes that output durable ends
(:meth:`PieceIndex.durable`): output that was not durable at a crash may be emitted otherwise
after it, and the index never names what a reader cannot read.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np

from orderer.batch import EmittedBatch, FragmentBatch
from orderer.errors import InterfaceError
from orderer.replay.slicing import Slicing
from orderer.stats import Piece, SliceIndex

__all__ = ["DEFAULT_LIMIT", "PieceCut", "PieceCutter", "PieceIndex", "SliceOwner"]

DEFAULT_LIMIT = 65536
"""Pieces in a ``GetSliceIndex`` reply when the request says 0 (about 2 MB of reply at most)."""


class SliceOwner:
    """Orderer ``index`` of a run cut by ``slicing``: which ordinary fragments it takes."""

    __slots__ = ("index", "slicing")

    def __init__(self, slicing: Slicing, index: int) -> None:
        self.slicing = slicing
        self.index = index

    def check(self, batch: FragmentBatch) -> None:
        """Refuse (``InterfaceError``) a batch holding an ordinary fragment of a slice another
        orderer owns, naming the first: its source, timestamp, slice and owner, and this
        orderer. Barriers go to every orderer and are never refused."""
        row = self.slicing.first_not_owned(self.index, batch.timestamp, batch.barrier)
        if row is None:
            return
        ts = int(batch.timestamp[row])
        s = ts // self.slicing.slice_ticks
        raise InterfaceError(
            f"source {int(batch.source[row])}: fragment at timestamp {ts} is in slice {s}, owned "
            f"by orderer {s % self.slicing.orderers}; this is orderer {self.index} of "
            f"{self.slicing.orderers}"
        )


@dataclass(frozen=True, slots=True)
class PieceCut:
    """What one emitted batch adds to the slice index."""

    end_offset: int
    """Output offset after the batch: the cut is folded in once the output below is durable."""
    highest: int | None
    """The highest ordinary timestamp among the batch's rows before its first new piece (they
    continue the piece the output before ended in); None: none."""
    opened: tuple[Piece, ...]
    """The pieces that begin in the batch, each with its highest ordinary timestamp in it."""


class PieceCutter:
    """The piece rule over an orderer's output, one emitted batch after another, in order (on
    the orderer's thread, or in recovery): the piece the output so far ended in is carried."""

    __slots__ = ("_current", "_index", "_slicing")

    def __init__(self, slicing: Slicing, index: int) -> None:
        self._slicing = slicing
        self._index = index
        self._current: int | None = None

    def cut(self, emitted: EmittedBatch) -> PieceCut:
        ts, barrier = emitted.timestamp, emitted.barrier
        end = emitted.first_seq + len(emitted)
        if not len(emitted):
            return PieceCut(end, None, ())
        pieces = self._slicing.pieces(self._index, ts, barrier, self._current)
        starts = pieces.starts
        ordinary = barrier == 0
        carried = not starts.size or starts[0] > 0  # rows before the first new piece
        bounds = np.concatenate([[0], starts]) if carried else starts
        highest = np.maximum.reduceat(np.where(ordinary, ts, np.uint64(0)), bounds).tolist()
        holds = np.logical_or.reduceat(ordinary, bounds).tolist()
        tops = [h if o else None for h, o in zip(highest, holds, strict=True)]
        first = emitted.first_seq
        slices = pieces.piece[starts].tolist()
        opened = tuple(
            Piece(s, first + row, top)
            for s, row, top in zip(slices, starts.tolist(), tops[int(carried) :], strict=True)
        )
        if opened:
            self._current = opened[-1].slice
        return PieceCut(end, tops[0] if carried else None, opened)


class PieceIndex:
    """The pieces of this orderer's durable output, ascending by slice (and so by offset), on
    the event loop: cuts are added as their output is staged and folded in once it is
    durable."""

    __slots__ = ("_highest", "_offsets", "_pending", "_slices", "next_offset")

    def __init__(self) -> None:
        self._slices: list[int] = []
        self._offsets: list[int] = []
        self._highest: list[int | None] = []
        self._pending: deque[PieceCut] = deque()
        self.next_offset = 0
        """The index holds the pieces of the output below this offset."""

    def add(self, cut: PieceCut) -> None:
        """A batch's cut, its output staged for the ordered log (not durable yet)."""
        self._pending.append(cut)

    def durable(self, offset: int) -> None:
        """The output below ``offset`` is durable (and every batch of it was added): its cuts
        are folded in."""
        pending = self._pending
        while pending and pending[0].end_offset <= offset:
            self.fold(pending.popleft())
        self.next_offset = max(self.next_offset, offset)

    def fold(self, cut: PieceCut) -> None:
        """A cut of durable output, in output order."""
        if cut.highest is not None and self._highest:
            top = self._highest[-1]
            self._highest[-1] = cut.highest if top is None else max(top, cut.highest)
        for piece in cut.opened:
            self._slices.append(piece.slice)
            self._offsets.append(piece.first_offset)
            self._highest.append(piece.highest_timestamp)
        self.next_offset = max(self.next_offset, cut.end_offset)

    def __len__(self) -> int:
        return len(self._slices)

    def read(self, from_slice: int, limit: int, *, complete: bool) -> SliceIndex:
        """The pieces of slice ``from_slice`` and above, ``limit`` at most (0:
        :data:`DEFAULT_LIMIT`); ``complete``: the run has ended and all its output is durable
        (and folded in)."""
        start = bisect.bisect_left(self._slices, from_slice)
        stop = min(len(self._slices), start + (limit or DEFAULT_LIMIT))
        pieces = tuple(
            Piece(self._slices[i], self._offsets[i], self._highest[i]) for i in range(start, stop)
        )
        return SliceIndex(pieces, complete, self.next_offset)
