"""The slicing rule of docs/scale-out.md, the one definition the router, the merge and the
slices' builders share: slice ``floor(ts / T)`` belongs to orderer ``slice mod N``.

Why modulo: every source computes it alone, from two numbers fixed when the run begins, with no
routing table to agree on or to update; consecutive slices go to different orderers, so a
burst longer than a slice is spread over them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer.errors import ConfigError

__all__ = ["MAX_ORDERERS", "Pieces", "Slicing", "crossings", "parse_slicings"]

MAX_ORDERERS = 1024
"""The most orderers a simulation takes: each is a whole orderer in this process."""


@dataclass(frozen=True, slots=True)
class Slicing:
    """N orderers, slices of T ticks: slice ``floor(ts / T)`` belongs to orderer ``slice mod N``,
    a rule every source computes alone from two numbers the run fixes at its start."""

    orderers: int
    slice_ticks: int

    def __post_init__(self) -> None:
        if isinstance(self.orderers, bool) or not 1 <= self.orderers <= MAX_ORDERERS:
            raise ConfigError(
                "orderers", self.orderers, f"must be an integer from 1 to {MAX_ORDERERS}"
            )
        if isinstance(self.slice_ticks, bool) or not 1 <= self.slice_ticks < 2**64:
            raise ConfigError(
                "slice_ticks", self.slice_ticks, "must be a whole number of ticks from 1 to 2^64-1"
            )

    @property
    def label(self) -> str:
        return f"orderers={self.orderers},slice-ticks={self.slice_ticks}"

    def slice_of(self, ts: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        return ts // np.uint64(self.slice_ticks)

    def owner(self, ts: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """The orderer each timestamp's slice belongs to."""
        return (self.slice_of(ts) % np.uint64(self.orderers)).astype(np.int64)

    def first_not_owned(
        self, orderer: int, ts: npt.NDArray[np.uint64], barrier: npt.NDArray[np.uint32]
    ) -> int | None:
        """The first row of an ordinary fragment whose slice ``orderer`` does not own (None:
        there is none): a fragment routed to the wrong orderer, which would be ordered twice or
        by the wrong orderer's clock. Barriers go to every orderer (docs/scale-out.md,
        "Routing"), so none is ever wrong."""
        wrong = self.slice_of(ts) % np.uint64(self.orderers) != np.uint64(orderer)
        wrong &= barrier == 0
        return int(wrong.argmax()) if wrong.any() else None

    def pieces(
        self,
        orderer: int,
        ts: npt.NDArray[np.uint64],
        barrier: npt.NDArray[np.uint32],
        current: int | None = None,
    ) -> Pieces:
        """How ``orderer``'s output (its timestamps and barrier types, in its order) falls
        into pieces (docs/scale-out.md, "The merged stream"): a piece begins at each kept row
        (an ordinary fragment, or a barrier copy whose slice ``orderer`` owns) whose slice is
        above every slice of the kept rows before it; ``current``: the piece the output before
        these rows ended in (None: these are the orderer's first rows). The one statement of the
        rule: the simulation's merge cuts a whole output with it, the service each batch it
        emits, carrying ``current`` from batch to batch."""
        slices = self.slice_of(ts)
        kept = (barrier == 0) | (slices % np.uint64(self.orderers) == np.uint64(orderer))
        base = np.uint64(0 if current is None else current)
        piece = np.where(kept, slices, base)
        np.maximum(piece, base, out=piece)
        np.maximum.accumulate(piece, out=piece)
        opens = np.empty(piece.size, dtype=np.bool_)
        if piece.size:
            opens[0] = slices[0] > base
            np.greater(slices[1:], piece[:-1], out=opens[1:])
            opens &= kept
            if current is None and kept.any():  # the first kept row opens the first piece
                opens[int(kept.argmax())] = True
        return Pieces(piece, kept, np.flatnonzero(opens))


@dataclass(frozen=True, slots=True)
class Pieces:
    """How a stretch of one orderer's output falls into pieces (:meth:`Slicing.pieces`)."""

    piece: npt.NDArray[np.uint64]
    """Each row's piece, named by its slice; a row that is not kept has the piece it lies in
    (0 before the orderer's first piece)."""
    kept: npt.NDArray[np.bool_]
    """Rows in the merged stream: ordinary fragments and the barrier copies of slices this
    orderer owns (the other copies only held this orderer)."""
    starts: npt.NDArray[np.intp]
    """Rows that begin a piece, ascending."""


def parse_slicings(orderers: str, slice_ticks: str) -> list[Slicing]:
    """The settings of ``--orderers N[,N...] --slice-ticks T[,T...]``: every combination, the
    slice length varying fastest; an error names the flag."""
    lists = []
    for flag, text, name in (
        ("--orderers", orderers, "orderers"), ("--slice-ticks", slice_ticks, "slice_ticks")
    ):
        try:
            values = [int(part) for part in text.split(",")]
        except ValueError:
            raise ConfigError(flag, text, "must be a comma list of whole numbers") from None
        if len(set(values)) != len(values):
            raise ConfigError(flag, text, "a sweep is a comma list of distinct values")
        for value in values:
            try:
                Slicing(**{"orderers": 1, "slice_ticks": 1, name: value})
            except ConfigError as error:
                raise ConfigError(flag, value, error.why) from None
        lists.append(values)
    return [Slicing(n, t) for n in lists[0] for t in lists[1]]


def crossings(
    top_slice: int | None, slices: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.bool_], int | None]:
    """Which of a source's ordinary fragments, given by their slices in the source's order,
    enter a slice above every slice it sent before (``top_slice``, None before its first): at
    each, the source owes every orderer but the slice's owner a crossing watermark at the
    slice's start (docs/scale-out.md, "Crossing watermarks"). Also the source's new top slice.
    The router of the simulation and the source client's both ask this, so the rule is here."""
    if not slices.size:
        return np.zeros(0, dtype=np.bool_), top_slice
    top = np.maximum.accumulate(slices)
    crossing = np.empty(slices.size, dtype=np.bool_)
    crossing[0] = top_slice is None or int(slices[0]) > top_slice
    crossing[1:] = slices[1:] > (
        top[:-1] if top_slice is None else np.maximum(top[:-1], np.uint64(top_slice))
    )
    return crossing, max(int(top[-1]), -1 if top_slice is None else top_slice)
