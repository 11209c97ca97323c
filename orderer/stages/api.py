"""What a user writes: stages over built events, each declaring its order sensitivity.

A stage is a Python function over Arrow tables, called once per piece of data (a record batch,
a micro-batch, one key's events of a micro-batch), never once per event. Three kinds after Jet's
design 015, and a fourth after Jet's aggregate operations:

- :func:`order_insensitive`: ``f(table) -> table``; its result does not depend on how the events
  are split or ordered (calibrations, gates, projections). Runs at full parallelism.
- :func:`order_sensitive`: ``f(table, state) -> (table, state)``; it sees the events in stream
  order, globally or per ``key`` (a column of its input), with its state carried from one call
  to the next (``initial()`` makes a new key's), across micro-batches and restarts (the state is
  pickled into the query's checkpoint). Implant-decay correlation per pixel, dead time per
  source, scaler increments.
- :func:`sequencer`: ``f(table) -> table`` that gives its output an order of its own,
  ``order_by`` columns of its output (a sort, a renumbering): the order-sensitive stages below
  it are ordered by those columns, not by the stream.
- :func:`aggregation`: ``f(table, accumulator) -> accumulator`` with a declared ``combine(a, b)``
  and ``finish(accumulator) -> table`` (Jet's accumulate, combine and export): a histogram, a
  sum per source. Each partition's rows are accumulated where they are, the partial
  accumulators combined on the driver with the run's running one, and the results are the
  ``finish`` of the run so far: one table, whatever the split, the micro-batches or the
  restarts. An order-insensitive stage that returns partial sums gives rows that change with
  the split (only their sums do not); an aggregation declares how they add up.

Stream order is the orderer's output order: the built events by ``event`` (the output offset of
their first fragment), which is timestamp order for every event without late fragments. A late
event comes where the orderer emitted it, flagged (``late`` > 0): once its successors were
seen, no stage can go back in time for it.

Stages read the built events (``reads="events"``, the default) or another stage's output, so
they form a graph. The built events include the barriers: each barrier fragment is a row of its
own (``barrier`` its type, ``multiplicity`` 1), which a stage that wants events only filters out
(``barrier == 0``). No stage reads an aggregation (:func:`orderer.stages.plan.plan` refuses it):
its results are the run's finished table so far, not a part of the stream. A stage may declare
:class:`Histogram` s of numeric columns of its results, or :class:`Histogram2D` s of pairs of them
(:mod:`orderer.stages.histograms`): the job fills them after each micro-batch for the live page
and from the run's whole results for its summary and report.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from orderer.errors import ConfigError
from orderer.stages.histograms import (
    MAX_HISTOGRAM_BINS,
    Histogram,
    Histogram2D,
    check_histograms,
)

__all__ = [
    "EVENTS",
    "EVENTS_ORDER",
    "MAX_HISTOGRAM_BINS",
    "Histogram",
    "Histogram2D",
    "Order",
    "Stage",
    "aggregation",
    "order_insensitive",
    "order_sensitive",
    "sequencer",
]

EVENTS = "events"
"""The name the built events are read by (``reads=EVENTS``)."""
EVENTS_ORDER = ("event",)
"""The stream order of the built events: the output offset of each event's first fragment."""

_RESERVED_PREFIX = "__evb"



class Order(enum.StrEnum):
    """A stage's relation to order (Jet's design 015), which is also its class: an aggregation
    declares how its partial results combine, so neither the split nor the order of its input
    reaches its results."""

    INSENSITIVE = "order-insensitive"
    SENSITIVE = "order-sensitive"
    SEQUENCER = "sequencer"
    AGGREGATION = "aggregation"


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One analysis stage (made by the decorators below)."""

    name: str
    """Its results land in ``OUTPUT/stages/<name>/run=<run>/``."""
    function: Callable[..., Any]
    """What the decorator was given: ``f(table)``, an order-sensitive ``f(table, state)``, or an
    aggregation's ``f(table, accumulator)`` (its accumulate)."""
    order: Order
    schema: pa.Schema
    """Of its output; what the function returns is cast to it (an error names the stage)."""
    reads: str = EVENTS
    """The built events, or another stage's name."""
    key: str | None = None
    """Order-sensitive: the column of its input whose values each get their own order and
    state (None: one global order)."""
    initial: Callable[[], Any] = field(default=lambda: None)
    """Order-sensitive: a new key's state (the global state's, without a key). Aggregation: an
    empty accumulator (each partition's first, and the run's before its first micro-batch)."""
    order_by: tuple[str, ...] = ()
    """Sequencer: the output columns that give its output's order."""
    combine: Callable[[Any, Any], Any] | None = None
    """Aggregation: two accumulators as one (of the rows of both), in either order."""
    finish: Callable[[Any], Any] | None = None
    """Aggregation: the results of an accumulator, a table (cast to the schema)."""
    histograms: tuple[Histogram | Histogram2D, ...] = ()
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
        if self.order in (Order.SENSITIVE, Order.AGGREGATION) and not callable(self.initial):
            raise ConfigError(f"stage {self.name}: initial", self.initial, "must be callable")
        self._check_combination()
        if self.order is not Order.SENSITIVE and self.key is not None:
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

    def _check_combination(self) -> None:
        """An aggregation declares how its accumulators combine and what they finish as; no
        other stage has either."""
        declared = {"combine": self.combine, "finish": self.finish}
        if self.order is not Order.AGGREGATION:
            for part, value in declared.items():
                if value is not None:
                    raise ConfigError(
                        f"stage {self.name}: {part}", value, f"only an aggregation has {part}"
                    )
            return
        signatures = {"combine": "combine(a, b) -> accumulator", "finish": "finish(acc) -> table"}
        for part, value in declared.items():
            if not callable(value):
                raise ConfigError(
                    f"stage {self.name}: {part}", value, f"must be callable: {signatures[part]}"
                )

    def _check_histograms(self) -> None:
        """Each declared histogram names numeric columns of the schema, once, with bins and
        ranges that make sense."""
        check_histograms(self.name, self.schema, self.histograms)


def _unsigned(kind: pa.DataType) -> bool:
    """An unsigned integer type, at any depth (a list of uint16 too)."""
    if pa.types.is_unsigned_integer(kind):
        return True
    return any(_unsigned(kind.field(i).type) for i in range(kind.num_fields))


def _schema(schema: pa.Schema | Sequence[tuple[str, pa.DataType]], stage: str) -> pa.Schema:
    """A declared schema: a pyarrow.Schema, or (name, type) pairs (anything else is refused
    naming the stage)."""
    if isinstance(schema, pa.Schema):
        return schema
    try:
        return pa.schema(list(schema))
    except (TypeError, ValueError, pa.ArrowInvalid) as error:
        raise ConfigError(
            f"stage {stage}: schema",
            schema,
            f"must be a pyarrow.Schema or (name, pyarrow type) pairs ({error})",
        ) from None


def order_insensitive(
    *,
    schema: pa.Schema | Sequence[tuple[str, pa.DataType]],
    reads: str = EVENTS,
    name: str | None = None,
    histograms: Sequence[Histogram | Histogram2D] = (),
) -> Callable[[Callable[[pa.Table], pa.Table]], Stage]:
    """An order-insensitive stage: ``f(table) -> table``, on any part of its input, in any
    order, at full parallelism."""

    def make(function: Callable[[pa.Table], pa.Table]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.INSENSITIVE,
            schema=_schema(schema, name or function.__name__),
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
    histograms: Sequence[Histogram | Histogram2D] = (),
) -> Callable[[Callable[[pa.Table, Any], tuple[pa.Table, Any]]], Stage]:
    """An order-sensitive stage: ``f(table, state) -> (table, new state)`` with the events in
    stream order (per ``key`` value when given), the state carried from call to call."""

    def make(function: Callable[[pa.Table, Any], tuple[pa.Table, Any]]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.SENSITIVE,
            schema=_schema(schema, name or function.__name__),
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
    histograms: Sequence[Histogram | Histogram2D] = (),
) -> Callable[[Callable[[pa.Table], pa.Table]], Stage]:
    """A sequencer: ``f(table) -> table`` whose output is ordered by ``order_by`` (columns of
    its output), whatever the order of its input."""

    def make(function: Callable[[pa.Table], pa.Table]) -> Stage:
        return Stage(
            name=name or function.__name__,
            function=function,
            order=Order.SEQUENCER,
            schema=_schema(schema, name or function.__name__),
            reads=reads,
            order_by=tuple(order_by),
            histograms=tuple(histograms),
        )

    return make


def aggregation(
    *,
    schema: pa.Schema | Sequence[tuple[str, pa.DataType]],
    initial: Callable[[], Any] | None = None,
    combine: Callable[[Any, Any], Any] | None = None,
    finish: Callable[[Any], pa.Table] | None = None,
    reads: str = EVENTS,
    name: str | None = None,
    histograms: Sequence[Histogram | Histogram2D] = (),
) -> Callable[[Callable[[pa.Table, Any], Any]], Stage]:
    """An aggregation: ``f(table, accumulator) -> accumulator`` adds a piece of its input to an
    accumulator that ``initial()`` makes empty; ``combine(a, b)`` is the accumulator of both
    (associative and commutative: the pieces come in any grouping and order), ``finish(acc)``
    its results, a table of ``schema``. The job accumulates each partition where it is,
    combines the partial accumulators with the run's on the driver, and writes ``finish`` of
    the run so far as the stage's results, after every micro-batch. The three are required
    (left out: a ConfigError naming the stage and what is missing); the accumulator is
    pickled, into the query's checkpoint too, so it is meant to be small (a histogram's
    counts, a sum per source)."""

    def make(function: Callable[[pa.Table, Any], Any]) -> Stage:
        stage = name or function.__name__
        if initial is None:
            raise ConfigError(
                f"stage {stage}: initial", None, "an aggregation's empty accumulator: give one"
            )
        return Stage(
            name=stage,
            function=function,
            order=Order.AGGREGATION,
            schema=_schema(schema, stage),
            reads=reads,
            initial=initial,
            combine=combine,
            finish=finish,
            histograms=tuple(histograms),
        )

    return make
