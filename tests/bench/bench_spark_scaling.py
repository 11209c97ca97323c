"""Benchmark of how the Spark job scales with cores: ``local[1]`` with 1 partition against
``local[2]`` with 2, and Spark's own floor in the same conditions.

Not a pytest test: run it as ``python tests/bench/bench_spark_scaling.py [--fragments N]`` (part
of ``make bench``). Why a benchmark of its own: a SparkSession's master cannot change, so each
master gets a session of its own (stopped before the next starts, in this one process), all on
one data set written once:

0. the data (not timed): a real ``evb serve`` takes the same synthetic run as
   ``bench_spark.py`` (six sources, 16-byte payloads, a late backlog, sync barriers) and ends the
   run; it stays up and serves its ordered log to every streaming read; the same fragments are
   exported (not timed) to Parquet files, two per micro-batch;
1. per master (``local[1]``, ``local[2]``; ``--rounds`` alternates them), after a warm-up (not
   counted) that starts the Python workers and lets the JIT compile both paths, evb's and the
   floor's (``--warm-up`` fragments of each: one micro-batch by default), the phases below; the
   odd rounds run the floors first, so that neither side always runs on a JVM the other warmed:

   - evb: the job's streaming query, ``readStream.format("evb")`` from the live orderer with
     ``numPartitions`` = the master's cores, the events built where the source reads them
     (``output`` = ``events``: one Python step), Parquet sink with the job's options and a
     checkpoint, ``--micro-batches`` micro-batches;
   - evb source alone: the fragments read (no building) through an identity ``mapInArrow``;
   - Spark's one-Python-step floor: Spark's own Parquet file stream of the exported fragments
     (two files a micro-batch, so ``local[2]`` gets two tasks), an identity ``mapInArrow``,
     Parquet sink: one Python stage in a streaming query with no evb code at all;
   - the same floor with the job's Parquet options: no dictionary for the columns that hold a
     different value in almost every row (offset, timestamp, payload; the job's
     :data:`~orderer.spark.output.writer.UNIQUE_COLUMNS`), printed so that what the job gains from
     its own settings is not mistaken for what it gains on Spark;
   - Spark's JVM-only floor: the same file stream straight to the Parquet sink, no Python;

   each timed from the start of its first micro-batch to the last batch committed (the rate;
   :func:`tests.bench.bench_spark.run_query`), the time from ``start()`` to the first
   micro-batch printed beside it (a fixed cost of each query);

2. the figures: fragments/s of each, evb / each floor per master (issue 28's goal: the job at
   least the one-Python-step floor, at Spark's default settings), and the scaling ratios
   ``local[2]`` / ``local[1]`` (goal >= 1.7). The load average before and after is printed:
   the machine may be shared;
3. the job's fixed cost: ``evb spark-job --target`` run as a user runs it, a whole process
   (``local[2]``), on a run of ``--fragments`` / 4 and one of ``--fragments`` (two orderers):
   the time of each, the marginal rate and the fixed cost from the two (the JVM's start and the
   end-of-run summary and report cancel out of the rate), and where the fixed cost goes (start
   to the first events written; the last events written to the exit: summary and report).

``--json PATH`` writes the figures; ``--orderer-ingest`` (fragments/s one orderer takes in, from
README "Performance / The service") turns them into executor cores needed to keep up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench import bench_spark as base  # noqa: E402

MASTERS = ("local[1]", "local[2]")
GOAL = 1.7
FLOOR_GOAL = 1.0
"""The job against Spark's one-Python-step floor (issue 28)."""

Sessions = Callable[[str], AbstractContextManager[Any]]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=2_000_000)
    parser.add_argument("--micro-batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2,
                        help="local[1], local[2] alternated; the odd rounds run the floors first")
    parser.add_argument("--warm-up", type=int, default=None,
                        help="fragments streamed through evb and through the floor first in "
                        "each session, not counted (default: one micro-batch's share; 0: none)")
    parser.add_argument("--orderer-ingest", type=float, default=7.2e6,
                        help="fragments/s one orderer takes in (cores-needed arithmetic); "
                        "default: README's 'The service', make bench, 7.18 M/s")
    parser.add_argument("--job-fragments", type=int, default=None,
                        help="the job as a process (part 3) on runs of N / 4 and N fragments "
                        "(default: --fragments; 0: leave part 3 out)")
    parser.add_argument("--workdir", type=Path, help="keep the data here (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    return parser


def cores_of(master: str) -> int:
    """The task slots of a ``local[N]`` master: the partitions that keep them all busy."""
    inside = master.removeprefix("local[").removesuffix("]")
    if not master.startswith("local[") or not inside.isdigit() or int(inside) < 1:
        raise ValueError(f"master {master!r}: the benchmark needs local[N], N >= 1")
    return int(inside)


def _identity(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _evb_identity(spark: Any, target: str, out: Path, n: int, micro_batches: int,
                  partitions: int) -> dict[str, Any]:
    """The evb source read as the job reads it, the rows passed through unchanged."""
    from orderer.building.config import GlomConfig
    from orderer.spark.source.glom import FRAGMENT_SPARK_SCHEMA, glom_options

    config = GlomConfig(base.DT)
    reader = (
        spark.readStream.format("evb").option("target", target)
        .options(**glom_options(config)).option("numPartitions", partitions)
        .option("consumer", out.name)
        .option("maxFragmentsPerTrigger", -(-n // micro_batches) + config.largest_event)
    )
    return _stream(reader.load().mapInArrow(_identity, FRAGMENT_SPARK_SCHEMA), out, n,
                   "evb source, identity mapInArrow")


FLOOR_UNIQUE_COLUMNS = ("offset", "timestamp", "payload")
"""The floor's rows' columns that hold a different value in almost every row, as the job's
:data:`~orderer.spark.output.writer.UNIQUE_COLUMNS` are of its events."""


def _spark_identity(spark: Any, fragments: Path, out: Path, n: int,
                    tuned: bool = False) -> dict[str, Any]:
    """Spark's floor: its own file stream, an identity Python stage, its Parquet sink (at
    Spark's defaults, or ``tuned`` with the job's Parquet options)."""
    schema = spark.read.parquet(str(fragments)).schema
    frame = (
        spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(str(fragments))
        .mapInArrow(_identity, schema)
    )
    if not tuned:
        return _stream(frame, out, n, "Spark floor: file stream, identity mapInArrow")
    options = {f"parquet.enable.dictionary#{c}": "false" for c in FLOOR_UNIQUE_COLUMNS}
    return _stream(frame, out, n, "the same, with the job's Parquet options", options)


def _spark_jvm(spark: Any, fragments: Path, out: Path, n: int) -> dict[str, Any]:
    """Spark's JVM-only floor: its own file stream straight to its Parquet sink."""
    schema = spark.read.parquet(str(fragments)).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(
        str(fragments)
    )
    return _stream(frame, out, n, "Spark floor: file stream, no Python")


def _stream(frame: Any, out: Path, n: int, label: str,
            options: dict[str, str] | None = None) -> dict[str, Any]:
    query = (
        frame.writeStream.format("parquet").options(**(options or {}))
        .option("path", str(out / "rows")).option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )
    try:
        figures = base.run_query(query, label, n)
    finally:
        query.stop()
    rows = frame.sparkSession.read.parquet(str(out / "rows")).count()
    if rows != n:
        raise AssertionError(f"{label}: {rows} rows written, {n} expected")
    return figures


def _job_run(target: str, out: Path) -> dict[str, float]:
    """``evb spark-job --target`` as a user runs it, a whole process on an ended run: its
    seconds, and when it wrote its first and its last events (file times)."""
    argv = [
        sys.executable, "-m", "orderer.cli", "spark-job", "--target", target,
        "--dt", str(base.DT), "--output", str(out), "--master", "local[2]",
        "--partitions", "2", "--consumer", "job", "--quiet",
    ]
    began_wall, began = time.time(), time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - began
    if done.returncode:
        raise RuntimeError(f"evb spark-job exited {done.returncode}: {done.stderr[-2000:]}")
    written = [path.stat().st_mtime for path in (out / "events").rglob("*.parquet")]
    if not written:
        raise RuntimeError(f"evb spark-job wrote no events under {out}")
    return {
        "seconds": round(seconds, 2),
        "to_first_events": round(min(written) - began_wall, 2),
        "after_last_events": round(began_wall + seconds - max(written), 2),
    }


def job_fixed_cost(work: Path, fragments: int) -> dict[str, Any]:
    """Part 3: the job as a process on two runs, N / 4 and N fragments: its marginal rate and
    its fixed cost (intercept of the two), where the fixed cost goes."""
    runs: dict[str, dict[str, float]] = {}
    for label, count in (("quarter", max(fragments // 4, 1000)), ("whole", fragments)):
        if label == "whole" and count <= runs["quarter"]["fragments"]:
            runs[label] = runs["quarter"]  # one size: one run (a JVM start) tells no rate
            continue
        (work / f"job-{label}").mkdir(parents=True, exist_ok=True)
        server, n = base._make_data(work / f"job-{label}", count)
        try:
            runs[label] = {"fragments": n, **_job_run(server.target, work / f"job-{label}" / "out")}
        finally:
            server.stop()
    small, big = runs["quarter"], runs["whole"]
    spent = big["seconds"] - small["seconds"]
    rate: float | None = None
    fixed: float | None = None
    if spent > 0 and big["fragments"] > small["fragments"]:
        rate = (big["fragments"] - small["fragments"]) / spent
        fixed = small["seconds"] - small["fragments"] / rate
        found = f"{rate:,.0f} fragments/s beyond a fixed {fixed:.1f} s"
    else:  # runs too small (or of one size) to tell the fixed cost from the rate
        rate = fixed = None
        found = (
            "one run, or no faster than the smaller: too few fragments to tell the rate from "
            "the fixed cost"
        )
    figures = {
        "runs": runs,
        "fragments_per_s": None if rate is None else round(rate),
        "fixed_seconds": None if fixed is None else round(fixed, 2),
    }
    print(f"evb spark-job as a process: {small['seconds']} s for {small['fragments']:,} "
          f"fragments, {big['seconds']} s for {big['fragments']:,}: {found} "
          f"(start -> first events written "
          f"{small['to_first_events']} / {big['to_first_events']} s; last events written -> "
          f"exit, the summary and report: {small['after_last_events']} / "
          f"{big['after_last_events']} s)")
    return figures


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (the JVM, its Python workers, ``evb serve``)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of these processes so far (``/proc/PID/stat``)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, and the children's it reaped (Python workers that ended in between)
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy so far (all processes, ours and others')."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _with_cpu(phase: Callable[[], dict[str, Any]], server: int) -> dict[str, Any]:
    """``phase()``'s figures, with the cores it kept busy: this process tree, the orderer's
    share of it, and the rest of the machine (other work on a shared host)."""
    if not Path("/proc/stat").exists():
        return phase()
    ours, mine = _descendants(os.getpid()), [server]
    before = (_cpu_seconds(ours), _cpu_seconds(mine), _machine_busy(), time.monotonic())
    figures = phase()
    ours = _descendants(os.getpid())
    after = (_cpu_seconds(ours), _cpu_seconds(mine), _machine_busy(), time.monotonic())
    wall = after[3] - before[3]
    spark = after[0] - before[0] - (after[1] - before[1])
    figures["cores_busy"] = {
        "spark_and_driver": round(spark / wall, 2),
        "orderer": round((after[1] - before[1]) / wall, 2),
        "other_work": round(max(0.0, after[2] - before[2] - (after[0] - before[0])) / wall, 2),
    }
    busy = figures["cores_busy"]
    print(f"{'':<44} cores busy: Spark+driver {busy['spark_and_driver']}, orderer "
          f"{busy['orderer']}, other work on the host {busy['other_work']}")
    return figures


def _rows(spark: Any, files: Path) -> int:
    return int(spark.read.parquet(str(files)).count())


def _measure(spark: Any, master: str, server: Any, work: Path, n: int,
             args: argparse.Namespace, floors_first: bool = False) -> dict[str, Any]:
    """One master: warm-up, then the streams (the floors first when ``floors_first``);
    ``work`` is this round's directory."""
    from orderer.spark.source.datasource import register

    register(spark)
    parts = cores_of(master)
    target, pid = server.target, server.process.pid
    micro_batches = args.micro_batches
    warm = min(n, -(-n // micro_batches) if args.warm_up is None else args.warm_up)
    if warm:  # a new session starts its Python workers in its first query; the JIT compiles
        print(f"{master}, {parts} partition(s): warm-up (not counted)")
        base._evb_stream(spark, target, work / "warm", warm, 2, until=warm, partitions=parts)
        files = work.parent / "warm-fragments"
        _spark_identity(spark, files, work / "warm-floor", _rows(spark, files))
    print(f"{master}, {parts} partition(s): measured" + (", floors first" if floors_first else ""))
    fragments = work.parent / "fragments"
    phases: dict[str, Callable[[], dict[str, Any]]] = {
        "evb_stream": lambda: base._evb_stream(
            spark, target, work / "evb", n, micro_batches, partitions=parts,
            label=f"evb job, {master}",
        ),
        "evb_source_identity": lambda: _evb_identity(
            spark, target, work / "source", n, micro_batches, parts
        ),
        "spark_identity": lambda: _spark_identity(spark, fragments, work / "floor", n),
        "spark_identity_tuned": lambda: _spark_identity(spark, fragments, work / "tuned", n, True),
        "spark_jvm": lambda: _spark_jvm(spark, fragments, work / "jvm", n),
    }
    order = list(phases)
    if floors_first:
        order = order[2:] + order[:2]
    measured = {phase: _with_cpu(phases[phase], pid) for phase in order}
    evb, floor = measured["evb_stream"], measured["spark_identity"]
    tuned, jvm = measured["spark_identity_tuned"], measured["spark_jvm"]
    return {
        "master": master,
        "partitions": parts,
        **measured,
        "evb_over_spark_floor": round(evb["fragments_per_s"] / floor["fragments_per_s"], 2),
        "evb_over_tuned_floor": round(evb["fragments_per_s"] / tuned["fragments_per_s"], 2),
        "evb_over_jvm_floor": round(evb["fragments_per_s"] / jvm["fragments_per_s"], 2),
    }


def _median(rounds: list[dict[str, Any]], master: str, phase: str, key: str) -> float:
    values = [r[master][phase].get("cores_busy", {}).get("spark_and_driver", 0.0)
              if key == "cores_busy" else r[master][phase][key] for r in rounds]
    return float(statistics.median(values))


def summarize(rounds: list[dict[str, Any]], n: int, ingest: float,
              cores: int | None) -> dict[str, Any]:
    """Medians over the rounds, the scaling ratios and the executor cores one orderer needs.

    Why the cores busy are kept: one task is already a pipeline of three processes (the Python
    worker reading the source, the JVM, the Python worker of ``mapInArrow``), so ``local[1]``
    keeps more than one core busy, and on a host of ``cores`` cores the scaling cannot pass
    ``cores / busy(local[1])`` (``ceiling``). Fragments per busy core-second that stay level
    from ``local[1]`` to ``local[2]`` mean the job itself has no serial part left."""
    one, two = MASTERS
    figures: dict[str, Any] = {"fragments": n, "rounds": rounds}
    phases = ("evb_stream", "evb_source_identity", "spark_identity", "spark_identity_tuned",
              "spark_jvm")
    for phase in phases:
        row: dict[str, Any] = {}
        for master in MASTERS:
            rate = _median(rounds, master, phase, "fragments_per_s")
            busy = _median(rounds, master, phase, "cores_busy")
            row[master] = rate
            row[f"{master} cores busy"] = round(busy, 2)
            row[f"{master} per busy core"] = round(rate / busy, 1) if busy else None
        row["scaling"] = round(row[two] / row[one], 2)
        busy_one = row[f"{one} cores busy"]
        row["ceiling"] = round(cores / busy_one, 2) if cores and busy_one else None
        figures[phase] = row
    job = figures["evb_stream"]
    per_slot = job[two] / cores_of(two)
    figures["goal_scaling"] = GOAL
    figures["evb_over_spark_floor"] = {
        m: round(job[m] / figures["spark_identity"][m], 2) for m in MASTERS
    }
    figures["evb_over_tuned_floor"] = {
        m: round(job[m] / figures["spark_identity_tuned"][m], 2) for m in MASTERS
    }
    figures["evb_over_jvm_floor"] = {m: round(job[m] / figures["spark_jvm"][m], 2) for m in MASTERS}
    figures["start_to_first_batch_s"] = {
        phase: {m: _median(rounds, m, phase, "start_to_first_batch_s") for m in MASTERS}
        for phase in phases
    }
    figures["orderer_ingest"] = ingest
    figures["job_per_core"] = round(per_slot, 1)
    # from the printed (rounded) figure, so that the arithmetic shown is the one done
    figures["executor_cores_needed"] = int(-(-ingest // figures["job_per_core"]))
    per_busy = job[f"{two} per busy core"]
    figures["cpu_cores_needed"] = int(-(-ingest // per_busy)) if per_busy else None
    return figures


def _report(figures: dict[str, Any]) -> None:
    one, two = MASTERS
    print(f"\n{'fragments/s (median over rounds)':<30} {one:>10} {two:>10} {'scaling':>8} "
          f"{'ceiling':>8}   cores busy {one} / {two}")
    for phase, label in (("evb_stream", "evb job"), ("evb_source_identity", "evb source alone"),
                         ("spark_identity", "Spark floor, one Python step"),
                         ("spark_identity_tuned", "  the same, job's Parquet options"),
                         ("spark_jvm", "Spark floor, no Python")):
        row = figures[phase]
        print(f"{label:<30} {row[one]:>10,.0f} {row[two]:>10,.0f} {row['scaling']:>7.2f}x "
              f"{row['ceiling'] or 0:>7.2f}x   {row[f'{one} cores busy']} / "
              f"{row[f'{two} cores busy']}")
    ratio, jvm = figures["evb_over_spark_floor"], figures["evb_over_jvm_floor"]
    tuned = figures["evb_over_tuned_floor"]
    print(f"evb job / Spark's one-Python-step floor: {ratio[one]} ({one}), {ratio[two]} ({two})"
          f" (goal >= {FLOOR_GOAL}: {'ok' if ratio[two] >= FLOOR_GOAL else 'below'})")
    print(f"evb job / that floor with the job's Parquet options: {tuned[one]} ({one}), "
          f"{tuned[two]} ({two})")
    print(f"evb job / Spark's JVM-only floor: {jvm[one]} ({one}), {jvm[two]} ({two})")
    start = figures["start_to_first_batch_s"]
    print("start() -> first micro-batch, s (a fixed cost of each query, not in the rates): "
          + ", ".join(f"{phase} {start[phase][two]:.2f}" for phase in start) + f" ({two})")
    print(f"scaling of the evb job local[2] / local[1]: {figures['evb_stream']['scaling']} "
          f"(goal >= {GOAL}; this host allows at most {figures['evb_stream']['ceiling']})")
    ingest = figures["orderer_ingest"]
    print(f"executor cores to keep up with one orderer at {ingest:,.0f} fragments/s: "
          f"{ingest:,.0f} / {figures['job_per_core']:,.0f} per task slot = "
          f"{figures['executor_cores_needed']}; by CPU ({two}, "
          f"{figures['evb_stream'][f'{two} per busy core'] or 0:,.0f} per busy core): "
          f"{figures['cpu_cores_needed']}")


def run(sessions: Sessions, args: argparse.Namespace) -> dict[str, Any]:
    """All rounds on one data set; ``sessions(master)`` gives a SparkSession for the master."""
    work = args.workdir or Path(tempfile.mkdtemp(prefix="evb-bench-scaling-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    load_before = os.getloadavg()
    print(f"evb Spark scaling benchmark: {os.cpu_count()} cores, load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    server, n = base._make_data(work, args.fragments)
    rounds: list[dict[str, Any]] = []
    try:
        base._export(work / "data", work / "fragments", 2 * args.micro_batches)
        (work / "warm-fragments").mkdir()  # one micro-batch's files, to warm the floor's path
        for name in sorted(p.name for p in (work / "fragments").glob("*.parquet"))[:2]:
            shutil.copy(work / "fragments" / name, work / "warm-fragments" / name)
        for k in range(args.rounds):
            measured: dict[str, Any] = {}
            for master in MASTERS:
                with sessions(master) as spark:
                    measured[master] = _measure(spark, master, server,
                                                work / f"round-{k}-{cores_of(master)}", n,
                                                args, floors_first=k % 2 == 1)
            rounds.append(measured)
    finally:
        server.stop()
    figures = summarize(rounds, n, args.orderer_ingest, os.cpu_count())
    figures["load_average"] = {"before": [round(x, 2) for x in load_before],
                               "after": [round(x, 2) for x in os.getloadavg()]}
    figures["cores"] = os.cpu_count()
    _report(figures)
    job_fragments = args.fragments if args.job_fragments is None else args.job_fragments
    if job_fragments:
        figures["job_process"] = job_fixed_cost(work, job_fragments)
    after = figures["load_average"]["after"]
    print(f"load average after: {after[0]} {after[1]} {after[2]}")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return figures


@contextmanager
def _own_session(master: str) -> Iterator[Any]:
    """A fresh SparkSession for ``master``, stopped afterwards (the next master needs its own)."""
    from orderer.spark.driver.job import create_session

    spark = create_session(master, app=f"evb-bench-scaling-{master}")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures = run(_own_session, args)
    base._write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
