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

__all__ = ["MAX_ORDERERS", "Slicing", "parse_slicings"]

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
