"""The counting of built events into partial rows ``kind, a, b, c, value``: one implementation
for the live page (each micro-batch's partitions, counted where the source builds them:
:mod:`orderer.spark.live.partials`) and the end of run's summary (the run's events as written:
:mod:`orderer.spark.output.summary`).

Partial rows of any number of batches add up: counts by their sum, the timestamps by their min
and max (:func:`summed`), so every partition, micro-batch and executor counts alike and only
the sums travel. The kinds are the spectrum's and the coincidence matrix's
(:mod:`orderer.spark.output.coincidence`) and :data:`SHAPE`, :data:`SOURCE`, :data:`TIME`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.spark.output.coincidence import counted, pair_rows

__all__ = ["SHAPE", "SOURCE", "TIME", "batch_rows", "summed"]

SHAPE, SOURCE, TIME = 2, 3, 4
"""Kinds beside the spectrum's and the matrix's: (multiplicity, barrier type, late or not) ->
rows; (source, late or not) -> fragments; the timestamps (their min and max)."""

_KEYS = ["kind", "a", "b", "c"]


def batch_rows(batch: pa.RecordBatch, axis: Any) -> list[tuple[np.ndarray, ...]]:
    """The partial rows ``kind, a, b, c, value`` of one Arrow batch of events (``multiplicity``,
    ``barrier``, ``late`` and ``fragments`` with ``source``, ``timestamp``, ``late``); ``axis``
    is the spectrum's (:func:`~orderer.spark.output.coincidence.spectrum_axis`)."""
    multiplicity = batch.column("multiplicity").to_numpy(zero_copy_only=False)
    barrier = batch.column("barrier").to_numpy(zero_copy_only=False).astype(np.int64)
    late = batch.column("late").to_numpy(zero_copy_only=False) > 0
    parts = [counted(SHAPE, multiplicity.astype(np.int64), barrier, late)]
    lists = batch.column("fragments")
    flat = pc.list_flatten(lists)
    if len(flat):
        source = flat.field("source").to_numpy(zero_copy_only=False).astype(np.int64)
        flagged = flat.field("late").to_numpy(zero_copy_only=False).astype(np.int64)
        parts.append(counted(SOURCE, source, flagged, np.zeros_like(source)))
        ts = flat.field("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
        edge = np.array([ts.min(), ts.max()], np.int64)
        zero = np.zeros(2, np.int64)
        parts.append((np.full(2, TIME, np.int64), zero, zero, zero, edge))
    parts += pair_rows(pc.filter(lists, pa.array(barrier == 0)), axis)
    return parts


def summed(table: pa.Table) -> pa.Table:
    """Rows ``kind, a, b, c, sum, min, max`` of partial rows (``value``) or of summed ones."""
    if "value" in table.column_names:
        out = table.group_by(_KEYS).aggregate(
            [("value", "sum"), ("value", "min"), ("value", "max")]
        )
        return out.rename_columns({"value_sum": "sum", "value_min": "min", "value_max": "max"})
    out = table.group_by(_KEYS).aggregate([("sum", "sum"), ("min", "min"), ("max", "max")])
    return out.rename_columns({"sum_sum": "sum", "min_min": "min", "max_max": "max"})
