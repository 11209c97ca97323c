"""The two histograms of the run report that help choose ``dt``: the spectrum of timestamp
differences inside the built events, per (first source, other source), and the coincidence
matrix of the sources. Both are boost-histogram objects, plotted by
:mod:`orderer.spark.output.report` and saved beside the plots (pickled) for reuse.

The spectrum: for each built event (barrier rows aside), each fragment after the first one
contributes its timestamp minus the timestamp of the event's *first fragment in stream order*
(the fragment glom measures the window from), filed under (the first fragment's source, its own
source). Glom keeps a fragment in the open event while ``|ts - first| <= dt``, so every
difference lies in ``[-dt, dt]``; it is negative only where a late fragment is involved. The
axis is fixed by ``dt`` alone (:func:`spectrum_axis`), so that every partition and micro-batch
bins alike and partial counts add up: at most ``SPECTRUM_BINS`` regular bins over
``[-dt - 0.5, dt + 0.5]``, one tick each, centred on the integers, whenever ``2 dt + 1`` fits.
What it tells: the built events hold only the differences inside the window, so a ``dt`` that
cuts into a coincidence peak shows as counts still high at ``±dt`` rather than fallen to the
flat level of random coincidences.

The coincidence matrix: entry (i, j) counts the events in which sources i and j both have a
fragment; the diagonal (i, i) counts the events that hold source i at all. Barrier rows are not
events and are left out.

Why on the executors, as the rest of the summary: a run has tens of millions of fragments. Each
Arrow batch of events is reduced on its executor to counts per (first source, other source, bin)
and per (source i, source j); Spark sums them (``groupBy``) and the driver receives at most
``S² (bins + 2) + S²`` rows for ``S`` sources, whatever the run's length. As the rest of the
summary, they are computed from the events the sink committed, once the query is done, so a
streamed run that was restarted or resumed counts each event exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boost_histogram as bh
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "COINCIDENCE",
    "SPECTRUM",
    "SPECTRUM_BINS",
    "counted",
    "pair_histograms",
    "pair_partials",
    "pair_rows",
    "rows_batch",
    "spectrum_axis",
    "to_histograms",
]

SPECTRUM_BINS = 201
"""Most bins of the spectrum's difference axis (one tick each up to dt = 100)."""

_PARTIALS_SCHEMA = "kind int, a long, b long, c long, value long"
SPECTRUM, COINCIDENCE = 0, 1
"""Kinds of the executors' partial counts: (first source, other source, bin index; -1 below the
axis, bins above it) -> fragments; (source i, source j, 0) -> events."""

_CELLS = 1 << 20
"""Cells of one block of the event x source incidence matrix (8 MiB of float64)."""
_DENSE_CELLS = 1 << 16
"""Key triples counted with ``bincount`` at most (or as many as the rows): 512 KiB."""
_SET_BITS = 62
"""Sources of a batch whose events' sets are counted as integers (bits of an int64)."""


def spectrum_axis(dt: int | None) -> bh.axis.Regular:
    """The difference axis for a window of ``dt`` ticks (None, no building: dt 0, the events
    have one fragment each and the spectrum stays empty)."""
    window = int(dt or 0)
    return bh.axis.Regular(
        min(2 * window + 1, SPECTRUM_BINS),
        -window - 0.5,
        window + 0.5,
        __dict__={"name": "dt", "label": "timestamp - first fragment's timestamp (ticks)"},
    )


def pair_partials(axis: bh.axis.Regular) -> Any:
    """The executors' pass over the events (batches of a ``fragments`` column: lists of
    structs with ``source`` and ``timestamp``, barrier rows already left out): partial counts
    of both histograms, as rows of ``kind, a, b, c, value``."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            parts = pair_rows(batch.column("fragments"), axis)
            if parts:
                yield rows_batch(parts)

    return partials


def pair_rows(lists: Any, axis: bh.axis.Regular) -> list[tuple[np.ndarray, ...]]:
    """The partial counts of both histograms over some events' ``fragments`` lists (barrier
    rows left out), as parts of rows ``kind, a, b, c, value`` (none for no fragment): the one
    counting of the spectrum and the matrix, at the end of a run and after each micro-batch
    (:mod:`orderer.spark.live`)."""
    flat = pc.list_flatten(lists)
    if len(flat) == 0:
        return []
    source = flat.field("source").to_numpy(zero_copy_only=False).astype(np.int64)
    ts = flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
    parent = pc.list_parent_indices(lists).to_numpy().astype(np.int64)
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy().astype(np.int64)
    starts = np.cumsum(lengths) - lengths  # into the flattened fragments
    first = starts[parent]
    others = np.arange(source.size) != first
    # int64 differences wrap as the unsigned timestamps would: |difference| <= dt < 2**63
    difference = ts[others] - ts[first[others]]
    bins = np.asarray(axis.index(difference.astype(np.float64)), np.int64)
    return [
        counted(SPECTRUM, source[first[others]], source[others], bins),
        _coincidences(parent, source),
    ]


def rows_batch(parts: list[tuple[np.ndarray, ...]]) -> pa.RecordBatch:
    """Parts of partial rows as one Arrow batch of ``kind, a, b, c, value``."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.concatenate([p[0] for p in parts]).astype(np.int32)),
            *(
                pa.array(np.concatenate([p[k] for p in parts]).astype(np.int64))
                for k in (1, 2, 3, 4)
            ),
        ],
        names=["kind", "a", "b", "c", "value"],
    )


def counted(kind: int, *keys: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rows ``kind, a, b, c, count`` of the distinct key triples.

    Why codes and not ``numpy.unique(axis=0)``: that one sorts the rows as opaque records, ten
    times slower than sorting integers. The three keys are made one integer: from their value
    ranges where the ranges' product is small (sources, bins, flags: one pass, counted with
    ``bincount``, no sort at all), else from each key's values numbered (a sort of each column);
    those integers are counted."""
    if keys[0].size == 0:
        empty = np.zeros(0, np.int64)
        return (empty, empty, empty, empty, empty)
    columns = [np.asarray(key, np.int64).reshape(-1) for key in keys]
    lows = [int(column.min()) for column in columns]
    spans = [int(column.max()) - low + 1 for column, low in zip(columns, lows, strict=True)]
    cells_in_all = spans[0] * spans[1] * spans[2]
    if cells_in_all <= max(_DENSE_CELLS, columns[0].size):
        combined = np.zeros(columns[0].size, np.int64)
        for column, low, span in zip(columns, lows, spans, strict=True):
            combined = combined * span + (column - low)
        tally = np.bincount(combined, minlength=cells_in_all)
        cells = np.flatnonzero(tally)
        count = tally[cells]
        values = [
            np.arange(low, low + span, dtype=np.int64)
            for low, span in zip(lows, spans, strict=True)
        ]
    else:
        values, codes = [], []
        for column in columns:
            unique, code = np.unique(column, return_inverse=True)
            values.append(unique)
            codes.append(code.astype(np.int64).reshape(-1))
        combined = np.zeros(columns[0].size, np.int64)
        for unique, code in zip(values, codes, strict=True):
            combined = combined * unique.size + code  # < the number of rows cubed: no overflow
        cells, count = np.unique(combined, return_counts=True)
    out = []
    for unique in reversed(values):
        out.append(unique[cells % unique.size])
        cells = cells // unique.size
    a, b, c = reversed(out)
    return (np.full(count.size, kind, np.int64), a, b, c, count.astype(np.int64))


def _coincidences(parent: np.ndarray, source: np.ndarray) -> tuple[np.ndarray, ...]:
    """Events per (source i, source j) of one batch.

    Why by source sets: an event's sources are few, and the sets that occur fewer still. Each
    event's set is one integer (a bit per source of the batch, up to 62 sources), the events
    are counted per set, and each set adds its count to every pair it holds: a pass over the
    fragments and a small loop over the sets. With more sources: the product of the batch's
    event x source incidence matrix with itself, in blocks of events (memory bounded)."""
    ids, column = _numbered(source)
    total = np.zeros((ids.size, ids.size), np.int64)
    if ids.size <= _SET_BITS:
        starts = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
        sets = np.bitwise_or.reduceat(np.left_shift(1, column, dtype=np.int64), starts)
        unique, count = np.unique(sets, return_counts=True)
        bits = (unique[:, None] >> np.arange(ids.size, dtype=np.int64)) & 1  # sets x sources
        total = (bits.T * count) @ bits
    else:
        events = int(parent[-1]) + 1
        block = max(1, _CELLS // ids.size)
        bounds = np.searchsorted(parent, np.arange(0, events + block, block))
        for k in range(bounds.size - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo == hi:
                continue
            incidence = np.zeros((block, ids.size), np.float64)
            incidence[parent[lo:hi] - k * block, column[lo:hi]] = 1.0
            total += np.rint(incidence.T @ incidence).astype(np.int64)  # exact: counts <= block
    i, j = np.nonzero(total)
    return (
        np.full(i.size, COINCIDENCE, np.int64),
        ids[i],
        ids[j],
        np.zeros(i.size, np.int64),
        total[i, j],
    )


def _numbered(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``values`` (sorted) and each value's index among them, as ``numpy.unique``
    with ``return_inverse`` gives them; without a sort where the values' range is narrow."""
    low, high = int(values.min()), int(values.max())
    if high - low >= max(_DENSE_CELLS, values.size):
        ids, index = np.unique(values, return_inverse=True)
        return ids, index.reshape(-1)
    present = np.bincount(values - low, minlength=high - low + 1) > 0
    number = np.cumsum(present) - 1
    return np.flatnonzero(present) + low, number[values - low]


def to_histograms(
    partials: pa.Table, sources: list[int], axis: bh.axis.Regular, metadata: dict[str, Any]
) -> tuple[bh.Histogram, bh.Histogram]:
    """The spectrum (first source x other source x difference) and the coincidence matrix
    (source x source) of the summed partial counts; ``sources`` name the category axes."""
    kind = partials.column("kind").to_numpy()
    a, b, c, value = (partials.column(k).to_numpy() for k in ("a", "b", "c", "value"))

    def category(name: str, label: str) -> bh.axis.IntCategory:
        return bh.axis.IntCategory(sources, __dict__={"name": name, "label": label})

    position = {source: k for k, source in enumerate(sources)}

    def at(ids: np.ndarray) -> np.ndarray:
        return np.array([position[int(s)] for s in ids], dtype=np.intp)

    spectrum = bh.Histogram(
        category("first", "source of the event's first fragment"),
        category("other", "source of the fragment"),
        axis,
        storage=bh.storage.Int64(),
        metadata={
            **metadata,
            "what": "fragments after their event's first one, by the "
            "difference of their timestamps (ticks)",
        },
    )
    mine = kind == SPECTRUM
    view = spectrum.view(flow=True)  # flow: the difference axis has its underflow at 0
    view[at(a[mine]), at(b[mine]), c[mine] + 1] = value[mine]
    coincidences = bh.Histogram(
        category("i", "source"),
        category("j", "source"),
        storage=bh.storage.Int64(),
        metadata={
            **metadata,
            "what": "events holding both sources (diagonal: events holding the source)",
        },
    )
    mine = kind == COINCIDENCE
    coincidences.view()[at(a[mine]), at(b[mine])] = value[mine]
    return spectrum, coincidences


def pair_histograms(
    events: Any, sources: list[int], dt: int | None, metadata: dict[str, Any]
) -> tuple[bh.Histogram, bh.Histogram]:
    """Both histograms of a run's events (a DataFrame with ``barrier`` and ``fragments``),
    counted on the executors and summed by Spark."""
    from pyspark.sql import functions as F

    axis = spectrum_axis(dt)
    partials = (
        events.where(F.col("barrier") == 0)
        .select("fragments")
        .mapInArrow(pair_partials(axis), _PARTIALS_SCHEMA)
        .groupBy("kind", "a", "b", "c")
        .agg(F.sum("value").alias("value"))
        .toArrow()
    )
    return to_histograms(partials, sources, axis, metadata)
