"""One micro-batch's counts, computed on the executors: what the running totals add up.

Why one pass: the live page must not cost the job what the end-of-run summary costs. Each Arrow
batch of the micro-batch's events is reduced on its executor to partial rows ``kind, a, b, c,
value`` (the run summary's event shapes, the fragments per source, the earliest and latest
timestamps, and the partial counts of the spectrum and the coincidence matrix with the one
counting the end of the run uses, :func:`orderer.spark.coincidence.pair_rows`), a few hundred
rows per task whatever the micro-batch's size; the driver sums them (pyarrow), so the count is
one Spark stage, without a shuffle.
A stage's declared histograms are counted by :func:`orderer.spark.stage_histograms.fill`, the
end of run's binning, over the stage's results of the micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.spark.coincidence import (
    COINCIDENCE,
    SPECTRUM,
    counted,
    pair_rows,
    rows_batch,
    spectrum_axis,
)
from orderer.spark.stage_histograms import fill
from orderer.stages.api import EVENTS, Order
from orderer.stages.plan import Plan

__all__ = ["BatchCounts", "StageCounts", "count_batch"]

_SCHEMA = "kind int, a long, b long, c long, value long"
_SHAPE, _SOURCE, _TIME = 2, 3, 4
"""Kinds beside the spectrum's and the matrix's: (multiplicity, barrier type, late or not) ->
rows; (source, late or not) -> fragments; the timestamps (min and max)."""


@dataclass(frozen=True, slots=True)
class StageCounts:
    """One stage's results in one micro-batch: its rows, and each declared histogram's counts
    by its key, the flows included (``bins + 2``, the underflow first; a 2D one's in its
    shape). An aggregation's results are the finished table of the run so far: its counts
    replace the totals' instead of adding to them."""

    rows: int
    histograms: dict[str, np.ndarray]
    replaces: bool = False


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """What one micro-batch adds to the running totals."""

    shapes: dict[tuple[int, int, bool], int]
    """Rows by (multiplicity, barrier type: 0 for an event, late fragments in it or not)."""
    fragments: dict[tuple[int, bool], int]
    """Fragments by (source, late or not)."""
    pairs: dict[tuple[int, int, int, int], int]
    """The spectrum's and the matrix's partial counts by (kind, a, b, c)."""
    first_timestamp: int | None
    last_timestamp: int | None
    stages: dict[str, StageCounts] = field(default_factory=dict)


def _partials(dt: int | None) -> Any:
    axis = spectrum_axis(dt)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            multiplicity = batch.column("multiplicity").to_numpy(zero_copy_only=False)
            barrier = batch.column("barrier").to_numpy(zero_copy_only=False).astype(np.int64)
            late = batch.column("late").to_numpy(zero_copy_only=False) > 0
            parts = [counted(_SHAPE, multiplicity.astype(np.int64), barrier, late)]
            lists = batch.column("fragments")
            flat = pc.list_flatten(lists)
            if len(flat):
                source = flat.field("source").to_numpy(zero_copy_only=False).astype(np.int64)
                flagged = flat.field("late").to_numpy(zero_copy_only=False).astype(np.int64)
                parts.append(counted(_SOURCE, source, flagged, np.zeros_like(source)))
                ts = flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
                edge = np.array([ts.min(), ts.max()], np.int64)
                zero = np.zeros(2, np.int64)
                parts.append((np.full(2, _TIME, np.int64), zero, zero, zero, edge))
            parts += pair_rows(pc.filter(lists, pa.array(barrier == 0)), axis)
            yield rows_batch(parts)

    return partials


def count_batch(
    results: Mapping[str, Any], dt: int | None, plan: Plan | None
) -> BatchCounts:
    """The counts of one micro-batch: ``results`` its events (a DataFrame) under
    :data:`~orderer.stages.api.EVENTS`, and each stage's results of the same micro-batch under
    its name (what the stages sink tells its observer)."""
    from pyspark.sql import functions as F

    slim = F.transform(  # what is counted of each fragment: its payload never reaches Python
        "fragments",
        lambda f: F.struct(
            f["source"].alias("source"), f["timestamp"].alias("timestamp"), f["late"].alias("late")
        ),
    ).alias("fragments")
    frame = results[EVENTS].select("multiplicity", "barrier", "late", slim)
    partials = frame.mapInArrow(_partials(dt), _SCHEMA).toArrow()
    table = partials.group_by(["kind", "a", "b", "c"]).aggregate(
        [("value", "sum"), ("value", "min"), ("value", "max")]
    )  # on the driver: a few hundred rows a task, no shuffle (a Spark stage of its own)
    table = table.rename_columns(
        {"value_sum": "sum", "value_min": "min", "value_max": "max"}
    )
    kind, a, b, c = (table.column(k).to_numpy() for k in ("kind", "a", "b", "c"))
    total = table.column("sum").to_numpy()
    shapes = {
        (int(a[k]), int(b[k]), bool(c[k])): int(total[k]) for k in np.flatnonzero(kind == _SHAPE)
    }
    fragments = {(int(a[k]), bool(b[k])): int(total[k]) for k in np.flatnonzero(kind == _SOURCE)}
    pairs = {
        (int(kind[k]), int(a[k]), int(b[k]), int(c[k])): int(total[k])
        for k in np.flatnonzero((kind == SPECTRUM) | (kind == COINCIDENCE))
    }
    times = np.flatnonzero(kind == _TIME)
    first = int(table.column("min").to_numpy()[times].min()) if times.size else None
    last = int(table.column("max").to_numpy()[times].max()) if times.size else None
    stages: dict[str, StageCounts] = {}
    for step in plan.stages if plan is not None else ():
        stage = step.stage
        result = results[stage.name]
        counts = fill(result, stage.histograms) if stage.histograms else []
        stages[stage.name] = StageCounts(
            int(result.count()),
            {h.key: c for h, c in zip(stage.histograms, counts, strict=True)},
            replaces=stage.order is Order.AGGREGATION,
        )
    return BatchCounts(shapes, fragments, pairs, first, last, stages)
