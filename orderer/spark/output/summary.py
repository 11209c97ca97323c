"""The run summary of the Spark job: counts, multiplicity histogram, per-source rates, late
fragments and their lateness, and the barrier log, from the built events.

Why from the events and not counted along the way: the events in the sink are the job's result
(exactly once), so a summary computed from them agrees with them by construction, whatever
micro-batches were retried.

Why Spark aggregations: a run has tens of millions of fragments, and the driver has a gigabyte
(the EventBuilder's default). Everything that grows with the run is reduced on the executors,
and only what is small reaches the driver: a few rows per source, per multiplicity, per
(source, rate bin), per source pair and per barrier, and the late fragments themselves (offset
and timestamp, 16 bytes each: the report plots their lateness one by one; a run's late fragments
are the exceptions, not the bulk). The driver's memory is then flat in the number of fragments.

Why two passes (two Spark jobs): the first (:func:`_counts_of`: the live page's counting,
:mod:`orderer.spark.output.event_counts`, with the ranges of each source, the barrier rows and
the late fragments) gives what the second needs, the run's first and last timestamps (the rate
bins' edges) and the late fragments' offsets (the segments); the second bins the rates and
takes the maxima the lateness needs. A Spark job has a fixed price whatever it counts: each
quantity in a job of its own was four jobs, about twice the time at the end of a short run.

Lateness of a late fragment = the high-water mark when it was emitted minus its timestamp; the
high-water mark is the largest timestamp of the on-time fragments before it in offset order.
The executors cut the on-time fragments at the late ones (segment ``k``: the on-time fragments
after the ``k``-th late fragment and before the next) and return each segment's largest
timestamp; on the driver, the running maximum over the segments is the high-water mark in front
of every late fragment.

Rates over time: ``RATE_BINS`` bins of equal width from the first fragment's timestamp to the
last one's (``numpy.histogram``'s bins: each closed on the left, the last one on both sides).

The spectrum of timestamp differences within events and the coincidence matrix of the sources
(what helps choose ``dt``) are boost-histogram objects, counted on the executors the same way
(:mod:`orderer.spark.output.coincidence`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boost_histogram as bh
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.spark.output.coincidence import (
    COINCIDENCE,
    SPECTRUM,
    rows_batch,
    spectrum_axis,
    to_histograms,
)
from orderer.spark.output.event_counts import SHAPE, SOURCE, batch_rows

__all__ = ["RATE_BINS", "SUMMARY_SCHEMA", "RunSummary", "summarize"]

SUMMARY_SCHEMA = (
    "event long, timestamp long, multiplicity int, barrier long, late int, "
    "fragments array<struct<offset:long, source:long, timestamp:long, late:boolean>>"
)
"""The columns of the event rows the summary reads (no payloads): read the events with this
schema, so that Parquet leaves the payloads on disk and JSON needs no schema inference pass."""

RATE_BINS = 60
"""Bins of the rates-over-time series."""

_INT64_MIN = np.iinfo(np.int64).min
_COUNTS_SCHEMA = "kind int, a long, b long, c long, value long"
_SOURCE_TIME, _SOURCE_OFFSET, _BARRIER, _LATE = 10, 11, 12, 13
"""Kinds of the first pass's rows beside :mod:`orderer.spark.output.event_counts`' (the live
page's): (source) -> its timestamps' and its offsets' min and max; (offset, source, type) -> a
barrier row's timestamp; (offset, timestamp) -> a late fragment."""
_PARTIALS_SCHEMA = "kind int, a long, b long, value long"
_RATE, _SEGMENT = 0, 1
"""Kinds of the executors' partial results: (source, bin) -> fragments; (segment) -> the largest
on-time timestamp."""


@dataclass
class RunSummary:
    """The summary (``as_dict`` is the JSON) and the arrays the report plots."""

    data: dict[str, Any]
    rate_edges: np.ndarray  # seconds from the first fragment, RATE_BINS + 1
    rates: dict[int, np.ndarray]  # per source, fragments per second in each bin
    lateness: np.ndarray  # seconds, one per late fragment
    origin: int  # the first fragment's timestamp (ticks): time 0 of rate_edges
    spectrum: bh.Histogram  # first source x other source x timestamp difference (ticks)
    coincidences: bh.Histogram  # source x source: events holding both
    stage_histograms: dict[str, bh.Histogram] = field(default_factory=dict)
    """The stages' declared histograms, by the report's file name
    (:mod:`orderer.spark.stages.stage_histograms`)."""

    def as_dict(self) -> dict[str, Any]:
        return self.data


def summarize(events: Any, *, run: str, tick_rate: float, glom: dict[str, Any]) -> RunSummary:
    """The summary of one run's events (a DataFrame with the columns of
    :data:`SUMMARY_SCHEMA`), computed by Spark; small results only are collected."""
    from pyspark.sql import functions as F

    # 1. one pass over the events: their shapes, the fragments by source, the barrier rows, the
    # late fragments, the spectrum and the coincidences, as partial rows summed by Spark
    axis = spectrum_axis(glom.get("dt"))
    counts = (
        events.mapInArrow(_counts_of(axis), _COUNTS_SCHEMA)
        .groupBy("kind", "a", "b", "c")
        .agg(F.sum("value").alias("sum"), F.min("value").alias("min"), F.max("value").alias("max"))
        .toArrow()
    )
    kind = counts.column("kind").to_numpy()
    a, b, c = (counts.column(k).to_numpy() for k in ("a", "b", "c"))
    total, low, high = (counts.column(k).to_numpy() for k in ("sum", "min", "max"))

    histogram: dict[int, int] = {}
    shapes = kind == SHAPE
    for multiplicity, barrier_type, count in zip(a[shapes], b[shapes], total[shapes], strict=True):
        if barrier_type == 0:
            histogram[int(multiplicity)] = histogram.get(int(multiplicity), 0) + int(count)
    ordinary_events = sum(histogram.values())
    events_with_late = int(total[shapes & (c == 1)].sum())
    mine = kind == _BARRIER
    barriers = sorted(
        (
            {"offset": int(at), "source": int(source), "type": int(type_), "timestamp": int(ts)}
            for at, source, type_, ts in zip(a[mine], b[mine], c[mine], high[mine], strict=True)
        ),
        key=lambda entry: entry["offset"],
    )

    # per source: fragments and late ones, the range of timestamps and offsets (the rows of
    # these kinds only: the late fragments' rows are as many as they are)
    of_sources = np.isin(kind, [SOURCE, _SOURCE_TIME, _SOURCE_OFFSET])
    kind_s, source_s, late_s = kind[of_sources], a[of_sources], b[of_sources]
    total_s, low_s, high_s = total[of_sources], low[of_sources], high[of_sources]
    per_source = []
    for source in np.unique(source_s[kind_s == SOURCE]):
        of = source_s == source
        flagged = of & (kind_s == SOURCE)
        ts_of, offsets_of = of & (kind_s == _SOURCE_TIME), of & (kind_s == _SOURCE_OFFSET)
        per_source.append(
            {
                "source": int(source),
                "fragments": int(total_s[flagged].sum()),
                "late": int(total_s[flagged & (late_s == 1)].sum()),
                "first_ts": int(low_s[ts_of].min()),
                "last_ts": int(high_s[ts_of].max()),
                "first_offset": int(low_s[offsets_of].min()),
                "last_offset": int(high_s[offsets_of].max()),
            }
        )
    n = sum(row["fragments"] for row in per_source)
    first_ts = min((row["first_ts"] for row in per_source), default=0)
    last_ts = max((row["last_ts"] for row in per_source), default=0)
    duration = (last_ts - first_ts) / tick_rate
    edges = np.linspace(0.0, max(duration, 1.0 / tick_rate), RATE_BINS + 1)
    width = float(edges[1] - edges[0])
    lates = kind == _LATE
    order = np.argsort(a[lates], kind="stable")
    late_offsets = a[lates][order].astype(np.int64, copy=False)
    late_ts = b[lates][order].astype(np.int64, copy=False)
    fragments = events.select(F.inline("fragments"))

    # 2. rates binned and the high-water marks in front of the late fragments, on the executors
    spark = events.sparkSession
    shared = spark.sparkContext.broadcast(late_offsets)
    try:
        partials = (
            fragments.mapInArrow(
                _partials_of(first_ts, tick_rate, edges[1:-1], shared), _PARTIALS_SCHEMA
            )
            .groupBy("kind", "a", "b")
            .agg(F.sum("value").alias("sum"), F.max("value").alias("max"))
            .toArrow()
        )
    finally:
        shared.unpersist()
    kind = partials.column("kind").to_numpy()
    a = partials.column("a").to_numpy()
    b = partials.column("b").to_numpy()

    rates: dict[int, np.ndarray] = {}
    for row in per_source:
        source = row["source"]
        binned = np.zeros(RATE_BINS, dtype=np.int64)
        mine = (kind == _RATE) & (a == source)
        binned[b[mine]] = partials.column("sum").to_numpy()[mine]
        rates[source] = binned / width

    segment_max = np.full(late_offsets.size + 1, _INT64_MIN, dtype=np.int64)
    segments = kind == _SEGMENT
    segment_max[a[segments]] = partials.column("max").to_numpy()[segments]
    before = np.maximum.accumulate(segment_max)[:-1]  # high-water mark before each late one
    lateness = (before - late_ts).astype(np.float64) / tick_rate

    # the spectrum of differences within events and the coincidence matrix
    metadata = {
        "run": run,
        "dt": glom.get("dt"),
        "timestamp_policy": glom.get("timestamp_policy"),
        "tick_rate": tick_rate,
    }
    pairs = pc.is_in(counts.column("kind"), pa.array([SPECTRUM, COINCIDENCE], pa.int32()))
    spectrum, coincidences = to_histograms(
        counts.filter(pairs).rename_columns(["kind", "a", "b", "c", "value", "min", "max"]),
        [row["source"] for row in per_source],
        axis,
        metadata,
    )

    data = {
        "run": run,
        "glom": glom,
        "tick_rate": tick_rate,
        "events": ordinary_events,
        "barrier_rows": len(barriers),
        "fragments": n,
        "first_offset": min(row["first_offset"] for row in per_source) if n else None,
        "next_offset": max(row["last_offset"] for row in per_source) + 1 if n else None,
        "duration_seconds": round(duration, 6),
        "multiplicity": {
            "histogram": {str(m): histogram[m] for m in sorted(histogram)},
            "mean": round(sum(m * c for m, c in histogram.items()) / ordinary_events, 4)
            if ordinary_events
            else None,
            "max": max(histogram) if ordinary_events else None,
        },
        "sources": {
            str(row["source"]): {
                "fragments": row["fragments"],
                "late": row["late"],
                "rate_hz": round(float(row["fragments"]) / duration, 3) if duration > 0 else None,
            }
            for row in per_source
        },
        "late": {
            "fragments": int(late_offsets.size),
            "events_with_late": events_with_late,
            "max_lateness_seconds": float(lateness.max()) if lateness.size else 0.0,
            "mean_lateness_seconds": float(lateness.mean()) if lateness.size else 0.0,
        },
        "barriers": barriers,
        "dt_spectrum": {
            "fragments": int(spectrum.sum(flow=True)),
            "bins": spectrum.axes[2].size,
            "bin_width_ticks": float(spectrum.axes[2].widths[0]),
        },
    }
    return RunSummary(data, edges, rates, lateness, first_ts, spectrum, coincidences)


def _counts_of(axis: bh.axis.Regular) -> Any:
    """The executors' first pass over the events (batches of :data:`SUMMARY_SCHEMA`'s columns):
    the live page's counts (:func:`~orderer.spark.output.event_counts.batch_rows`) and what the
    summary adds to them, the range of each source's timestamps and offsets, the barrier rows
    and the late fragments, as partial rows ``kind, a, b, c, value``."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            parts = batch_rows(batch, axis)
            lists = batch.column("fragments")
            barrier = batch.column("barrier").to_numpy(zero_copy_only=False).astype(np.int64)
            rows = np.flatnonzero(barrier != 0)
            if rows.size:
                first = pc.list_element(lists.take(pa.array(rows)), 0)
                event = batch.column("event").to_numpy(zero_copy_only=False).astype(np.int64)
                parts.append(
                    (
                        np.full(rows.size, _BARRIER, np.int64),
                        event[rows],
                        first.field("source").to_numpy(zero_copy_only=False).astype(np.int64),
                        barrier[rows],
                        first.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64),
                    )
                )
            flat = pc.list_flatten(lists)
            if len(flat):
                source = flat.field("source").to_numpy(zero_copy_only=False).astype(np.int64)
                ts = flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
                offset = flat.field("offset").to_numpy(zero_copy_only=False).astype(np.int64)
                late = flat.field("late").to_numpy(zero_copy_only=False).astype(np.bool_)
                parts += _ranges(_SOURCE_TIME, source, ts) + _ranges(_SOURCE_OFFSET, source, offset)
                if late.any():
                    zero = np.zeros(int(late.sum()), np.int64)
                    parts.append((zero + _LATE, offset[late], ts[late], zero, zero + 1))
            yield rows_batch(parts)

    return partials


def _ranges(kind: int, source: np.ndarray, values: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Rows ``kind, source, 0, 0, value`` of each source's smallest and largest ``values``."""
    order = np.argsort(source, kind="stable")
    ordered = source[order]
    starts = np.flatnonzero(np.diff(ordered, prepend=ordered[0] - 1))
    ids = ordered[starts]
    zero = np.zeros(ids.size, np.int64)
    return [
        (zero + kind, ids, zero, zero, np.minimum.reduceat(values[order], starts)),
        (zero + kind, ids, zero, zero, np.maximum.reduceat(values[order], starts)),
    ]


def _partials_of(
    first_ts: int, tick_rate: float, inner_edges: np.ndarray, late_offsets: Any
) -> Any:
    """The executors' pass over the fragments (``offset, source, timestamp, late`` batches):
    fragments per (source, rate bin), and the largest on-time timestamp per segment between late
    fragments (``late_offsets``: a broadcast of their offsets, ascending)."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lates = late_offsets.value
        for batch in batches:
            if batch.num_rows == 0:
                continue
            offset = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
            source = batch.column("source").to_numpy(zero_copy_only=False).astype(np.int64)
            ts = batch.column("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
            late = batch.column("late").to_numpy(zero_copy_only=False).astype(np.bool_)
            # numpy.histogram's bins: [e_i, e_i+1), the last one closed on the right
            bins = np.searchsorted(inner_edges, (ts - first_ts) / tick_rate, "right")
            keys, count = np.unique(source * (RATE_BINS + 1) + bins, return_counts=True)
            parts = [(_RATE, keys // (RATE_BINS + 1), keys % (RATE_BINS + 1), count)]
            on_time = ~late
            if on_time.any():
                segment = np.searchsorted(lates, offset[on_time], "right")
                order = np.argsort(segment, kind="stable")
                segment, stamps = segment[order], ts[on_time][order]
                starts = np.flatnonzero(np.diff(segment, prepend=-1))
                parts.append(
                    (_SEGMENT, segment[starts], np.zeros(starts.size, np.int64),
                     np.maximum.reduceat(stamps, starts))
                )
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.concatenate([np.full(len(p[1]), p[0], np.int32) for p in parts])),
                    pa.array(np.concatenate([p[1] for p in parts]).astype(np.int64)),
                    pa.array(np.concatenate([p[2] for p in parts]).astype(np.int64)),
                    pa.array(np.concatenate([p[3] for p in parts]).astype(np.int64)),
                ],
                names=["kind", "a", "b", "value"],
            )

    return partials
