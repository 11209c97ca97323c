"""What an orderer of a run spread over several by time slices (docs/scale-out.md) does with its
slices: it takes only the ordinary fragments of its own (:class:`SliceOwner`), and it keeps its
slice index, where each piece of its output begins, the highest ordinary timestamp in it and its
rows in the merged stream (:class:`PieceCutter`, :class:`PieceIndex`), which ``GetSliceIndex``
serves.

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

from collections import deque

from orderer.batch import FragmentBatch
from orderer.errors import InterfaceError
from orderer.replay.pieces import DEFAULT_LIMIT, PieceCut, PieceCutter, PieceList
from orderer.replay.slicing import Slicing

__all__ = ["DEFAULT_LIMIT", "PieceCut", "PieceCutter", "PieceIndex", "SliceOwner"]


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


class PieceIndex(PieceList):
    """The pieces of this orderer's durable output, ascending by slice (and so by offset), on
    the event loop: cuts are added as their output is staged and folded in once it is
    durable (the cut and the fold are :mod:`orderer.replay.pieces`', which the Spark job also
    makes an index of a finished run's ordered log with)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        super().__init__()
        self._pending: deque[PieceCut] = deque()

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
