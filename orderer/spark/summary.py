"""The run summary of the Spark job: counts, multiplicity histogram, per-source rates, late
fragments and their lateness, and the barrier log, from the built events.

Why from the events and not counted along the way: the events in the sink are the job's result
(exactly once), so a summary computed from them agrees with them by construction, whatever
micro-batches were retried. Only small columns reach the driver (no payloads): offsets,
sources, timestamps and late flags of the fragments, 25 bytes per fragment.

Lateness of a late fragment = the high-water mark when it was emitted minus its timestamp; the
high-water mark is the largest timestamp of the on-time fragments before it in offset order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SUMMARY_COLUMNS", "RunSummary", "summarize"]

SUMMARY_COLUMNS = {
    "event": "event",
    "timestamp": "timestamp",
    "multiplicity": "multiplicity",
    "barrier": "barrier",
    "late": "late",
    "offsets": "fragments.offset",
    "sources": "fragments.source",
    "timestamps": "fragments.timestamp",
    "lates": "fragments.late",
}
"""Columns the summary needs, as Spark column expressions over the event rows."""

RATE_BINS = 60
"""Bins of the rates-over-time series."""


@dataclass
class RunSummary:
    """The summary (``as_dict`` is the JSON) and the arrays the report plots."""

    data: dict[str, Any]
    rate_edges: np.ndarray  # seconds from the first fragment, RATE_BINS + 1
    rates: dict[int, np.ndarray]  # per source, fragments per second in each bin
    lateness: np.ndarray  # seconds, one per late fragment

    def as_dict(self) -> dict[str, Any]:
        return self.data


def summarize(events: pa.Table, *, run: str, tick_rate: float, glom: dict[str, Any]) -> RunSummary:
    """The summary of one run's events (columns of :data:`SUMMARY_COLUMNS`)."""
    events = events.sort_by("event")
    barrier = events.column("barrier").to_numpy(zero_copy_only=False)
    multiplicity = events.column("multiplicity").to_numpy(zero_copy_only=False)
    ordinary = barrier == 0
    offsets = _flat(events, "offsets", np.int64)
    sources = _flat(events, "sources", np.int64)
    timestamps = _flat(events, "timestamps", np.int64)
    lates = _flat(events, "lates", np.bool_)
    order = np.argsort(offsets, kind="stable")
    offsets, sources, timestamps, lates = (a[order] for a in (offsets, sources, timestamps, lates))

    hwm = np.maximum.accumulate(np.where(lates, np.iinfo(np.int64).min, timestamps))
    before = np.concatenate([[np.iinfo(np.int64).min], hwm[:-1]]) if hwm.size else hwm
    lateness_ticks = (before - timestamps)[lates]
    lateness = lateness_ticks.astype(np.float64) / tick_rate

    n = int(offsets.size)
    first_ts = int(timestamps.min()) if n else 0
    last_ts = int(timestamps.max()) if n else 0
    duration = (last_ts - first_ts) / tick_rate
    edges = np.linspace(0.0, max(duration, 1.0 / tick_rate), RATE_BINS + 1)
    width = float(edges[1] - edges[0])
    seconds = (timestamps - first_ts) / tick_rate
    rates: dict[int, np.ndarray] = {}
    per_source: dict[str, Any] = {}
    for source in np.unique(sources).tolist():
        mine = sources == source
        counts, _ = np.histogram(seconds[mine], bins=edges)
        rates[int(source)] = counts / width
        per_source[str(source)] = {
            "fragments": int(mine.sum()),
            "late": int((mine & lates).sum()),
            "rate_hz": round(float(mine.sum()) / duration, 3) if duration > 0 else None,
        }

    hist_values, hist_counts = np.unique(multiplicity[ordinary], return_counts=True)
    barrier_rows = np.flatnonzero(~ordinary)
    first_offsets = events.column("event").to_numpy(zero_copy_only=False)
    barrier_log = []
    for row in barrier_rows.tolist():
        offset = int(first_offsets[row])
        at = int(np.searchsorted(offsets, offset))
        barrier_log.append(
            {
                "offset": offset,
                "source": int(sources[at]),
                "type": int(barrier[row]),
                "timestamp": int(timestamps[at]),
            }
        )
    data = {
        "run": run,
        "glom": glom,
        "tick_rate": tick_rate,
        "events": int(ordinary.sum()),
        "barrier_rows": int((~ordinary).sum()),
        "fragments": n,
        "first_offset": int(offsets[0]) if n else None,
        "next_offset": int(offsets[-1]) + 1 if n else None,
        "duration_seconds": round(duration, 6),
        "multiplicity": {
            "histogram": {str(v): int(c) for v, c in zip(hist_values, hist_counts, strict=True)},
            "mean": round(float(multiplicity[ordinary].mean()), 4) if ordinary.any() else None,
            "max": int(multiplicity[ordinary].max()) if ordinary.any() else None,
        },
        "sources": per_source,
        "late": {
            "fragments": int(lates.sum()),
            "events_with_late": int((events.column("late").to_numpy(zero_copy_only=False) > 0)
                                    .sum()),
            "max_lateness_seconds": float(lateness.max()) if lateness.size else 0.0,
            "mean_lateness_seconds": float(lateness.mean()) if lateness.size else 0.0,
        },
        "barriers": barrier_log,
    }
    return RunSummary(data, edges, rates, lateness)


def _flat(events: pa.Table, name: str, dtype: type) -> np.ndarray:
    column = events.column(name).combine_chunks()
    values = pc.list_flatten(column)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype)
