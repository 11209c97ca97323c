"""Energy calibration and an energy histogram per source.

The physics: a digitizer gives a raw amplitude in ADC channels; its calibration (from a run
with known gamma lines) turns it into energy, ``energy = gain * adc + offset`` keV, with a gain
and an offset per source. The calibrated hits, histogrammed, show the lines where they belong
(the synthetic runs' 661.7, 1173.2 and 1332.5 keV: :mod:`orderer.replay.physics`).

Why neither needs order: a calibration looks at one hit at a time (order-insensitive), and a
histogram is a sum, an aggregation: each piece of hits is counted into a partial histogram (an
array of counts per source and bin) where it is, and partial histograms add up in any grouping
and order (``combine`` is ``+``), so both stages run at the job's full parallelism and keep no
order. Declared as an aggregation, the histogram's results are one finished table for the run,
the same for any ``--partitions``, micro-batches or restarts; as an order-insensitive stage
returning each call's partial histogram, its rows would change with the split (only their sums
would not), and ``--check-order`` would rightly say so.

The stages:

- ``calibrated``: the HIT fragments of the events with their calibrated energy (it declares a
  histogram of ``energy``, all sources together, which the job puts in the run's report);
- ``energy_histogram`` (an aggregation reading ``calibrated``): the run's histogram per source,
  ``BIN_KEV`` keV bins from 0 to ``BINS * BIN_KEV``, one row per (source, bin) that has counts;
  bin -1 counts the energies below, bin ``BINS`` those above.

Run it::

    evb spark-job --stages examples/calibration.py --dt 100 ...

and read ``OUTPUT/stages/energy_histogram/run=RUN/`` with :func:`histogram` (one array of
counts per source); :func:`line_energy` says where a line came out. ``CALIBRATION`` holds the
synthetic run's calibration (``Physics``'s default gains and offsets, sources 1 to 4); for other
data, put yours.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from orderer.replay.physics import HIT, fragment_table
from orderer.stages import Histogram, aggregation, order_insensitive

CALIBRATION = {1: (0.5, 2.0), 2: (0.4, -1.5), 3: (0.6, 0.0), 4: (0.45, 3.0)}
"""Source id -> (gain keV/channel, offset keV)."""
BIN_KEV = 1.0
BINS = 4096

_SOURCES = np.array(sorted(CALIBRATION), dtype=np.int64)
_GAINS = np.array([CALIBRATION[s][0] for s in _SOURCES])
_OFFSETS = np.array([CALIBRATION[s][1] for s in _SOURCES])
_CELLS = (len(_SOURCES), BINS + 2)
"""The accumulator's shape: counts per calibrated source (in ``_SOURCES`` order) and bin + 1."""


@order_insensitive(
    schema=[
        ("event", pa.int64()),
        ("offset", pa.int64()),
        ("source", pa.int64()),
        ("energy", pa.float64()),
    ],
    histograms=[Histogram("energy", BINS, 0.0, BINS * BIN_KEV, unit="keV", log=True)],
)
def calibrated(events: pa.Table) -> pa.Table:
    """The hits of the events from calibrated sources, with their energy in keV."""
    rows = fragment_table(events)
    hits = rows.filter(
        pc.and_(pc.equal(rows["kind"], HIT), pc.is_in(rows["source"], pa.array(_SOURCES)))
    )
    which = np.searchsorted(_SOURCES, hits["source"].to_numpy())
    energy = _GAINS[which] * hits["adc"].to_numpy() + _OFFSETS[which]
    return hits.select(["event", "offset", "source"]).append_column("energy", pa.array(energy))


def _empty() -> npt.NDArray[np.int64]:
    """No hits counted yet."""
    return np.zeros(_CELLS, np.int64)


def _counts(counts: npt.NDArray[np.int64]) -> pa.Table:
    """The histograms as rows: one per (source, bin) that has counts."""
    which, index = np.nonzero(counts)
    return pa.table(
        {
            "source": _SOURCES[which],
            "bin": (index - 1).astype(np.int32),
            "count": counts[which, index],
        }
    )


@aggregation(
    schema=[("source", pa.int64()), ("bin", pa.int32()), ("count", pa.int64())],
    reads="calibrated",
    initial=_empty,
    combine=np.add,
    finish=_counts,
)
def energy_histogram(hits: pa.Table, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """These hits counted into ``counts`` (per source and bin; index 0 the underflow)."""
    energy = hits["energy"].to_numpy()
    bins = np.clip(np.floor(energy / BIN_KEV), -1, BINS).astype(np.int64)
    which = np.searchsorted(_SOURCES, hits["source"].to_numpy())
    cell = which * (BINS + 2) + (bins + 1)
    return counts + np.bincount(cell, minlength=counts.size).reshape(_CELLS)


def histogram(partials: pa.Table) -> dict[int, npt.NDArray[np.int64]]:
    """``energy_histogram``'s rows (or any rows of source, bin, count: they are summed) as an
    array per source: ``BINS + 2`` counts, index ``bin + 1`` (index 0 the underflow, index
    ``BINS + 1`` the overflow)."""
    out: dict[int, npt.NDArray[np.int64]] = {}
    source = partials["source"].to_numpy()
    index = partials["bin"].to_numpy().astype(np.int64) + 1
    count = partials["count"].to_numpy()
    for s in np.unique(source).tolist():
        mine = source == s
        out[s] = np.bincount(index[mine], weights=count[mine], minlength=BINS + 2).astype(np.int64)
    return out


def line_energy(spectrum: npt.NDArray[np.int64], near: float, search: float = 30.0) -> float:
    """Where a gamma line is in one source's summed spectrum (:func:`histogram`'s): the
    centroid, keV, of the bins within 5 keV of the fullest bin within ``search`` keV of
    ``near`` (the lines are 2 keV wide, far above the continuum)."""
    centres = (np.arange(-1, BINS + 1) + 0.5) * BIN_KEV  # index i: bin i - 1
    around = np.flatnonzero(np.abs(centres - near) <= search)
    top = around[np.argmax(spectrum[around])]
    peak = np.flatnonzero(np.abs(centres - centres[top]) <= 5.0)
    counts = spectrum[peak]
    if counts.sum() == 0:
        raise ValueError(f"no counts within {search} keV of {near} keV")
    return float(np.average(centres[peak], weights=counts))
