"""The user's analysis stages (:mod:`orderer.stages`) run by the Spark job over one step's
events (:func:`run_plan`): what every path that runs stages goes through, the stages sink
(:mod:`orderer.spark.stages.sink`, once per micro-batch) as the order check
(:mod:`orderer.spark.stages.order_check`); and a failed stage's line found in Spark's message
(:func:`stage_failure`).

How a step runs: every stage in the plan's order reads the events or its input stage's result of
the same step. An order-insensitive stage or a sequencer is one ``mapInArrow`` over its input as
it is partitioned (full parallelism, no shuffle). An order-sensitive stage is a shuffle by its
key's hash into ``--partitions`` partitions (into one without a key), then one ``mapInArrow``
that sorts each partition by (key, stream order) and calls the stage once per key
(:func:`orderer.stages.steps.apply_sensitive`). An aggregation is one ``mapInArrow`` where its
input is that accumulates each partition's Arrow batches into one accumulator
(:func:`orderer.stages.steps.accumulate`, one call per batch) and returns it pickled; the driver
collects those few rows, combines them with the run's accumulator and finishes the result
(:func:`orderer.stages.steps.combine`, ``finish``).

:func:`run_plan` first registers the stages' own modules with cloudpickle
(:func:`register_stage_modules`): a stages file is not importable on the executors (its
directory is nowhere on their path), and whatever of it a stage's function refers to by name (a
helper function, a class) must travel by value.

State: an order-sensitive stage's state per key goes to the tasks by broadcast and comes back as
an accumulator filled by the job that writes the stage's results (one Spark job per stage and
micro-batch); the caller keeps it between steps (the sink, in the query's checkpoint).
"""

from __future__ import annotations

import pickle
import re
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from orderer.errors import StageError
from orderer.stages.api import EVENTS, Order
from orderer.stages.plan import Plan, StagePlan
from orderer.stages.steps import (
    GLOBAL,
    accumulate,
    apply,
    apply_sensitive,
    combine,
    finish,
    initial,
)

__all__ = [
    "register_stage_modules",
    "run_plan",
    "spark_schema",
    "stage_failure",
    "stage_job_group",
]


_STAGE_ERROR = re.compile(r"StageError: (stage .*)")
_DRIVER_STAGE_ERROR = re.compile(r"^stage \S+ failed.*")


def stage_failure(text: str) -> str | None:
    """The StageError line in a failed query's or job's message (Spark wraps the executor's
    Python traceback in its own), or the StageError's own message (an aggregation's combine or
    finish fails on the driver, where nothing wraps it), or None when a stage did not fail."""
    found = _STAGE_ERROR.findall(text)
    if found:
        return str(found[-1]).strip()
    alone = _DRIVER_STAGE_ERROR.match(text)
    return alone.group(0).strip() if alone else None


def register_stage_modules(plan: Plan) -> None:
    """The stages' own modules travel by value to the executors: they are files the executors
    do not have (:mod:`orderer.stages.load`), so what a stage's function refers to by name in
    its module (a helper function, a class) could not be imported there. Only the modules of
    the stages' own functions: an aggregation's ``combine`` may well be a library's
    (``numpy.add``), which the executors import. Registering a module again changes
    nothing."""
    from pyspark import cloudpickle

    for step in plan.stages:  # the module of a stage's own function: a stages file
        name = getattr(step.stage.function, "__module__", None)
        module = sys.modules.get(name) if name else None
        if module is not None and name is not None and not name.startswith("orderer."):
            cloudpickle.register_pickle_by_value(module)


def run_plan(
    spark: Any,
    plan: Plan,
    events: Any,
    partitions: int,
    states: dict[str, dict[Hashable, Any]],
    kept: list[Any],
    write: Callable[[StagePlan, Any], None] | None = None,
) -> dict[str, Any]:
    """Every stage of ``plan`` over one step's ``events``, in the plan's order, each result
    persisted (added to ``kept``, for the caller to unpersist: each stage runs once) and
    handed to ``write``, which runs a Spark action over it at least for an order-sensitive
    stage (None: each is counted); an order-sensitive stage starts from ``states``
    (by stage, by key) and leaves its states there. Returns the results by stage.

    The Spark jobs of each stage are in the job group ``evb-stage-<name>``, described by the
    stage's name and class: what the Spark UI shows, and what :func:`stage_job_group` finds.
    An order-sensitive stage's new states come back through an accumulator filled by the same
    job that writes its results: one Spark job per stage and micro-batch. An aggregation's
    accumulator is in ``states`` too (under its one key), and its result is the finished table
    of the run so far, a small DataFrame made on the driver.

    The stages' modules are registered with cloudpickle first
    (:func:`register_stage_modules`), whoever calls."""
    register_stage_modules(plan)
    results: dict[str, Any] = {EVENTS: events}
    context = spark.sparkContext
    for step in plan.stages:
        context.setJobGroup(
            stage_job_group(step.stage.name),
            f"evb stage {step.stage.name} ({step.stage.order.value})",
        )
        source = results[step.stage.reads]
        carried = None
        if step.stage.order is Order.SENSITIVE:
            before = states.get(step.stage.name, {})
            known = context.broadcast(before)
            carried = context.accumulator({}, _States())
            result = _sensitive(step, source, partitions, known, carried).persist()
        elif step.stage.order is Order.AGGREGATION:
            states[step.stage.name] = {
                GLOBAL: _aggregate(step, source, states.get(step.stage.name, {}))
            }
            finished = finish(step, states[step.stage.name][GLOBAL])
            schema = spark_schema(step.stage.schema)
            result = spark.createDataFrame(finished, schema=schema).persist()
        else:
            result = _insensitive(step, source).persist()
        kept.append(result)
        results[step.stage.name] = result
        if write is not None:
            write(step, result)
        else:
            result.count()  # computed, and its states taken, here
        if carried is not None:
            states[step.stage.name] = {**before, **carried.value}
            known.unpersist()
    return results


class _States:
    """Spark's accumulator of an order-sensitive stage's new states: a dict by key, each task
    adding those of the keys it called (a task run again adds the same ones)."""

    def zero(self, value: dict[Hashable, Any]) -> dict[Hashable, Any]:
        return {}

    def addInPlace(  # Spark's AccumulatorParam names it so
        self, into: dict[Hashable, Any], more: dict[Hashable, Any]
    ) -> dict[Hashable, Any]:
        into.update(more)
        return into


def stage_job_group(stage: str) -> str:
    """The Spark job group of a stage's jobs (:func:`run_plan`)."""
    return f"evb-stage-{stage}"


def _insensitive(step: StagePlan, source: Any) -> Any:
    """An order-insensitive stage or a sequencer: one mapInArrow where its input is."""
    return source.mapInArrow(_insensitive_task(step), spark_schema(step.stage.schema))


def _aggregate(step: StagePlan, source: Any, running: Mapping[Hashable, Any]) -> Any:
    """An aggregation over one micro-batch: each partition of ``source`` accumulated where it
    is (one pickled accumulator a partition that has rows), those collected and combined on
    the driver with the run's accumulator before the batch (``running``'s, else a new one);
    returns the run's accumulator through this batch."""
    partials = source.mapInArrow(_accumulate_task(step), _PARTIAL).collect()
    total = running[GLOBAL] if GLOBAL in running else initial(step)
    for row in partials:
        total = combine(step, total, pickle.loads(row[0]))
    return total


def _sensitive(step: StagePlan, source: Any, partitions: int, known: Any, carried: Any) -> Any:
    """An order-sensitive stage: shuffled by key (to one partition without), then sorted and
    called per key in each partition, from the states ``known`` (a broadcast), the new states
    added to ``carried``."""
    stage = step.stage
    shuffled = (
        source.repartition(1) if stage.key is None else source.repartition(partitions, stage.key)
    )
    return shuffled.mapInArrow(_sensitive_task(step, known, carried), spark_schema(stage.schema))


# ---------------------------------------------------------------- on the executors


def _insensitive_task(step: StagePlan) -> Any:
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield from apply(step, pa.Table.from_batches([batch])).to_batches()

    return task


_PARTIAL = "accumulator binary"
"""The rows of an aggregation's partial results: one pickled accumulator each."""


def _accumulate_task(step: StagePlan) -> Any:
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        accumulator: Any = None
        touched = False
        for batch in batches:
            if batch.num_rows:
                if not touched:
                    accumulator, touched = initial(step), True
                accumulator = accumulate(step, pa.Table.from_batches([batch]), accumulator)
        if touched:
            pickled = pa.array([_pickled(step, accumulator)], pa.binary())
            yield pa.record_batch([pickled], names=["accumulator"])

    return task


def _pickled(step: StagePlan, accumulator: Any) -> bytes:
    """An accumulator on its way to the driver (a failure names the stage)."""
    try:
        return pickle.dumps(accumulator, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # whatever the user's object raises
        raise StageError(
            step.stage.name,
            f"its accumulator does not pickle ({type(error).__name__}: {error}): keep it to"
            " plain values (numbers, numpy arrays, dicts, tuples, pyarrow tables)",
            event=None,
            where=None,
        ) from None


def _sensitive_task(step: StagePlan, known: Any, carried: Any) -> Any:
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pieces = [batch for batch in batches if batch.num_rows]
        if not pieces:
            return
        out, states = apply_sensitive(step, pa.Table.from_batches(pieces), known.value)
        yield from out.to_batches()
        if states:
            carried.add(states)

    return task


def spark_schema(schema: pa.Schema) -> Any:
    """A stage's declared schema as Spark's: what its results are made and read with."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
