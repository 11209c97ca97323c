"""One step of a stage over Arrow data: what a Spark task does with its partition, and what a
run without Spark does with the whole input.

Why apart from Spark: the stage's contract (its output cast to its schema, an order-sensitive
stage's events sorted and split by key, its state carried, a failure named) is the same
wherever it runs, and is tested here without a JVM. A step of an order-sensitive stage is given
the states of the keys it may meet and returns every state it touched; the caller keeps them
(:mod:`orderer.spark.stages.sink` in the query's checkpoint). An aggregation's steps are three:
each piece of its input added to an accumulator (:func:`accumulate`, where the piece is), the
accumulators combined (:func:`combine`, on the driver) and the result finished
(:func:`finish`); the caller keeps the run's accumulator as it keeps states.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.errors import StageError
from orderer.stages.api import Order, Stage
from orderer.stages.plan import StagePlan

__all__ = [
    "GLOBAL",
    "accumulate",
    "apply",
    "apply_sensitive",
    "combine",
    "conform",
    "finish",
    "initial",
]

GLOBAL: Hashable = None
"""The state key of an order-sensitive stage without a key, and of an aggregation's
accumulator."""


def conform(stage: Stage, result: Any) -> pa.Table:
    """What the stage's function returned, as a table of its schema (an error names the stage
    and the columns that do not fit)."""
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if not isinstance(result, pa.Table):
        raise StageError(
            stage.name,
            f"returned {type(result).__name__}, not a pyarrow Table or RecordBatch",
            event=None,
            where=None,
        )
    missing = [name for name in stage.schema.names if name not in result.column_names]
    if missing:
        raise StageError(
            stage.name,
            f"its result lacks the column(s) {missing} of its schema",
            event=None,
            where=None,
        )
    try:
        return result.select(stage.schema.names).cast(stage.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise StageError(
            stage.name, f"its result does not fit its schema: {error}", event=None, where=None
        ) from None


def apply(step: StagePlan, table: pa.Table) -> pa.Table:
    """An order-insensitive stage or a sequencer over any part of its input."""
    stage = step.stage
    assert stage.order in (Order.INSENSITIVE, Order.SEQUENCER)
    if table.num_rows == 0:
        return stage.schema.empty_table()
    return conform(stage, _call(step, table, stage.function, table))


def apply_sensitive(
    step: StagePlan, table: pa.Table, states: Mapping[Hashable, Any]
) -> tuple[pa.Table, dict[Hashable, Any]]:
    """An order-sensitive stage over its events of one step: sorted by (key, stream order),
    one call per key with that key's state (``states``, else ``initial()``); returns the
    output, in that order, and the new state of every key it called."""
    stage = step.stage
    assert stage.order is Order.SENSITIVE
    if table.num_rows == 0:
        return stage.schema.empty_table(), {}
    table = table.take(pc.sort_indices(table, [(c, "ascending") for c in step.sort_by]))
    outputs: list[pa.Table] = []
    new: dict[Hashable, Any] = {}
    for key, part in _by_key(stage, table):
        state = states[key] if key in states else stage.initial()
        result = _call(step, part, stage.function, part, state)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise StageError(
                stage.name,
                "an order-sensitive stage returns (table, new state)",
                event=_first_event(step, part),
                where=None,
            )
        out, new[key] = result
        outputs.append(conform(stage, out))
    return pa.concat_tables(outputs), new


def accumulate(step: StagePlan, table: pa.Table, accumulator: Any) -> Any:
    """An aggregation's ``accumulator`` with the rows of ``table`` added: one call of the
    stage's function (none for no rows)."""
    stage = step.stage
    assert stage.order is Order.AGGREGATION
    if table.num_rows == 0:
        return accumulator
    return _call(step, table, stage.function, table, accumulator)


def initial(step: StagePlan) -> Any:
    """A new, empty accumulator (or state) of the stage: its ``initial()``."""
    return _call(step, None, step.stage.initial)


def combine(step: StagePlan, first: Any, second: Any) -> Any:
    """An aggregation's two accumulators as one."""
    assert step.stage.combine is not None
    return _call(step, None, step.stage.combine, first, second)


def finish(step: StagePlan, accumulator: Any) -> pa.Table:
    """An aggregation's results of ``accumulator``: its ``finish``, as a table of its schema."""
    assert step.stage.finish is not None
    return conform(step.stage, _call(step, None, step.stage.finish, accumulator))


def _by_key(stage: Stage, table: pa.Table) -> list[tuple[Hashable, pa.Table]]:
    """The table (sorted by the stage's key first) cut into one slice per key value."""
    if stage.key is None:
        return [(GLOBAL, table)]
    column = table.column(stage.key).combine_chunks()
    if column.null_count:
        raise StageError(
            stage.name, f"its key column {stage.key} holds nulls", event=None, where=None
        )
    values = column.to_numpy(zero_copy_only=False)
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(values)]
    return [
        (_plain(values[start]), table.slice(start, end - start))
        for start, end in itertools.pairwise(bounds)
    ]


def _plain(value: Any) -> Hashable:
    """A key as a Python value (numpy scalars pickle and compare as their Python values)."""
    return value.item() if isinstance(value, np.generic) else value


def _call(step: StagePlan, part: pa.Table | None, function: Any, *args: Any) -> Any:
    """The user's function; what it raises becomes a :class:`StageError` naming the stage, the
    first event of ``part`` (None: no events, an aggregation's combine or finish) and the
    user's own line."""
    try:
        return function(*args)
    except StageError:
        raise
    except Exception as error:  # the user's code: anything
        raise StageError(
            step.stage.name,
            f"{type(error).__name__}: {error}",
            event=_first_event(step, part),
            where=_user_line(function, error),
        ) from error


def _first_event(step: StagePlan, part: pa.Table | None) -> int | None:
    """The first value of the input's first order column (the event offset, for events)."""
    if part is None or not part.num_rows:
        return None
    if not step.input_order or step.input_order[0] not in part.column_names:
        return None
    value = part.column(step.input_order[0])[0].as_py()
    return int(value) if isinstance(value, int) else None


def _user_line(function: Any, error: BaseException) -> str | None:
    """``file:line`` of the deepest frame in the file that defines ``function``."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    frames = traceback.extract_tb(error.__traceback__)
    mine = [frame for frame in frames if frame.filename == code.co_filename]
    if not mine:
        return None
    frame = mine[-1]
    where = f"{frame.filename}:{frame.lineno}"
    return f"{where}: {frame.line}" if frame.line else where
