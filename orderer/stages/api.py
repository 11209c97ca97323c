"""What a user writes: stages over built events, each declaring its order sensitivity.

A stage is a Python function over Arrow tables, called once per piece of data (a record batch,
a micro-batch, one key's events of a micro-batch), never once per event. Three kinds, after
Jet's design 015:

- :func:`order_insensitive`: ``f(table) -> table``; its result does not depend on how the events
  are split or ordered (calibrations, gates, projections, sums whose partial results a later
  stage adds up). Runs at full parallelism.
- :func:`order_sensitive`: ``f(table, state) -> (table, state)``; it sees the events in stream
  order, globally or per ``key`` (a column of its input), with its state carried from one call
  to the next (``initial()`` makes a new key's), across micro-batches and restarts (the state is
  pickled into the query's checkpoint). Implant-decay correlation per pixel, dead time per
  source, scaler increments.
- :func:`sequencer`: ``f(table) -> table`` that gives its output an order of its own,
  ``order_by`` columns of its output (a sort, a renumbering): the order-sensitive stages below
  it are ordered by those columns, not by the stream.

Stream order is the orderer's output order: the built events by ``event`` (the output offset of
their first fragment), which is timestamp order for every event without late fragments. A late
event comes where the orderer emitted it, flagged (``late`` > 0): once its successors were
seen, no stage can go back in time for it.

Stages read the built events (``reads="events"``, the default) or another stage's output, so
they form a graph. A stage may declare :class:`Histogram` s of numeric columns of its results:
the job fills them from the run's whole results and puts them in the run's summary and report.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from orderer.errors import ConfigError

__all__ = [
    "EVENTS",
    "EVENTS_ORDER",
    "MAX_HISTOGRAM_BINS",
    "Histogram",
    "Order",
    "Stage",
    "order_insensitive",
    "order_sensitive",
    "sequencer",
]

EVENTS = "events"
"""The name the built events are read by (``reads=EVENTS``)."""
EVENTS_ORDER = ("event",)
"""The stream order of the built events: the output offset of each event's first fragment."""

_RESERVED_PREFIX = "__evb"

MAX_HISTOGRAM_BINS = 65_536
"""The most bins of a declared histogram (its counts are written into the run's summary)."""


class Order(enum.StrEnum):
    """A stage's relation to order (Jet's design 015)."""

    INSENSITIVE = "order-insensitive"
    SENSITIVE = "order-sensitive"
    SEQUENCER = "sequencer"


@dataclass(frozen=True)
class Histogram:
    """A histogram of one numeric column of a stage's results over the whole run, in the run's
    summary and report: ``bins`` equal bins from ``low`` to ``high`` (each closed on the left),
    values below ``low`` in the underflow, those at or above ``high`` (and NaN) in the overflow,
    nulls left out. Declared with a stage: ``histograms=[Histogram("energy", 4096, 0, 4096,
    unit="keV")]``."""

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


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One analysis stage (made by the decorators below)."""

    name: str
    """Its results land in ``OUTPUT/stages/<name>/run=<run>/``."""
    function: Callable[..., Any]
    order: Order
    schema: pa.Schema
    """Of its output; what the function returns is cast to it (an error names the stage)."""
    reads: str = EVENTS
    """The built events, or another stage's name."""
    key: str | None = None
    """Order-sensitive: the column of its input whose values each get their own order and
    state (None: one global order)."""
    initial: Callable[[], Any] = field(default=lambda: None)
    """Order-sensitive: a new key's state (the global state's, without a key)."""
    order_by: tuple[str, ...] = ()
    """Sequencer: the output columns that give its output's order."""
    histograms: tuple[Histogram, ...] = ()
    """Of numeric columns of its results, over the whole run (the run's summary and report)."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith(_RESERVED_PREFIX):
            raise ConfigError("stage", self.name, "a stage's name must be a Python identifier")
        if self.name == EVENTS:
            raise ConfigError("stage", self.name, f"'{EVENTS}' names the built events")
        if not isinstance(self.schema, pa.Schema):
            raise ConfigError(f"stage {self.name}: schema", self.schema, "must be a pyarrow.Schema")
        for column in self.schema:
            if _unsigned(column.type):
                raise ConfigError(
                    f"stage {self.name}: schema",
                    f"{column.name}: {column.type}",
                    "Spark has no unsigned integers: declare a signed type (int64 for a uint32)",
                )
        for column in self.schema.names:
            if column.startswith(_RESERVED_PREFIX):
                raise ConfigError(
                    f"stage {self.name}: schema",
                    column,
                    f"names starting {_RESERVED_PREFIX} are evb's",
                )
        if self.order is Order.SENSITIVE:
            if not callable(self.initial):
                raise ConfigError(f"stage {self.name}: initial", self.initial, "must be callable")
        elif self.key is not None:
            raise ConfigError(
                f"stage {self.name}: key", self.key, "only an order-sensitive stage has a key"
            )
        if self.order is Order.SEQUENCER:
            if not self.order_by:
                raise ConfigError(
                    f"stage {self.name}: order_by", self.order_by, "a sequencer names its order"
                )
            missing = [c for c in self.order_by if c not in self.schema.names]
            if missing:
                raise ConfigError(
                    f"stage {self.name}: order_by", missing, "must be columns of its schema"
                )
        elif self.order_by:
            raise ConfigError(
                f"stage {self.name}: order_by", self.order_by, "only a sequencer has order_by"
            )
        object.__setattr__(self, "histograms", tuple(self.histograms))  # a list given: frozen
        self._check_histograms()

    def _check_histograms(self) -> None:
        """Each declared histogram names a numeric column of the schema, once, with bins and
        a range that make sense."""
        seen: set[str] = set()
        for histogram in self.histograms:
            if not isinstance(histogram, Histogram):
                raise ConfigError(
                    f"stage {self.name}: histograms", histogram, "must be Histogram objects"
                )
            where = f"stage {self.name}: histogram of {histogram.column!r}"
            if histogram.column not in self.schema.names:
                raise ConfigError(where, histogram.column, "must be a column of its schema")
            kind = self.schema.field(histogram.column).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise ConfigError(where, str(kind), "the column must be numeric (integer or float)")
            if histogram.column in seen:
                raise ConfigError(where, histogram.column, "one histogram per column")
            seen.add(histogram.column)
            bins = histogram.bins
            if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or bins <= 0:
                raise ConfigError(f"{where}: bins", bins, "must be an integer above 0")
            if bins > MAX_HISTOGRAM_BINS:
                raise ConfigError(f"{where}: bins", bins, f"at most {MAX_HISTOGRAM_BINS:,}")
            low, high = histogram.low, histogram.high
            if not all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                for v in (low, high)
            ):
                raise ConfigError(f"{where}: low, high", (low, high), "must be finite numbers")
            if not low < high:
                raise ConfigError(f"{where}: low, high", (low, high), "low must be below high")


def _unsigned(kind: pa.DataType) -> bool:
    """An unsigned integer type, at any depth (a list of uint16 too)."""
    if pa.types.is_unsigned_integer(kind):
        return True
    return any(_unsigned(kind.field(i).type) for i in range(kind.num_fields))


def _schema(schema: pa.Schema | Sequence[tuple[str, pa.DataType]]) -> pa.Schema:
    return schema if isinstance(schema, pa.Schema) else pa.schema(list(schema))


def order_insensitive(
    *,
    schema: pa.Schema | Sequence[tuple[str, pa.DataType]],
    reads: str = EVENTS,
    name: str | None = None,
    histograms: Sequence[Histogram] = (),
) -> Callable[[Callable[[pa.Table], pa.Table]], Stage]:
    """An order-insensitive stage: ``f(table) -> table``, on any part of its input, in any
    order, at full parallelism."""

    def make(function: Callable[[pa.Table], pa.Table]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.INSENSITIVE,
            schema=_schema(schema),
            reads=reads,
            histograms=tuple(histograms),
        )

    return make


def order_sensitive(
    *,
    schema: pa.Schema | Sequence[tuple[str, pa.DataType]],
    reads: str = EVENTS,
    key: str | None = None,
    initial: Callable[[], Any] = lambda: None,
    name: str | None = None,
    histograms: Sequence[Histogram] = (),
) -> Callable[[Callable[[pa.Table, Any], tuple[pa.Table, Any]]], Stage]:
    """An order-sensitive stage: ``f(table, state) -> (table, new state)`` with the events in
    stream order (per ``key`` value when given), the state carried from call to call."""

    def make(function: Callable[[pa.Table, Any], tuple[pa.Table, Any]]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.SENSITIVE,
            schema=_schema(schema),
            reads=reads,
            key=key,
            initial=initial,
            histograms=tuple(histograms),
        )

    return make


def sequencer(
    *,
    schema: pa.Schema | Sequence[tuple[str, pa.DataType]],
    order_by: Sequence[str],
    reads: str = EVENTS,
    name: str | None = None,
    histograms: Sequence[Histogram] = (),
) -> Callable[[Callable[[pa.Table], pa.Table]], Stage]:
    """A sequencer: ``f(table) -> table`` whose output is ordered by ``order_by`` (columns of
    its output), whatever the order of its input."""

    def make(function: Callable[[pa.Table], pa.Table]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.SEQUENCER,
            schema=_schema(schema),
            reads=reads,
            order_by=tuple(order_by),
            histograms=tuple(histograms),
        )

    return make
