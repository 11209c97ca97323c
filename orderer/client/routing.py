"""What a source sends to which orderer of a run spread over several (docs/scale-out.md).

Why in the client: the owner of a fragment's slice is computed where the fragment is made, from
two numbers the run fixes at its start (:class:`~orderer.replay.slicing.Slicing`), with no
table or coordinator to ask. The rule, per batch of one source, in one pass over its arrays:

- an ordinary fragment (barrier type 0) goes to the owner of its slice only;
- a barrier goes to every orderer (each holds its own data there; the copy at the owner of the
  barrier's slice is the one the merge keeps);
- the first fragment of a slice above every slice the source sent before owes every other
  orderer a *crossing watermark* at the slice's start (:func:`~orderer.replay.slicing.crossings`,
  the rule the simulation's router uses too). It goes to each of them after its part of the
  batch: the records of one batch reach an orderer at one time, so the highest such watermark
  there releases what each would have.

Watermarks, ends of source and the like go to every orderer; the client sends those itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer.batch import FragmentBatch
from orderer.replay.slicing import Slicing, crossings

__all__ = ["Routed", "SourceRouting", "shares"]


@dataclass(frozen=True, slots=True)
class Routed:
    """One orderer's share of a batch: its fragments (None: none), then the crossing watermark
    it is owed (None: none)."""

    orderer: int
    part: FragmentBatch | None
    watermark: int | None


class SourceRouting:
    """The routing of every source of one client: per source, the highest slice it has sent an
    ordinary fragment of (what decides a crossing)."""

    __slots__ = ("_top", "slicing")

    def __init__(self, slicing: Slicing) -> None:
        self.slicing = slicing
        self._top: dict[int, int] = {}

    def route(self, source: int, batch: FragmentBatch) -> list[Routed]:
        """Each orderer's share of ``batch`` (one source's fragments, in its order), for the
        orderers that get something, in orderer order."""
        n = self.slicing.orderers
        if n == 1:
            return [Routed(0, batch, None)]
        ordinary = batch.barrier == 0
        slices = self.slicing.slice_of(batch.timestamp)
        owner = (slices % np.uint64(n)).astype(np.int64)
        destination = np.where(ordinary, owner, -1)  # -1: every orderer (a barrier)
        crossing, top = crossings(self._top.get(source), slices[ordinary])
        if top is not None:
            self._top[source] = top
        crossed = slices[ordinary][crossing]
        crossed_owner = owner[ordinary][crossing]
        routed = []
        for orderer in range(n):
            mine = (destination == orderer) | (destination == -1)
            part = _take(batch, mine)
            owed = crossed[crossed_owner != orderer]
            watermark = int(owed.max()) * self.slicing.slice_ticks if owed.size else None
            if part is not None or watermark is not None:
                routed.append(Routed(orderer, part, watermark))
        return routed


def shares(slicing: Slicing, batch: FragmentBatch) -> npt.NDArray[np.int64]:
    """How many of ``batch``'s fragments each orderer gets from :meth:`SourceRouting.route`
    (its parts' lengths; every orderer's, 0 for none), without making the parts: for a sender
    that numbers each orderer's share of a source itself (``evb forward``, from its upstream's
    log). The rule above, counted: an ordinary fragment to its slice's owner, a barrier to all."""
    ordinary = batch.barrier == 0
    counts = np.bincount(slicing.owner(batch.timestamp[ordinary]), minlength=slicing.orderers)
    return counts.astype(np.int64) + (len(batch) - int(np.count_nonzero(ordinary)))


def _take(batch: FragmentBatch, rows: np.ndarray) -> FragmentBatch | None:
    """The rows of ``batch`` where ``rows`` is true, in order: slices of the batch (no copy)
    when they are one stretch, else one joined batch."""
    if rows.all():
        return batch
    where = np.flatnonzero(rows)
    if not where.size:
        return None
    breaks = np.flatnonzero(np.diff(where) != 1) + 1
    starts = np.concatenate([[where[0]], where[breaks]])
    stops = np.concatenate([where[breaks - 1] + 1, [where[-1] + 1]])
    pieces = [batch.slice(int(a), int(b)) for a, b in zip(starts, stops, strict=True)]
    return pieces[0] if len(pieces) == 1 else FragmentBatch.concat(pieces)
