"""Benchmark of the analysis stages' cost (issue 30, item 6): an order-sensitive keyed stage
against the same user function run as an order-insensitive map (Jet's trade-off, measured), and
against plain Spark doing the same correlation with ``applyInPandasWithState`` and a sort inside
each group, in one run, one SparkSession (``local[2]``), on one data set.

Not a pytest test: run it as ``python tests/bench/bench_stages.py [--fragments N]`` (part of
``make bench``).

0. the data (not timed): a synthetic run with physics (:mod:`orderer.replay.physics`, its
   defaults: four sources, 200 implants/s over 32 x 32 pixels, a 20 ms half-life), its fragments
   in timestamp order (:func:`tests.physics_runs.ordered_fragments`) built into events
   (:func:`orderer.building.glom.build_events`, dt 100 ticks), written once as Parquet files,
   ``--partitions`` files a micro-batch (so that each micro-batch is that many tasks), the
   files' modification times rising with their micro-batch (a file stream takes them in that
   order: stream order across micro-batches);
1. every variant is a streaming query over those files (Spark's Parquet file stream,
   ``maxFilesPerTrigger`` = ``--partitions``: the same ``--micro-batches`` micro-batches, the
   same rows in each); the user function is the same in all three, ``decays`` of
   ``examples/implant_decay.py`` (each decay matched to the latest implant in its pixel within
   the window), fed by the same ``pixel_hits`` (its sequencer: the events' implants and decays,
   one row each):

   (a) evb, order-sensitive keyed stage: the example's plan (``pixel_hits`` then ``decays``,
       keyed by ``pixel``) run by :func:`orderer.spark.stages.runner.run_plan` in ``foreachBatch``,
       as the job's :class:`~orderer.spark.stages.sink.StagesSink` runs it: a shuffle by pixel into
       ``--partitions`` partitions, a sort by (pixel, offset) in each, one call per pixel, the
       pixels' states carried from one micro-batch to the next (broadcast to the tasks,
       collected back, pickled into a file of the query's checkpoint every micro-batch);
   (b) the same function declared order-insensitive: the plan's second stage an
       ``order_insensitive`` one, so ``run_plan`` runs it as one ``mapInArrow`` where
       ``pixel_hits``'s rows are (no shuffle, no sort, full parallelism); within each Arrow
       batch it gets, it calls ``decays`` once per pixel over that pixel's rows in the order
       they came, from a new state (nothing is carried: an order-insensitive stage has no
       state). The same per-pixel calls as (a), less what keeping order costs: Jet's
       trade-off. Its answers are wrong wherever a decay's implant came in another batch, task
       or micro-batch, or a pixel's rows came out of order (the file stream hands each task
       its rows in stream order, so here only the former); how many of its rows differ from
       (a)'s is printed;
   (c) plain Spark: the same ``pixel_hits`` as a ``mapInArrow`` of the stream, then
       ``groupBy("pixel").applyInPandasWithState(...)``: the function sorts its group's rows by
       ``offset`` (Spark hands them over in no set order), calls ``decays`` with the pixel's
       state, and keeps the new state in Spark's state store (``--partitions`` shuffle
       partitions, the store checkpointed every micro-batch);

   each writes its decays, and only those, as Parquet in ``foreachBatch``
   (``OUT/batch=N/``), so that the writes are the same work in all three;
2. after a warm-up (every variant once over the first two micro-batches' files, so that a
   state is carried once too; not counted), ``--rounds`` rounds, each variant once a round
   (the odd rounds in the reverse order), each with a fresh checkpoint and output; a figure
   is timed from the start of the query's first micro-batch to the last one committed
   (:func:`tests.bench.bench_spark.run_query`: the reading of the files, ``pixel_hits``, the
   decays, their writing and the state's keeping, per micro-batch; the query's start, before
   its first micro-batch, printed apart), and the CPU seconds this process tree (driver, JVM,
   Python workers) spent meanwhile, read from ``/proc``: on a shared host other work stretches
   the wall clock more than it does those (the cores the rest of the host kept busy are
   printed beside them); medians over the rounds;
3. the figures: fragments/s and events/s of each (the events' fragments, all of them, over
   the query's time; the stage itself sees the implants and decays only, their share printed),
   seconds per micro-batch, fragments per CPU second, the ratios (a)/(b) and (a)/(c) by both
   clocks, and the answers: (a) == (c), both against a sequential run of the stages over the
   whole run without Spark (the oracle), the rows of (b) that differ from (a)'s, and the
   half-life (a)'s decays give.

Why streaming and not one static DataFrame: the cost the issue asks about is per micro-batch
(a job's stages run once per micro-batch, with the state of every key carried from one to the
next), and ``applyInPandasWithState`` only keeps state across the micro-batches of a streaming
query; a single static batch would leave both out.

``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

# As evb sets it (orderer/cli/__init__.py): this process asks an orderer over gRPC, then starts
# Spark's JVM (a fork with a preexec_fn), which gRPC's fork support can kill or hang
# (grpc/grpc#43055).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orderer.building.config import GlomConfig  # noqa: E402
from orderer.building.glom import EVENT_SCHEMA, build_events  # noqa: E402
from orderer.replay.physics import PAYLOAD_SIZE, Physics  # noqa: E402
from orderer.replay.synthetic import SyntheticRun  # noqa: E402
from orderer.stages import Stage, order_insensitive  # noqa: E402
from orderer.stages.load import load_stages  # noqa: E402
from orderer.stages.plan import Plan, plan  # noqa: E402
from orderer.stages.steps import apply, apply_sensitive  # noqa: E402
from tests.bench import bench_spark as base  # noqa: E402
from tests.bench.bench_spark_scaling import (  # noqa: E402
    _cpu_seconds,
    _descendants,
    _machine_busy,
)
from tests.physics_runs import ordered_fragments  # noqa: E402

EXAMPLE = ROOT / "examples" / "implant_decay.py"
DT = 100
"""Glom window, ticks (five times the trigger jitter: the examples' tests' value)."""
N_SOURCES = 4
VARIANTS = ("evb_keyed", "insensitive_map", "spark_state")
LABELS = {
    "evb_keyed": "(a) evb order-sensitive keyed stage",
    "insensitive_map": "(b) same function, order-insensitive map",
    "spark_state": "(c) Spark applyInPandasWithState + sort",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=1_500_000,
                        help="fragments of the synthetic run (about; its length follows)")
    parser.add_argument("--micro-batches", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2,
                        help="tasks a micro-batch (files a micro-batch, the keyed stage's "
                        "partitions, Spark's shuffle partitions)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="each variant once a round; the odd rounds in reverse order")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", type=Path, help="keep the data here (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    return parser


# ------------------------------------------------------------------------------ the data


def fragments_per_second(physics: Physics, n_sources: int) -> float:
    """The run's fragments a second, expected (the model of :mod:`orderer.replay.physics`)."""
    seen = physics.trigger_efficiency
    pixel = (physics.trigger_rate * seen + physics.implant_rate * (1 + physics.decay_efficiency)
             + physics.background_decay_rate + physics.background_rate)
    other = (physics.trigger_rate + physics.implant_rate) * seen + physics.background_rate
    return pixel + (n_sources - 2) * other + 2 / physics.scaler_period


def make_events(out: Path, fragments: int, files: int, seed: int) -> dict[str, int]:
    """The run's events as ``files`` Parquet files in stream order (equal numbers of events),
    modification times rising with the file's index; its counts."""
    physics = Physics()
    seconds = fragments / fragments_per_second(physics, N_SOURCES)
    spec = SyntheticRun(n_sources=N_SOURCES, fragments_per_source=max(int(seconds * 1000), 1),
                        rate=1_000.0, physics=physics, payload_size=PAYLOAD_SIZE, seed=seed)
    began = time.monotonic()
    rows = ordered_fragments(spec)
    events = pa.Table.from_batches([build_events(rows, GlomConfig(dt=DT))])
    out.mkdir(parents=True)
    bounds = np.linspace(0, events.num_rows, files + 1).astype(int).tolist()
    now = time.time() - files
    for k, (start, stop) in enumerate(itertools.pairwise(bounds)):
        path = out / f"part-{k:05d}.parquet"
        pq.write_table(events.slice(start, stop - start), path)
        os.utime(path, (now + k, now + k))
    print(f"data: {rows.num_rows:,} fragments ({spec.duration:.0f} s of physics) in "
          f"{events.num_rows:,} events, {files} Parquet files, made in "
          f"{time.monotonic() - began:.1f} s (not timed)")
    return {"fragments": rows.num_rows, "events": events.num_rows}


def warm_files(files: Path, out: Path, count: int) -> dict[str, int]:
    """The first ``count`` files, for the warm-up; their counts."""
    out.mkdir(parents=True)
    for path in sorted(files.glob("*.parquet"))[:count]:
        shutil.copy2(path, out / path.name)
    sizes = pq.read_table(out, columns=["multiplicity"]).column("multiplicity")
    return {"fragments": int(pc.sum(sizes).as_py()), "events": len(sizes)}


# ------------------------------------------------------------------------------ the stages


def _example() -> tuple[Stage, Stage]:
    """``pixel_hits`` and ``decays``, loaded as ``--stages`` loads them, their module pickled
    by value to the executors (as the job's sink registers it)."""
    from pyspark import cloudpickle

    stages = {stage.name: stage for stage in load_stages(EXAMPLE)}
    cloudpickle.register_pickle_by_value(sys.modules[stages["decays"].function.__module__])
    if __name__ != "__main__":  # imported (a test): this module's functions travel too
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return stages["pixel_hits"], stages["decays"]


def _by_pixel_as_they_come(decays: Stage) -> Callable[[pa.Table], pa.Table]:
    """(b)'s function: ``decays``'s function once per pixel of the rows it is given, each
    pixel's rows in the order they came (a stable sort by pixel alone), from a new state."""
    function, initial, schema = decays.function, decays.initial, decays.schema

    def by_pixel(hits: pa.Table) -> pa.Table:
        hits = hits.take(pc.sort_indices(hits, [("pixel", "ascending")]))  # stable
        pixel = hits.column("pixel").to_numpy()
        cuts = [0, *(np.flatnonzero(pixel[1:] != pixel[:-1]) + 1).tolist(), len(pixel)]
        parts = [function(hits.slice(a, b - a), initial())[0]
                 for a, b in itertools.pairwise(cuts) if b > a]
        return pa.concat_tables(parts).select(schema.names) if parts else schema.empty_table()

    return by_pixel


def plans(pixel_hits: Stage, decays: Stage) -> dict[str, Plan]:
    """(a)'s plan, the example's; (b)'s, the same with ``decays`` order-insensitive."""
    anywhere = order_insensitive(schema=decays.schema, reads=pixel_hits.name, name="decays")(
        _by_pixel_as_they_come(decays)
    )
    return {
        "evb_keyed": plan([pixel_hits, decays], EVENT_SCHEMA),
        "insensitive_map": plan([pixel_hits, anywhere], EVENT_SCHEMA),
    }


# ------------------------------------------------------------------------------ the variants


def _events(spark: Any, files: Path, partitions: int) -> Any:
    schema = spark.read.parquet(str(files)).schema
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", partitions)
            .parquet(str(files)))


def _timed(query: Any, label: str, counts: dict[str, int]) -> dict[str, Any]:
    """The query run to its end: its figures (:func:`tests.bench.bench_spark.run_query`), with
    the CPU seconds this process tree spent meanwhile (the driver, the JVM, its Python
    workers) and what the rest of the host spent (other work on a shared machine)."""
    ours = _descendants(os.getpid())
    before = (_cpu_seconds(ours), _machine_busy(), time.monotonic())
    try:
        figures = base.run_query(query, label, counts["fragments"])
    finally:
        query.stop()
    ours = _descendants(os.getpid())
    after = (_cpu_seconds(ours), _machine_busy(), time.monotonic())
    cpu = after[0] - before[0]
    figures["cpu_s"] = round(cpu, 2)
    figures["fragments_per_cpu_s"] = round(counts["fragments"] / cpu, 1) if cpu > 0 else None
    figures["other_work_cores"] = round(
        max(0.0, after[1] - before[1] - cpu) / (after[2] - before[2]), 2
    )
    print(f"{'':<44} CPU: {cpu:.1f} s of this process tree "
          f"({figures['fragments_per_cpu_s'] or 0:,.0f} fragments per CPU second); other work "
          f"on the host meanwhile: {figures['other_work_cores']} cores")
    seconds = figures["seconds"]
    figures["events_per_s"] = round(counts["events"] / seconds, 1)
    figures["seconds_per_micro_batch"] = round(seconds / figures["micro_batches"], 3)
    return figures


def run_evb(spark: Any, stages: Plan, files: Path, out: Path, counts: dict[str, int],
            partitions: int, label: str) -> dict[str, Any]:
    """(a) or (b): ``run_plan`` in ``foreachBatch``, its last stage's result written, the
    states (by stage, by key) carried and pickled into the checkpoint every micro-batch."""
    from orderer.spark.stages.runner import run_plan

    states: dict[str, dict[Hashable, Any]] = {}
    last = stages.stages[-1].stage.name
    (out / "checkpoint").mkdir(parents=True)

    def step(frame: Any, batch_id: int) -> None:
        kept: list[Any] = []

        def write(planned: Any, result: Any) -> None:  # the stages before run in its job
            if planned.stage.name == last:
                result.write.mode("overwrite").parquet(str(out / f"rows/batch={batch_id}"))

        try:
            run_plan(spark, stages, frame, partitions, states, kept, write)
        finally:
            for cached in kept:
                cached.unpersist()
        state = out / "checkpoint" / f"evb-state-{batch_id:012d}.pickle"
        state.write_bytes(pickle.dumps(states))

    query = (_events(spark, files, partitions).writeStream.foreachBatch(step)
             .option("checkpointLocation", str(out / "checkpoint" / "query")).start())
    return _timed(query, label, counts)


def _spark_state_function(decays: Stage, hits_schema: pa.Schema) -> Any:
    """(c)'s function for ``applyInPandasWithState``: the pixel's rows sorted by offset,
    ``decays``'s function over them from the pixel's state, the new state kept."""
    function, names = decays.function, decays.schema.names

    def correlate(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        rows = pd.concat(list(frames), ignore_index=True).sort_values("offset", kind="stable")
        hits = pa.Table.from_pandas(rows, schema=hits_schema, preserve_index=False)
        before = state.get[0] if state.exists else None
        out, after = function(hits, before)
        if after is not None:
            state.update((int(after),))
        yield out.select(names).to_pandas()

    return correlate


def run_spark(spark: Any, pixel_hits: Stage, decays: Stage, files: Path, out: Path,
              counts: dict[str, int], partitions: int) -> dict[str, Any]:
    """(c): the same ``pixel_hits``, then ``applyInPandasWithState`` by pixel, the decays
    written in ``foreachBatch``."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.state import GroupStateTimeout

    hits_step = plan([pixel_hits], EVENT_SCHEMA).stages[0]

    def hits_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield from apply(hits_step, pa.Table.from_batches([batch])).to_batches()

    def write(frame: Any, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(str(out / f"rows/batch={batch_id}"))

    hits = _events(spark, files, partitions).mapInArrow(
        hits_task, from_arrow_schema(pixel_hits.schema)
    )
    correlated = hits.groupBy("pixel").applyInPandasWithState(
        _spark_state_function(decays, pixel_hits.schema),
        outputStructType=from_arrow_schema(decays.schema),
        stateStructType="last_implant long",
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    query = (correlated.writeStream.foreachBatch(write)
             .option("checkpointLocation", str(out / "checkpoint")).start())
    return _timed(query, LABELS["spark_state"], counts)


# ------------------------------------------------------------------------------ the answers


def written(out: Path, schema: pa.Schema) -> pa.Table:
    """A variant's decays, every micro-batch's, by offset."""
    parts = [pq.read_table(path).select(schema.names).cast(schema)
             for path in sorted((out / "rows").rglob("*.parquet"))]
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    return table.sort_by([("offset", "ascending"), ("implant", "ascending")])


def oracle(files: Path, pixel_hits: Stage, decays: Stage) -> tuple[pa.Table, pa.Table]:
    """The stages over the whole run at once, in stream order, without Spark: ``pixel_hits``'s
    rows and the decays."""
    stages = plan([pixel_hits, decays], EVENT_SCHEMA).stages
    events = pq.read_table(files)
    hits = apply(stages[0], events)
    out, _ = apply_sensitive(stages[1], hits, {})
    return hits, out.sort_by([("offset", "ascending"), ("implant", "ascending")])


def differences(wrong: pa.Table, right: pa.Table) -> dict[str, int]:
    """Rows of ``wrong`` not in ``right`` (a decay matched to another implant, or matched
    where it should not be) and rows of ``right`` not in ``wrong`` (a match missed)."""
    def rows(table: pa.Table) -> set[tuple[Any, ...]]:
        columns = [table.column(name).to_numpy() for name in ("offset", "implant")]
        return set(zip(*(c.tolist() for c in columns), strict=True))

    mine, theirs = rows(wrong), rows(right)
    return {"rows": wrong.num_rows, "not_in_a": len(mine - theirs), "missed": len(theirs - mine)}


# ------------------------------------------------------------------------------ the run


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    work = args.workdir or Path(tempfile.mkdtemp(prefix="evb-bench-stages-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    load_before = os.getloadavg()
    parts = args.partitions
    print(f"evb stages benchmark: {spark.sparkContext.master}, {parts} partitions, "
          f"{args.micro_batches} micro-batches, {os.cpu_count()} cores, load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    files = work / "events"
    counts = make_events(files, args.fragments, args.micro_batches * parts, args.seed)
    warm_counts = warm_files(files, work / "warm-events", 2 * parts)  # two micro-batches
    pixel_hits, decays = _example()
    evb_plans = plans(pixel_hits, decays)

    def variant(name: str, source: Path, out: Path, figures: dict[str, int]) -> dict[str, Any]:
        if name == "spark_state":
            return run_spark(spark, pixel_hits, decays, source, out, figures, parts)
        return run_evb(spark, evb_plans[name], source, out, figures, parts, LABELS[name])

    print("warm-up (not counted):")
    for name in VARIANTS:
        variant(name, work / "warm-events", work / f"warm-{name}", warm_counts)
    rounds: list[dict[str, dict[str, Any]]] = []
    for k in range(args.rounds):
        order = VARIANTS if k % 2 == 0 else VARIANTS[::-1]
        print(f"round {k + 1} of {args.rounds}" + (", in reverse" if k % 2 else "") + ":")
        rounds.append({name: variant(name, files, work / f"round-{k}-{name}", counts)
                       for name in order})

    figures: dict[str, Any] = {**counts, "micro_batches": args.micro_batches,
                               "partitions": parts, "rounds": rounds}
    for name in VARIANTS:
        figures[name] = {
            key: statistics.median(r[name][key] for r in rounds)
            for key in ("fragments_per_s", "events_per_s", "seconds", "seconds_per_micro_batch",
                        "start_to_first_batch_s", "cpu_s", "fragments_per_cpu_s",
                        "other_work_cores")
        }
    a, b, c = (figures[name]["fragments_per_s"] for name in VARIANTS)
    figures["ratio_a_over_b"] = round(a / b, 3)
    figures["ratio_a_over_c"] = round(a / c, 3)
    a, b, c = (figures[name]["fragments_per_cpu_s"] for name in VARIANTS)
    figures["cpu_ratio_a_over_b"] = round(a / b, 3)
    figures["cpu_ratio_a_over_c"] = round(a / c, 3)

    last = args.rounds - 1
    hits, expected = oracle(files, pixel_hits, decays)
    found = {name: written(work / f"round-{last}-{name}", decays.schema) for name in VARIANTS}
    figures["stage_input_rows"] = hits.num_rows
    figures["decays"] = {name: table.num_rows for name, table in found.items()}
    figures["a_equals_c"] = found["evb_keyed"].equals(found["spark_state"])
    figures["a_equals_oracle"] = found["evb_keyed"].equals(expected)
    figures["c_equals_oracle"] = found["spark_state"].equals(expected)
    figures["b_against_a"] = differences(found["insensitive_map"], found["evb_keyed"])
    module = sys.modules[decays.function.__module__]
    fit = module.half_life(found["evb_keyed"]["decay_time"], module.implant_rate(hits))
    figures["half_life_ms"] = round(fit.half_life * 1e3, 2)
    figures["half_life_error_ms"] = round(fit.error * 1e3, 2)
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    _report(figures, args.rounds)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def _report(figures: dict[str, Any], rounds: int) -> None:
    n, events = figures["fragments"], figures["events"]
    hits = figures["stage_input_rows"]
    print(f"\nmedians over {rounds} rounds; {n:,} fragments in {events:,} events, "
          f"{figures['micro_batches']} micro-batches, {figures['partitions']} partitions; "
          f"the decay stage's input: {hits:,} implant and decay rows "
          f"({100 * hits / n:.1f} % of the fragments)")
    print("each figure: the streaming query from its first micro-batch to its last committed: "
          "reading the events' Parquet, pixel_hits, the decay stage, writing the decays as "
          "Parquet, keeping the state ((a) pickled by the driver into the checkpoint, (c) "
          "Spark's state store, (b) none); the query's start is not in it")
    print("CPU s: of this process tree (driver, JVM, Python workers) during the query, by "
          "/proc; 'other cores': the rest of the host's busy cores meanwhile (a shared host "
          "slows the wall clock, less the CPU seconds)")
    print(f"{'variant':<44} {'fragments/s':>12} {'events/s':>10} {'s/micro-batch':>14} "
          f"{'start s':>8} {'CPU s':>7} {'fragments/CPU s':>16} {'other cores':>12} "
          f"{'decays':>8}")
    for name in VARIANTS:
        row = figures[name]
        print(f"{LABELS[name]:<44} {row['fragments_per_s']:>12,.0f} "
              f"{row['events_per_s']:>10,.0f} {row['seconds_per_micro_batch']:>14.2f} "
              f"{row['start_to_first_batch_s']:>8.2f} {row['cpu_s']:>7.1f} "
              f"{row['fragments_per_cpu_s'] or 0:>16,.0f} {row['other_work_cores']:>12.2f} "
              f"{figures['decays'][name]:>8,}")
    print(f"ratio (a)/(b), what keeping order costs: {figures['ratio_a_over_b']} by the wall "
          f"clock, {figures['cpu_ratio_a_over_b']} by CPU (1: nothing; below 1: (a) is slower)")
    print(f"ratio (a)/(c), evb against plain Spark: {figures['ratio_a_over_c']} by the wall "
          f"clock, {figures['cpu_ratio_a_over_c']} by CPU (above 1: evb is faster)")
    wrong = figures["b_against_a"]
    print(f"answers: (a) == (c): {figures['a_equals_c']}; (a) == the sequential oracle: "
          f"{figures['a_equals_oracle']}; (c) == the oracle: {figures['c_equals_oracle']} "
          f"({figures['decays']['evb_keyed']:,} decays); (b): {wrong['rows']:,} rows, "
          f"{wrong['not_in_a'] + wrong['missed']:,} differ from (a) ({wrong['not_in_a']:,} "
          f"not among (a)'s, {wrong['missed']:,} of (a)'s missing)")
    truth = Physics().half_life * 1e3
    pull = (figures["half_life_ms"] - truth) / figures["half_life_error_ms"]
    print(f"half-life from (a)'s decays (the example's fit): {figures['half_life_ms']} +- "
          f"{figures['half_life_error_ms']} ms (generated: {truth:g} ms; {pull:+.1f} standard "
          "errors)")
    after = figures["load_average_after"]
    print(f"load average after: {after[0]} {after[1]} {after[2]}")


def main(argv: list[str] | None = None) -> int:
    from orderer.spark.driver.job import create_session

    args = _parser().parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = create_session("local[2]", app="evb-bench-stages")
    # Spark's stateful operator keeps as many state stores as shuffle partitions (fixed at a
    # query's first start): as many as the keyed stage's partitions, the same parallelism
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        figures = run(spark, args)
    finally:
        spark.stop()
    base._write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
