"""The histograms the stages declare (:mod:`orderer.stages.histograms`: 1D and 2D), filled from
each stage's results of the whole run once it is built, for the run's summary and report, and
from each micro-batch's results for the live page (:mod:`orderer.spark.live.counts`).

Why after the run and from the results as written: the results in ``OUTPUT/stages/STAGE/run=RUN/``
are the job's (each micro-batch once), so the histograms agree with them by construction,
whatever micro-batches were retried.

Why a Spark aggregation: a stage's results grow with the run. Each bin index is computed on the
executors (:func:`bin_index`, boost-histogram's regular axis: ``floor((x - low) / (high - low)
* bins)``, below ``low`` the underflow, at or above ``high`` and NaN the overflow, nulls left
out; a 2D one's cell from its two indexes), the rows are counted by (histogram, cell), and only
those counts, ``bins + 2`` rows at most per histogram (``(x bins + 2) (y bins + 2)`` for a 2D
one), reach the driver: one aggregation for every stage's histograms (:func:`fill_many`).

What the driver makes of them: a ``boost_histogram.Histogram`` per declared histogram (Int64
storage, its regular axis named after the column, its ``metadata`` the run, the stage, the column
and its unit, with dt, the timestamp policy and the tick rate as the report's other histograms
have them), kept by the summary (:attr:`RunSummary.stage_histograms
<orderer.spark.output.summary.RunSummary.stage_histograms>`, by file name) for the report, and its
counts in the summary's JSON under ``stages.STAGE.histograms.COLUMN`` (``X,Y`` for a 2D one,
:func:`summary_entry`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import boost_histogram as bh
import numpy as np

from orderer.spark.output import files
from orderer.spark.output.summary import RunSummary
from orderer.spark.stages.runner import spark_schema
from orderer.spark.stages.sink import stage_directory
from orderer.stages.api import Histogram, Histogram2D, Stage
from orderer.stages.plan import Plan

__all__ = [
    "add_stage_results",
    "bin_index",
    "cells",
    "file_name",
    "fill",
    "fill_many",
    "shaped",
    "summary_entry",
]


def bin_index(value: Any, histogram: Histogram) -> Any:
    """The Spark column of each value's bin: -1 the underflow, ``bins`` the overflow (NaN too),
    null for a null; the same index boost-histogram's regular axis gives (the same arithmetic,
    in doubles)."""
    from pyspark.sql import functions as F

    x = value.cast("double")
    z = (x - F.lit(float(histogram.low))) / F.lit(float(histogram.high) - float(histogram.low))
    bins = F.lit(int(histogram.bins)).cast("long")
    return (
        F.when(x.isNull(), F.lit(None).cast("long"))
        .when(F.isnan(z) | (z >= 1.0), bins)
        .when(z < 0.0, F.lit(-1).cast("long"))
        .otherwise(F.least(F.floor(z * F.lit(float(histogram.bins))), bins))
    )


def cells(histogram: Histogram | Histogram2D) -> int:
    """Its counts with the flow bins: ``bins + 2``, or ``(x bins + 2) (y bins + 2)``."""
    if isinstance(histogram, Histogram2D):
        return (int(histogram.x.bins) + 2) * (int(histogram.y.bins) + 2)
    return int(histogram.bins) + 2


def shaped(histogram: Histogram | Histogram2D, flat: np.ndarray) -> np.ndarray:
    """Counts as :func:`fill` gives them, in the histogram's shape (flows included)."""
    if isinstance(histogram, Histogram2D):
        return flat.reshape(int(histogram.x.bins) + 2, int(histogram.y.bins) + 2)
    return flat


def _cell(histogram: Histogram | Histogram2D) -> Any:
    """The Spark column of each row's cell among the counts with the flows (row-major for a
    2D one: x, then y); null where a value is null."""
    from pyspark.sql import functions as F

    if isinstance(histogram, Histogram2D):
        x = bin_index(_column(histogram.x.column), histogram.x) + F.lit(1)
        y = bin_index(_column(histogram.y.column), histogram.y) + F.lit(1)
        return x * F.lit(int(histogram.y.bins) + 2) + y  # null when either is
    return bin_index(_column(histogram.column), histogram) + F.lit(1)


def fill(results: Any, histograms: Sequence[Histogram | Histogram2D]) -> list[np.ndarray]:
    """The counts of each histogram over ``results`` (a DataFrame with their columns), the flows
    included (``bins + 2`` integers, the underflow first and the overflow last; a 2D one's in its
    shape, :func:`shaped`). One Spark aggregation for them all; the counts alone are collected."""
    return fill_many([(results, histograms)])[0][1]


def fill_many(
    tables: Sequence[tuple[Any, Sequence[Histogram | Histogram2D]]],
) -> list[tuple[int, list[np.ndarray]]]:
    """The rows of each of ``tables`` (DataFrames, each with its histograms' columns) and the
    counts of each of its histograms, as :func:`fill` counts them, in ONE Spark job for them all.

    Why one job: a Spark job has a fixed price whatever it counts, and the live page counts
    every stage's results after every micro-batch: a count and a fill per stage were two jobs
    per stage per micro-batch (the README's benchmarks say what that cost). Every row adds a
    cell of its own (histogram -1), so its table's rows are counted in the same pass."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not tables:
        return []
    parts = []
    for t, (results, histograms) in enumerate(tables):
        marks = [F.struct(F.lit(-1).alias("histogram"), F.lit(0).cast("long").alias("cell"))]
        marks += [
            F.struct(F.lit(k).alias("histogram"), _cell(h).cast("long").alias("cell"))
            for k, h in enumerate(histograms)
        ]
        parts.append(results.select(F.lit(t).alias("table"), F.inline(F.array(*marks))))
    counted = (
        reduce(lambda a, b: a.unionAll(b), parts)
        .where(F.col("cell").isNotNull())
        .groupBy("table", "histogram", "cell")
        .count()
        .collect()
    )
    rows = [0] * len(tables)
    out = [[np.zeros(cells(h), np.int64) for h in histograms] for _, histograms in tables]
    for row in counted:
        t, k = int(row["table"]), int(row["histogram"])
        if k < 0:
            rows[t] = int(row["count"])
        else:
            out[t][k][int(row["cell"])] = int(row["count"])
    return [
        (rows[t], [shaped(h, flat) for h, flat in zip(histograms, out[t], strict=True)])
        for t, (_, histograms) in enumerate(tables)
    ]


def _column(name: str) -> Any:
    """A top-level column by its name as it is (a dot in it is no struct's field)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def file_name(stage: str, column: str, taken: set[str]) -> str:
    """The report's name of a stage's histogram, without suffix: ``stage_<stage>_<column>``
    (``column``: its key; a 2D one's ``x,y`` gives ``x_y``; other characters than letters,
    digits, ``_``, ``.``, ``-`` made ``_``; a name already ``taken`` gets ``-2``, ``-3``...)."""
    base = f"stage_{stage}_{re.sub(r'[^A-Za-z0-9_.-]', '_', column)}"
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}-{k}"
    taken.add(name)
    return name


def _axis(histogram: Histogram) -> bh.axis.Regular:
    return bh.axis.Regular(
        int(histogram.bins),
        float(histogram.low),
        float(histogram.high),
        __dict__={"name": histogram.column, "label": histogram.axis_label},
    )


def _histogram(
    stage: Stage,
    histogram: Histogram | Histogram2D,
    counts: np.ndarray,
    metadata: dict[str, Any],
) -> bh.Histogram:
    if isinstance(histogram, Histogram2D):
        axes = [_axis(histogram.x), _axis(histogram.y)]
        what = (
            f"rows of stage {stage.name}'s results by {histogram.x.column} and "
            f"{histogram.y.column}"
        )
        units: Any = [histogram.x.unit, histogram.y.unit]
    else:
        axes = [_axis(histogram)]
        what = f"rows of stage {stage.name}'s results by {histogram.column}"
        units = histogram.unit
    filled = bh.Histogram(
        *axes,
        storage=bh.storage.Int64(),
        metadata={
            **metadata,
            "stage": stage.name,
            "column": histogram.key,
            "unit": units,
            "what": what,
        },
    )
    filled.view(flow=True)[...] = counts
    return filled


def _axis_entry(histogram: Histogram) -> dict[str, Any]:
    return {
        "column": histogram.column,
        "bins": int(histogram.bins),
        "low": float(histogram.low),
        "high": float(histogram.high),
        "label": histogram.axis_label,
        "unit": histogram.unit,
    }


def summary_entry(
    histogram: Histogram | Histogram2D, counts: np.ndarray, name: str
) -> dict[str, Any]:
    """A histogram in the summary's JSON: its declaration, ``counts`` with the flows (``bins +
    2``: the underflow first, the overflow last; a 2D one's a list per x bin, each ``y bins +
    2``, ``outside`` the rows in a flow bin of either axis), ``entries`` (every value counted,
    the flows too) and the report's files."""
    files = {"plot": f"{name}.png", "data": f"{name}.pkl"}
    if isinstance(histogram, Histogram2D):
        inside = int(counts[1:-1, 1:-1].sum())
        return {
            "x": _axis_entry(histogram.x),
            "y": _axis_entry(histogram.y),
            "log": bool(histogram.log),
            "counts": counts.tolist(),
            "outside": int(counts.sum()) - inside,
            "entries": int(counts.sum()),
            **files,
        }
    return {
        "bins": int(histogram.bins),
        "low": float(histogram.low),
        "high": float(histogram.high),
        "label": histogram.axis_label,
        "unit": histogram.unit,
        "log": bool(histogram.log),
        "counts": [int(c) for c in counts],
        "underflow": int(counts[0]),
        "overflow": int(counts[-1]),
        "entries": int(counts.sum()),
        **files,
    }


def add_stage_results(spark: Any, plan: Plan, output: str, summary: RunSummary) -> None:
    """Every stage of the plan in the run's summary: where its results are, how many rows they
    hold and, for a stage that declares histograms, those filled from them, into
    ``summary.data["stages"][STAGE]`` (its histograms by column) and ``summary.stage_histograms``
    (by file name).

    One Spark job for all of it (:func:`fill_many` counts each table's rows with its
    histograms), each stage's results read with its declared schema (no job to infer it): a
    count per stage and a schema per read were three jobs a stage at the end of every run."""
    run = summary.data["run"]
    glom = summary.data.get("glom") or {}
    metadata = {
        "run": run,
        "dt": glom.get("dt"),
        "timestamp_policy": glom.get("timestamp_policy"),
        "tick_rate": summary.data.get("tick_rate"),
    }
    stages = [step.stage for step in plan.stages]
    directories = {stage.name: stage_directory(output, stage.name, run) for stage in stages}
    written = [s for s in stages if files.exists(spark, directories[s.name])]
    filled = fill_many(
        [
            (spark.read.schema(spark_schema(s.schema)).parquet(directories[s.name]), s.histograms)
            for s in written
        ]
    )
    found = dict(zip([stage.name for stage in written], filled, strict=True))
    entries = summary.data.setdefault("stages", {})
    taken: set[str] = set()
    for stage in stages:
        rows, counts = found.get(stage.name, (0, None))
        entry: dict[str, Any] = {
            "class": stage.order.value,
            "rows": rows,
            "path": directories[stage.name],
        }
        entries[stage.name] = entry
        if not stage.histograms:
            continue
        if counts is None:  # no results at all: empty histograms
            counts = [shaped(h, np.zeros(cells(h), np.int64)) for h in stage.histograms]
        drawn: dict[str, Any] = {}
        for histogram, counted in zip(stage.histograms, counts, strict=True):
            name = file_name(stage.name, histogram.key, taken)
            drawn[histogram.key] = summary_entry(histogram, counted, name)
            summary.stage_histograms[name] = _histogram(stage, histogram, counted, metadata)
        entry["histograms"] = drawn
