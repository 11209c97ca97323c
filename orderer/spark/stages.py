"""The user's analysis stages (:mod:`orderer.stages`) run by the Spark job, once per micro-batch,
exactly once across restarts.

How a step runs (:class:`StagesSink`, the ``foreachBatch`` function of a streamed run with
``--stages``; the batch job calls it once, as batch 0): the micro-batch's events are written as
the job writes them, then every stage in the plan's order reads the events or its input stage's
result of the same micro-batch. An order-insensitive stage or a sequencer is one
``mapInArrow`` over its input as it is partitioned (full parallelism, no shuffle). An
order-sensitive stage is a shuffle by its key's hash into ``--partitions`` partitions (into one
without a key), then one ``mapInArrow`` that sorts each partition by (key, stream order) and
calls the stage once per key (:func:`orderer.stages.steps.apply_sensitive`). An aggregation is
one ``mapInArrow`` where its input is that accumulates each partition's Arrow batches into one
accumulator (:func:`orderer.stages.steps.accumulate`, one call per batch) and returns it
pickled; the driver collects those few rows, combines them with the run's accumulator and
finishes the result (:func:`orderer.stages.steps.combine`, ``finish``).

Every path that runs stages goes through :func:`run_plan`, which first registers the stages'
own modules with cloudpickle (:func:`register_stage_modules`): a stages file is not importable
on the executors (its directory is nowhere on their path), and whatever of it a stage's
function refers to by name (a helper function, a class) must travel by value.

State: an order-sensitive stage's state per key goes to the tasks by broadcast and comes back as
an accumulator filled by the job that writes the stage's results (one Spark job per stage and
micro-batch), and the driver writes all of it into the query's checkpoint
(``CHECKPOINT/evb-stages/state-<batch>.json``) after the batch's results. A batch is done once
its manifest is written, last; Spark calls ``foreachBatch`` again with the same batch after a
restart, and the sink then skips a batch with a manifest, or writes one without again from the
state of the batch before it: the results of every batch are written once, whatever was killed
when. An exception in a stage stops the query before the manifest, so the batch is not
committed, and the rerun starts from it. Why the driver and not Spark's state store: a query has
one sink, and the stages have a result each; Spark's stateful operators
(``applyInPandasWithState``) live inside a query's plan, before its one sink. State is meant to
be small (a value per detector pixel, source or scaler): it travels through the driver every
micro-batch. An aggregation's running accumulator is kept the same way, as the state of its one
key (:data:`~orderer.stages.steps.GLOBAL`): a batch run again after a restart combines its
partial accumulators with the accumulator of the batch before it, so no batch counts twice.

Results: ``OUTPUT/stages/<stage>/run=<run>/batch=<batch>/`` (Parquet), written over on a rerun
of the batch. An aggregation's results are the finished table of the run so far: batch ``b``
writes its ``batch=<b>/`` and then removes the one of the batch before, so that the directory
holds one table, the run's through its latest batch (:meth:`StagesSink.write_result`); a
restart between the two leaves both until the batch is run again, before it is marked done.
The events of a streamed run with stages are written by this sink too (a query has one sink),
into the run's directory as the file sink leaves them, one set of files per batch
(``part-b<batch>-...``), replaced on a rerun of the batch.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from orderer.errors import StageError
from orderer.job_config import OutputFormat
from orderer.spark import files
from orderer.spark.files import Directory
from orderer.spark.nscldaq import NscldaqSink
from orderer.spark.writer import events_writer
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
    "BatchObserver",
    "StagesSink",
    "register_stage_modules",
    "remove_stage_results",
    "run_plan",
    "stage_directory",
    "stage_failure",
    "stage_job_group",
    "stage_results",
]

_MANIFESTS = "_batches"


def stage_directory(output: str, stage: str, run: str) -> str:
    """Where a stage's results of one run go."""
    return f"{output}/stages/{stage}/run={run}"


def remove_stage_results(spark: Any, plan: Plan, output: str, run: str) -> None:
    """What an earlier job of the same run left of the stages (a new run replaces it)."""
    for step in plan.stages:
        files.remove(spark, stage_directory(output, step.stage.name, run))


def stage_results(spark: Any, plan: Plan, output: str, run: str) -> dict[str, dict[str, Any]]:
    """Per stage of a finished run: where its results are and how many rows they hold (the
    run's summary)."""
    out: dict[str, dict[str, Any]] = {}
    for step in plan.stages:
        directory = stage_directory(output, step.stage.name, run)
        rows = spark.read.parquet(directory).count() if files.exists(spark, directory) else 0
        out[step.stage.name] = {"class": step.stage.order.value, "rows": rows, "path": directory}
    return out


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


class BatchObserver(Protocol):
    """What is told of each batch the sink writes: first its events, which it may observe
    (:meth:`watch`: the sink writes and stages what it returns); once the events are written,
    ``results`` by stage, the events under :data:`~orderer.stages.api.EVENTS`, each persisted
    until the call returns. Called again with the same batch after a restart when the batch was
    not marked done. An aggregation's entry is its finished table of the run so far, not the
    batch's part of it (to be shown, not added up)."""

    def watch(self, batch_id: int, events: Any) -> Any: ...

    def __call__(self, batch_id: int, results: Mapping[str, Any]) -> None: ...


@dataclass
class StagesSink:
    """Writes each micro-batch's events and runs the stages over them, once (the module
    docstring says how)."""

    spark: Any
    plan: Plan
    output: str
    run: str
    events: str
    """The run's events directory."""
    format: OutputFormat
    partitions: int
    state_directory: str | None
    """Where the states and the manifests live (in the checkpoint); None: a batch job, whose
    one step starts from nothing and keeps nothing."""
    glom_source_id: int = 0
    live: BatchObserver | None = None
    """Told of each batch once its results are written, before the batch is marked done
    (``--ui``'s running totals, :mod:`orderer.spark.live`)."""

    def __call__(self, events: Any, batch_id: int) -> None:
        state_files = None if self.state_directory is None else Directory(
            self.spark, self.state_directory
        )
        manifest = f"{_MANIFESTS}/{batch_id:012d}.json"
        if state_files is not None and state_files.exists(manifest):
            return  # written whole before a restart: Spark calls again, nothing is done twice
        states = self._states_before(state_files, batch_id)
        if self.live is not None:
            events = self.live.watch(batch_id, events)
        kept: list[Any] = []
        if self.plan.stages or self.format is OutputFormat.NSCLDAQ:  # read more than once
            events = events.persist()
            kept.append(events)
        try:
            self._write_events(events, batch_id)

            def write(step: StagePlan, result: Any) -> None:
                self.write_result(step, result, batch_id)

            results = run_plan(
                self.spark, self.plan, events, self.partitions, states, kept, write
            )
            if self.live is not None:
                self.live(batch_id, results)
        finally:
            for frame in kept:
                frame.unpersist()
        if state_files is not None:
            state_files.write(f"state-{batch_id:012d}.json", [_encode(states)])
            state_files.write(manifest, [json.dumps({"batch": batch_id}).encode()])
            # what a later batch reads is this batch's states; a rerun of this one (were it
            # not marked done after all) the batch before's: older ones are read no more
            oldest = f"state-{max(batch_id - 1, 0):012d}.json"
            for name in state_files.names():
                if name.startswith("state-") and name < oldest:
                    state_files.remove(name)

    # ------------------------------------------------------------------ events and state

    def _write_events(self, events: Any, batch_id: int) -> None:
        """The batch's events, in the run's directory as the file sink leaves them (files side
        by side, so that ``OUTPUT/events`` reads as one table whichever job wrote a run), each
        named after its batch: written aside, then moved in, over what an interrupted attempt
        at the same batch left."""
        if self.format is OutputFormat.NSCLDAQ:
            NscldaqSink(self.spark, self.events, self.glom_source_id)(events, batch_id)
            return
        if self.state_directory is None:  # a batch job: the run's directory is its alone
            events_writer(events.write, self.format).mode("overwrite").save(self.events)
            return
        aside = f"_batch-{batch_id:012d}"  # hidden from readers by its underscore
        events_writer(events.write, self.format).mode("overwrite").save(f"{self.events}/{aside}")
        directory = Directory(self.spark, self.events)
        prefix = f"part-b{batch_id:012d}-"
        for name in directory.names():
            if name.startswith(prefix):
                directory.remove(name)
        for name in directory.names(aside):
            if name.startswith("part-"):
                directory.rename(f"{aside}/{name}", prefix + name.removeprefix("part-"))
        files.remove(self.spark, f"{self.events}/{aside}")

    def _states_before(
        self, state_files: Directory | None, batch_id: int
    ) -> dict[str, dict[Hashable, Any]]:
        """The states after the last batch written whole before ``batch_id`` (none: nothing)."""
        if state_files is None:
            return {}
        done = sorted(
            int(name.removesuffix(".json"))
            for name in state_files.names(_MANIFESTS)
            if name.endswith(".json") and not name.startswith(".")
        )
        earlier = [batch for batch in done if batch < batch_id]
        if not earlier:
            return {}
        return _decode(state_files.read_text(f"state-{earlier[-1]:012d}.json"))

    def write_result(self, step: StagePlan, result: Any, batch_id: int) -> None:
        """A stage's results of micro-batch ``batch_id`` (written over what an interrupted
        attempt at it left). An aggregation's are the finished table of the run through this
        batch: the tables of other batches (the batch before's, superseded) are removed once it
        is written, so that its directory holds one table."""
        directory = stage_directory(self.output, step.stage.name, self.run)
        mine = f"batch={batch_id:012d}"
        result.write.mode("overwrite").parquet(f"{directory}/{mine}")
        if step.stage.order is Order.AGGREGATION:
            for name in Directory(self.spark, directory).names():
                if name.startswith("batch=") and name != mine:
                    files.remove(self.spark, f"{directory}/{name}")


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
            schema = _spark_schema(step.stage.schema)
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
    return source.mapInArrow(_insensitive_task(step), _spark_schema(step.stage.schema))


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
    return shuffled.mapInArrow(_sensitive_task(step, known, carried), _spark_schema(stage.schema))


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


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _encode(states: Mapping[str, Mapping[Hashable, Any]]) -> bytes:
    """The states as the checkpoint keeps them: JSON around a pickle, readable as text."""
    data = base64.b64encode(pickle.dumps({k: dict(v) for k, v in states.items()})).decode()
    return json.dumps({"format": "pickle+base64", "states": data}).encode()


def _decode(text: str) -> dict[str, dict[Hashable, Any]]:
    record = json.loads(text)
    states: dict[str, dict[Hashable, Any]] = pickle.loads(base64.b64decode(record["states"]))
    return states
