"""The sink of a run with stages (:class:`StagesSink`, the ``foreachBatch`` function of a
streamed run with ``--stages``; the batch job calls it once, as batch 0): each micro-batch's
events written as the job writes them, then the user's analysis stages (:mod:`orderer.stages`)
run over them (:func:`~orderer.spark.stages.runner.run_plan`) and their results written, once
per micro-batch, exactly once across restarts; and where a run's stage results live
(:func:`stage_directory`).

State: an order-sensitive stage's states by key come back to the driver from each micro-batch
(:mod:`orderer.spark.stages.runner` says how), and the driver writes all of it into the query's
checkpoint (``CHECKPOINT/evb-stages/state-<batch>.json``) after the batch's results. A batch is
done once its manifest is written, last; Spark calls ``foreachBatch`` again with the same batch
after a restart, and the sink then skips a batch with a manifest, or writes one without again
from the state of the batch before it: the results of every batch are written once, whatever
was killed when. An exception in a stage stops the query before the manifest, so the batch is
not committed, and the rerun starts from it. Why the driver and not Spark's state store: a query
has one sink, and the stages have a result each; Spark's stateful operators
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
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from orderer.job_config import OutputFormat
from orderer.spark.output import files
from orderer.spark.output.files import Directory
from orderer.spark.output.nscldaq import NscldaqSink
from orderer.spark.output.writer import events_writer
from orderer.spark.stages.runner import run_plan
from orderer.stages.api import Order
from orderer.stages.plan import Plan, StagePlan

__all__ = [
    "BatchObserver",
    "StagesSink",
    "remove_stage_results",
    "stage_directory",
]


_MANIFESTS = "_batches"


def stage_directory(output: str, stage: str, run: str) -> str:
    """Where a stage's results of one run go."""
    return f"{output}/stages/{stage}/run={run}"


def remove_stage_results(spark: Any, plan: Plan, output: str, run: str) -> None:
    """What an earlier job of the same run left of the stages (a new run replaces it)."""
    for step in plan.stages:
        files.remove(spark, stage_directory(output, step.stage.name, run))


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


def _encode(states: Mapping[str, Mapping[Hashable, Any]]) -> bytes:
    """The states as the checkpoint keeps them: JSON around a pickle, readable as text."""
    data = base64.b64encode(pickle.dumps({k: dict(v) for k, v in states.items()})).decode()
    return json.dumps({"format": "pickle+base64", "states": data}).encode()


def _decode(text: str) -> dict[str, dict[Hashable, Any]]:
    record = json.loads(text)
    states: dict[str, dict[Hashable, Any]] = pickle.loads(base64.b64decode(record["states"]))
    return states
