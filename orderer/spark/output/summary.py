"""The run summary of the Spark job: counts, multiplicity histogram, per-source rates, late
fragments and their lateness, and the barrier log, from the built events.

Why from the events and not counted along the way: the events in the sink are the job's result
(exactly once), so a summary computed from them agrees with them by construction, whatever
micro-batches were retried.

Why Spark aggregations: a run has tens of millions of fragments, and the driver has a gigabyte
(the EventBuilder's default). Everything that grows with the run is reduced on the executors
(``groupBy``/``agg``, and one ``mapInArrow`` pass that bins the rates and takes the maxima the
lateness needs), and only what is small reaches the driver: one row per source, per
multiplicity, per (source, rate bin) and per barrier, and the late fragments themselves (offset
and timestamp, 16 bytes each: the report plots their lateness one by one; a run's late fragments
are the exceptions, not the bulk). The driver's memory is then flat in the number of fragments.

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

from orderer.spark.output.coincidence import pair_histograms

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

    # 1. event rows by (multiplicity, barrier type, late or not): the histogram and the counts;
    # a barrier row is a group of its own (its offset, source and timestamp are in the key)
    barrier = F.col("barrier") != 0
    shapes = (
        events.groupBy(
            "multiplicity",
            "barrier",
            (F.col("late") > 0).alias("has_late"),
            F.when(barrier, F.col("event")).alias("offset"),
            F.when(barrier, F.col("fragments")[0]["source"]).alias("source"),
            F.when(barrier, F.col("fragments")[0]["timestamp"]).alias("timestamp"),
        )
        .count()
        .collect()
    )
    histogram: dict[int, int] = {}
    for row in shapes:
        if row["barrier"] == 0:
            multiplicity = int(row["multiplicity"])
            histogram[multiplicity] = histogram.get(multiplicity, 0) + int(row["count"])
    ordinary_events = sum(histogram.values())
    barriers = sorted(
        (
            {
                "offset": int(row["offset"]),
                "source": int(row["source"]),
                "type": int(row["barrier"]),
                "timestamp": int(row["timestamp"]),
            }
            for row in shapes
            if row["barrier"] != 0
        ),
        key=lambda entry: entry["offset"],
    )

    # 2. fragments by source: counts, ranges, and the late fragments themselves
    fragments = events.select(F.inline("fragments"))
    by_source = (
        fragments.groupBy("source")
        .agg(
            F.count(F.lit(1)).alias("fragments"),
            F.count(F.when(F.col("late"), 1)).alias("late"),
            F.min("timestamp").alias("first_ts"),
            F.max("timestamp").alias("last_ts"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.collect_list(F.when(F.col("late"), F.struct("offset", "timestamp"))).alias("lates"),
        )
        .toArrow()
        .sort_by("source")
    )
    per_source = by_source.drop(["lates"]).to_pylist()
    n = sum(row["fragments"] for row in per_source)
    first_ts = min((row["first_ts"] for row in per_source), default=0)
    last_ts = max((row["last_ts"] for row in per_source), default=0)
    duration = (last_ts - first_ts) / tick_rate
    edges = np.linspace(0.0, max(duration, 1.0 / tick_rate), RATE_BINS + 1)
    width = float(edges[1] - edges[0])
    late = pa.Table.from_arrays(
        [pc.list_flatten(by_source.column("lates")).combine_chunks()], names=["late"]
    ).flatten()
    late = late.sort_by("late.offset")
    late_offsets = late.column("late.offset").to_numpy().astype(np.int64, copy=False)
    late_ts = late.column("late.timestamp").to_numpy().astype(np.int64, copy=False)

    # 3. rates binned and the high-water marks in front of the late fragments, on the executors
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

    # 4. the spectrum of differences within events and the coincidence matrix, on the executors
    metadata = {
        "run": run,
        "dt": glom.get("dt"),
        "timestamp_policy": glom.get("timestamp_policy"),
        "tick_rate": tick_rate,
    }
    spectrum, coincidences = pair_histograms(
        events, [int(row["source"]) for row in per_source], glom.get("dt"), metadata
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
            "events_with_late": sum(int(row["count"]) for row in shapes if row["has_late"]),
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
