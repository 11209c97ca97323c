"""One micro-batch's counts: what the running totals add up.

Why no Spark job of their own: the live page must not cost the job what the end-of-run summary
costs. The events' counts (the run summary's event shapes, the fragments per source, the
earliest and latest timestamps, the partial counts of the spectrum and the coincidence matrix)
are made where the data source builds the events and come to the driver with the job that
writes them (:mod:`orderer.spark.live.partials`); here they are summed (pyarrow).
The stages' rows and declared histograms are counted by
:func:`orderer.spark.stages.stage_histograms.fill_many`, the end of run's binning, over the
stages' results of the micro-batch (one Spark job for every stage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orderer.spark.live.partials import decoded
from orderer.spark.output.coincidence import COINCIDENCE, SPECTRUM
from orderer.spark.output.event_counts import SHAPE, SOURCE, TIME
from orderer.spark.stages.stage_histograms import fill_many
from orderer.stages.api import Order
from orderer.stages.plan import Plan

__all__ = ["BatchCounts", "StageCounts", "count_batch"]


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


def count_batch(blobs: list[bytes], results: Mapping[str, Any], plan: Plan | None) -> BatchCounts:
    """The counts of one micro-batch: ``blobs`` its events' counts as the data source made them
    (:func:`orderer.spark.live.partials.collect`), ``results`` each stage's results of the same
    micro-batch under its name (what the stages sink tells its observer)."""
    table = decoded(blobs)
    kind, a, b, c = (table.column(k).to_numpy() for k in ("kind", "a", "b", "c"))
    total = table.column("sum").to_numpy()
    shapes = {
        (int(a[k]), int(b[k]), bool(c[k])): int(total[k]) for k in np.flatnonzero(kind == SHAPE)
    }
    fragments = {(int(a[k]), bool(b[k])): int(total[k]) for k in np.flatnonzero(kind == SOURCE)}
    mine = (kind == SPECTRUM) | (kind == COINCIDENCE)
    keys = zip(*(column[mine].tolist() for column in (kind, a, b, c)), strict=True)
    pairs = dict(zip(keys, total[mine].tolist(), strict=True))
    times = np.flatnonzero(kind == TIME)
    first = int(table.column("min").to_numpy()[times].min()) if times.size else None
    last = int(table.column("max").to_numpy()[times].max()) if times.size else None
    planned = [step.stage for step in plan.stages] if plan is not None else []
    filled = fill_many([(results[stage.name], stage.histograms) for stage in planned])
    stages: dict[str, StageCounts] = {}
    for stage, (rows, counts) in zip(planned, filled, strict=True):
        stages[stage.name] = StageCounts(
            rows,
            {h.key: c for h, c in zip(stage.histograms, counts, strict=True)},
            replaces=stage.order is Order.AGGREGATION,
        )
    return BatchCounts(shapes, fragments, pairs, first, last, stages)
