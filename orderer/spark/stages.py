"""The user's analysis stages (:mod:`orderer.stages`) run by the Spark job, once per micro-batch,
exactly once across restarts.

How a step runs (:class:`StagesSink`, the ``foreachBatch`` function of a streamed run with
``--stages``; the batch job calls it once, as batch 0): the micro-batch's events are written as
the job writes them, then every stage in the plan's order reads the events or its input stage's
result of the same micro-batch. An order-insensitive stage or a sequencer is one
``mapInArrow`` over its input as it is partitioned (full parallelism, no shuffle). An
order-sensitive stage is a shuffle by its key's hash into ``--partitions`` partitions (into one
without a key), then one ``mapInArrow`` that sorts each partition by (key, stream order) and
calls the stage once per key (:func:`orderer.stages.steps.apply_sensitive`).

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
micro-batch.

Results: ``OUTPUT/stages/<stage>/run=<run>/batch=<batch>/`` (Parquet), written over on a rerun
of the batch. The events of a streamed run with stages are written by this sink too (a query has
one sink), into the run's directory as the file sink leaves them, one set of files per batch
(``part-b<batch>-...``), replaced on a rerun of the batch.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from orderer.job_config import OutputFormat
from orderer.spark import files
from orderer.spark.files import Directory
from orderer.spark.nscldaq import NscldaqSink
from orderer.spark.writer import events_writer
from orderer.stages.api import EVENTS, Order
from orderer.stages.plan import Plan, StagePlan
from orderer.stages.steps import apply, apply_sensitive

__all__ = [
    "BatchObserver",
    "StagesSink",
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


def stage_failure(text: str) -> str | None:
    """The StageError line in a failed query's or job's message (Spark wraps the executor's
    Python traceback in its own), or None when a stage did not fail."""
    found = _STAGE_ERROR.findall(text)
    return found[-1].strip() if found else None


class BatchObserver(Protocol):
    """What is told of each batch the sink writes: ``results`` by stage, the events under
    :data:`~orderer.stages.api.EVENTS`, each persisted until the call returns. Called again
    with the same batch after a restart when the batch was not marked done."""

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
    _registered: bool = field(default=False, init=False)

    def __call__(self, events: Any, batch_id: int) -> None:
        self._register_modules()
        state_files = None if self.state_directory is None else Directory(
            self.spark, self.state_directory
        )
        manifest = f"{_MANIFESTS}/{batch_id:012d}.json"
        if state_files is not None and state_files.exists(manifest):
            return  # written whole before a restart: Spark calls again, nothing is done twice
        states = self._states_before(state_files, batch_id)
        events = events.persist()
        kept: list[Any] = [events]
        try:
            self._write_events(events, batch_id)

            def write(step: StagePlan, result: Any) -> None:
                directory = stage_directory(self.output, step.stage.name, self.run)
                result.write.mode("overwrite").parquet(f"{directory}/batch={batch_id:012d}")

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

    def _register_modules(self) -> None:
        """The stages' own modules travel by value to the executors (they are files the
        executors do not have: :mod:`orderer.stages.load`)."""
        if self._registered:
            return
        from pyspark import cloudpickle

        for step in self.plan.stages:
            name = getattr(step.stage.function, "__module__", None)
            module = sys.modules.get(name) if name else None
            if module is not None and name is not None and not name.startswith("orderer."):
                cloudpickle.register_pickle_by_value(module)
        self._registered = True


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
    job that writes its results: one Spark job per stage and micro-batch."""
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


def _sensitive(step: StagePlan, source: Any, partitions: int, known: Any, carried: Any) -> Any:
    """An order-sensitive stage: shuffled by key (to one partition without), then sorted and
    called per key in each partition, from the states ``known`` (a broadcast), the new states
    added to ``carried``."""
    stage = step.stage
    shuffled = (
        source.repartition(1) if stage.key is None else source.repartition(partitions, stage.key)
    )
    return shuffled.mapInArrow(
        _sensitive_task(step, known, carried), _spark_schema(stage.schema)
    )


# ---------------------------------------------------------------- on the executors


def _insensitive_task(step: StagePlan) -> Any:
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield from apply(step, pa.Table.from_batches([batch])).to_batches()

    return task


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
