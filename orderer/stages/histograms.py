"""The histograms a stage declares of its results: :class:`Histogram` (one numeric column) and
:class:`Histogram2D` (two: a pixel map, an energy against time), filled by the job after each
micro-batch (the live page) and over the run's whole results (the summary and the report).

Why declared and not drawn by the stage: the job fills them on the executors from the results as
written, so a histogram agrees with the results whatever micro-batches were retried, and the
driver only ever receives counts. One binning for every use: equal bins from ``low`` to
``high``, each closed on the left, values below ``low`` in the underflow, those at or above
``high`` (and NaN) in the overflow, nulls left out (boost-histogram's regular axis,
:func:`orderer.spark.stages.stage_histograms.bin_index`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from orderer.errors import ConfigError

__all__ = ["MAX_HISTOGRAM_BINS", "Histogram", "Histogram2D", "check_histograms"]

MAX_HISTOGRAM_BINS = 65_536
"""The most bins of a declared histogram, 2D ones' cells too (its counts are written into the
run's summary)."""


@dataclass(frozen=True)
class Histogram:
    """A histogram of one numeric column of a stage's results: ``bins`` equal bins from ``low``
    to ``high``. Declared with a stage: ``histograms=[Histogram("energy", 4096, 0, 4096,
    unit="keV")]``; an axis of a :class:`Histogram2D`."""

    column: str
    bins: int
    low: float
    high: float
    label: str | None = None
    """The plot's axis label (default: the column's name)."""
    unit: str | None = None
    """The column's unit, shown with the label."""
    log: bool = False
    """The plot's counts on a log scale."""

    @property
    def axis_label(self) -> str:
        """The label and the unit, as the plot's axis shows them."""
        label = self.label or self.column
        return f"{label} ({self.unit})" if self.unit else label

    @property
    def key(self) -> str:
        """Its name among the stage's histograms (the summary's key): the column."""
        return self.column

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)


@dataclass(frozen=True)
class Histogram2D:
    """A histogram of two numeric columns of a stage's results, ``x`` and ``y`` each binned as
    its :class:`Histogram` says (their ``log`` aside): ``Histogram2D(Histogram("row", 32, 0,
    32), Histogram("column", 32, 0, 32))``, a pixel map. A row whose value is null in either
    column is left out; a value outside an axis's range goes to that axis's flow bins."""

    x: Histogram
    y: Histogram
    log: bool = False
    """The plot's colour scale logarithmic."""

    @property
    def key(self) -> str:
        """Its name among the stage's histograms (the summary's key): ``x,y``."""
        return f"{self.x.column},{self.y.column}"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.x.column, self.y.column)


def check_histograms(
    stage: str, schema: pa.Schema, histograms: Sequence[Histogram | Histogram2D]
) -> None:
    """Each declared histogram names numeric columns of ``schema``, once, with bins and ranges
    that make sense; a ConfigError naming the stage and the histogram otherwise."""
    seen: set[str] = set()
    for histogram in histograms:
        if isinstance(histogram, Histogram2D):
            axes = [histogram.x, histogram.y]
            if not all(isinstance(axis, Histogram) for axis in axes):
                raise ConfigError(
                    f"stage {stage}: histograms", histogram, "a Histogram2D's axes are Histograms"
                )
        elif isinstance(histogram, Histogram):
            axes = [histogram]
        else:
            raise ConfigError(
                f"stage {stage}: histograms", histogram, "must be Histogram or Histogram2D objects"
            )
        where = f"stage {stage}: histogram of {histogram.key!r}"
        if histogram.key in seen:
            raise ConfigError(where, histogram.key, "one histogram per column (or pair)")
        seen.add(histogram.key)
        for axis in axes:
            _check_axis(where, schema, axis)
        cells = math.prod(axis.bins for axis in axes)
        if len(axes) == 2 and cells > MAX_HISTOGRAM_BINS:
            raise ConfigError(
                f"{where}: bins", cells, f"x bins times y bins: at most {MAX_HISTOGRAM_BINS:,}"
            )


def _check_axis(where: str, schema: pa.Schema, axis: Histogram) -> None:
    if axis.column not in schema.names:
        raise ConfigError(where, axis.column, "must be a column of its schema")
    kind = schema.field(axis.column).type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise ConfigError(where, str(kind), "the column must be numeric (integer or float)")
    bins = axis.bins
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or bins <= 0:
        raise ConfigError(f"{where}: bins", bins, "must be an integer above 0")
    if bins > MAX_HISTOGRAM_BINS:
        raise ConfigError(f"{where}: bins", bins, f"at most {MAX_HISTOGRAM_BINS:,}")
    low, high = axis.low, axis.high
    if not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
        for v in (low, high)
    ):
        raise ConfigError(f"{where}: low, high", (low, high), "must be finite numbers")
    if not low < high:
        raise ConfigError(f"{where}: low, high", (low, high), "low must be below high")
