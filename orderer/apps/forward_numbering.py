"""``evb forward``'s numbering: what it sends B for each batch of A's ordered output, and the
sequence number every fragment gets at every orderer of B, as a function of A's log alone.

Why a function of A's log: a restarted forwarder sends A's output again from its committed
offset, and B drops what it already holds only when each fragment comes back with the number it
had. B's orderers number apart (each keeps a durable sequence per source, of what it got, and
drops what is below it), so the count that matters is per source *and* per orderer: how many of
the fragments forwarded as that source before this one were routed to that orderer. The routing
is the source client's (:func:`orderer.client.routing.shares` counts what
:meth:`~orderer.client.routing.SourceRouting.route` sends each orderer): it depends on a
fragment's timestamp and barrier type alone, both read from A's log, so a replay of the log
from any checkpoint routes and numbers every fragment as the first pass did. Crossing
watermarks carry no sequence number, so what a restart sends of them changes no number. (A
restarted client's routing owes one again at the slice of each source's first ordinary
fragment: at most that fragment's timestamp, and every fragment A emits after it that is not
late is at least that, A's output being in timestamp order above its high-water mark; so it
promises nothing the first pass did not keep.)

With one orderer the count per orderer is the count per source, as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer.batch import EmittedBatch, FragmentBatch
from orderer.client.routing import shares
from orderer.replay.slicing import Slicing

__all__ = ["Checkpoint", "Numbering"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a commit at ``offset`` of A stands for: per source at B, the fragments of A
    forwarded as it below the offset (``fragments``), and how many of them each orderer of B got
    (``shares``, in orderer order: that orderer's next sequence number of the source)."""

    offset: int
    fragments: Mapping[int, int]
    shares: Mapping[int, tuple[int, ...]]


def _rows(batch: EmittedBatch, rows: npt.NDArray[np.intp], source: int) -> FragmentBatch:
    """Rows ``rows`` of ``batch`` (in their order) as one batch of ``source``, payloads kept."""
    offsets = batch.payload_offsets.astype(np.int64)
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    gather = np.repeat(starts - new_offsets[:-1].astype(np.int64), lengths) + np.arange(total)
    return FragmentBatch(
        np.full(len(rows), source, dtype=np.uint32),
        batch.timestamp[rows],
        batch.barrier[rows],
        new_offsets,
        batch.payload[gather],
    )


class _Groups:
    """With ``as_source``: which barrier fragments continue a group A resolved at once (they
    travel as ordinary fragments). The state carries over from one batch to the next."""

    def __init__(self) -> None:
        self._t: float | None = None  # the open group's flush time (None: no group open)
        self._sources: set[int] = set()

    def barriers(self, batch: EmittedBatch) -> npt.NDArray[np.uint32]:
        """The barrier types to send for ``batch``."""
        barrier = batch.barrier.copy()
        source, t = batch.source.tolist(), batch.t.tolist()
        kinds = batch.barrier.tolist()
        for i, kind in enumerate(kinds):
            if kind == 0:
                self._t = None
                continue
            if self._t == t[i] and source[i] not in self._sources:
                barrier[i] = 0
                self._sources.add(source[i])
            else:
                self._t, self._sources = t[i], {source[i]}
        return barrier

    @property
    def open(self) -> bool:
        """Whether the last fragment seen was a barrier (a group may go on)."""
        return self._t is not None


class Numbering:
    """The batches that forward A's output to B, counted per source and per orderer of B
    (``slicing``: B's N and T), from a checkpoint on (:meth:`restore`; a new one starts at A's
    offset 0). ``as_source``: everything goes as this one source, each group of barriers A
    resolved at once as one barrier (the forwarder's module says why)."""

    def __init__(self, slicing: Slicing, as_source: int | None) -> None:
        self.slicing = slicing
        self.as_source = as_source
        self.fragments: dict[int, int] = {}
        """Per source at B: the fragments of A forwarded as it."""
        self.shares: dict[int, npt.NDArray[np.int64]] = {}
        """Per source at B: how many of them each orderer of B got."""
        self._groups = _Groups()

    def restore(self, checkpoint: Checkpoint) -> None:
        """Go on from ``checkpoint`` (none of its offsets is inside a group of barriers)."""
        self.fragments = dict(checkpoint.fragments)
        self.shares = {s: np.array(c, dtype=np.int64) for s, c in checkpoint.shares.items()}

    def checkpoint(self, offset: int) -> Checkpoint:
        """The counts so far, as a commit at ``offset`` (the offset after the last batch) has
        them."""
        return Checkpoint(
            offset,
            dict(self.fragments),
            {s: tuple(c.tolist()) for s, c in self.shares.items()},
        )

    @property
    def open(self) -> bool:
        """Whether a group of barriers may go on into the next batch: no checkpoint here."""
        return self._groups.open

    def parts(self, batch: EmittedBatch) -> list[FragmentBatch]:
        """``batch`` of A as the batches of one source each that forward it, in the order to
        send them; counted."""
        if not len(batch):
            return []
        if self.as_source is not None:
            part = _rows(batch, np.arange(len(batch), dtype=np.intp), self.as_source)
            parts = [
                FragmentBatch(
                    part.source,
                    part.timestamp,
                    self._groups.barriers(batch),
                    part.payload_offsets,
                    part.payload,
                )
            ]
        else:
            parts = [
                _rows(batch, np.flatnonzero(batch.source == source), source)
                for source in np.unique(batch.source).tolist()
            ]
        for part in parts:
            self._count(int(part.source[0]), part)
        return parts

    def _count(self, source: int, part: FragmentBatch) -> None:
        self.fragments[source] = self.fragments.get(source, 0) + len(part)
        share = shares(self.slicing, part)
        if source in self.shares:
            self.shares[source] += share
        else:
            self.shares[source] = share
