"""Stages with aggregations, for the tests of ``--stages`` (issue 40): the three of
``examples/dead_time.py`` (a sequencer, an order-sensitive stage keyed by source that gives each
fragment its dead ticks, and ``dead_time``, the aggregation of those per source), loaded as
``--stages`` loads them, and ``multiplicities``, an aggregation of the events (barrier rows left
out) with a declared histogram of its own results. They fit any run: no payload is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from orderer.stages import Histogram, Stage, aggregation
from orderer.stages.load import load_stages

LARGEST = 64
"""The largest multiplicity counted (larger ones count as this)."""
MULTIPLICITY_HISTOGRAM = Histogram("multiplicity", 16, 0, 16)
"""Of the finished table's rows (one per multiplicity seen), once: its entries are its rows."""


def _none() -> npt.NDArray[np.int64]:
    return np.zeros(LARGEST + 1, np.int64)


def _rows(counts: npt.NDArray[np.int64]) -> pa.Table:
    (seen,) = np.nonzero(counts)
    return pa.table({"multiplicity": seen, "events": counts[seen]})


@aggregation(
    schema=[("multiplicity", pa.int64()), ("events", pa.int64())],
    initial=_none,
    combine=np.add,
    finish=_rows,
    histograms=[MULTIPLICITY_HISTOGRAM],
)
def multiplicities(events: pa.Table, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The events (not the barriers) counted by multiplicity."""
    built = events.filter(pc.equal(events["barrier"], 0))
    values = np.minimum(built["multiplicity"].to_numpy(), LARGEST)
    return counts + np.bincount(values, minlength=LARGEST + 1)


DEAD_TIME = load_stages(Path(__file__).resolve().parents[2] / "examples" / "dead_time.py")

STAGES: list[Stage] = [*DEAD_TIME, multiplicities]
