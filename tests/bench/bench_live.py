"""Benchmark of the live page's running totals (``evb spark-job --ui``): the job with and without
them on the same run, and the share of the job's time the totals take.

Not a pytest test: ``python tests/bench/bench_live.py [--fragments N] [--micro-batches M]``. One
run (bench_spark.py's data: six sources, 16-byte payloads, a late backlog, sync barriers, through
a real ``evb serve``), one SparkSession, then the whole job (``orderer.spark.driver.job.run``: the
stream, the events written, the summary and the report) over it ``--repeats`` times each way,
alternating (with, without, with, ...), each with its own output and consumer, ``M``
micro-batches (``--max-fragments-per-trigger``). Printed per way: the best time per fragment
of the whole job, and of its micro-batches alone (the sum of Spark's own ``triggerExecution``
of each, from the query's progress: the job's start and its end-of-run summary left out, which
the totals do not touch and whose noise is as large as what is measured), and the CPU time the
job's processes used (this driver, its JVM, the Python workers, the orderer serving the reads);
then the ratios, best of each way and median of the pairs (each job with ``--ui`` against the
job without it run next to it), and the time spent inside the totals' observer per micro-batch
(taking the counts the data source made, the checkpoint's totals file).

Why CPU time too: this host is a shared VM whose wall-clock time varies by 10-20 % between
identical jobs, more than what is measured; the CPU the job's processes use varies much less.

Why the whole job too: the issue's goal is the job's time per fragment, and with ``--ui`` the
events are written by the stages' sink (``foreachBatch``) instead of Spark's file sink: that
difference is a part of what ``--ui`` costs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as evb sets it (bench_spark.py)

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orderer.job_config import JobConfig  # noqa: E402
from orderer.spark.driver import job  # noqa: E402
from orderer.spark.live import observer  # noqa: E402
from orderer.spark.live.board import Board  # noqa: E402
from tests.bench.bench_spark import DT, _make_data  # noqa: E402


class _Timed:
    """The observer's time, summed (wraps LiveRun.__call__)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._original = observer.LiveRun.__call__

    def __enter__(self) -> _Timed:
        timed = self

        def call(run: Any, batch_id: int, results: Any) -> None:
            started = time.monotonic()
            try:
                timed._original(run, batch_id, results)
            finally:
                timed.seconds += time.monotonic() - started
                timed.calls += 1

        observer.LiveRun.__call__ = call  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        observer.LiveRun.__call__ = self._original  # type: ignore[method-assign]


class _Progress:
    """The micro-batches' time of each query (``triggerExecution``, ms), by run id."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.by_run: dict[str, float] = {}
        progress = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None: ...

            def onQueryProgress(self, event: Any) -> None:
                done = event.progress
                run = str(done.runId)
                spent = done.durationMs.get("triggerExecution", 0) / 1000
                progress.by_run[run] = progress.by_run.get(run, 0.0) + spent

            def onQueryIdle(self, event: Any) -> None: ...

            def onQueryTerminated(self, event: Any) -> None: ...

        spark.streams.addListener(Listener())

    def since(self, before: set[str]) -> float:
        """Seconds of micro-batches of the queries started after ``before`` (run ids) was
        taken (progress events arrive asynchronously: waited for a moment)."""
        time.sleep(1.0)
        return sum(t for run, t in self.by_run.items() if run not in before)


def cpu_seconds() -> float:
    """CPU time (user and system) of this process and of every process below it, the exited
    ones their parents waited for included (``/proc``: Linux)."""
    below: dict[int, list[int]] = collections.defaultdict(list)
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after the command's name
        below[int(fields[1])].append(int(entry))
        used[int(entry)] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    total, pending = 0, [os.getpid()]
    while pending:
        pid = pending.pop()
        total += used.get(pid, 0)
        pending += below.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def _job(
    spark: Any, target: str, out: Path, n: int, micro_batches: int, ui: bool
) -> tuple[float, float]:
    flags = [
        "--target", target, "--dt", str(DT), "--output", str(out), "--run", "bench",
        "--consumer", out.name, "--max-fragments-per-trigger", str(-(-n // micro_batches)),
        "--quiet",
    ]  # fmt: skip
    if ui:
        flags += ["--ui", "127.0.0.1:0"]
    started, cpu = time.monotonic(), cpu_seconds()
    job.run(spark, JobConfig.from_argv(flags), None, Board() if ui else None)
    return time.monotonic() - started, cpu_seconds() - cpu


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    from orderer.spark.source.datasource import register

    register(spark)
    work = Path(tempfile.mkdtemp(prefix="evb-bench-live-"))
    print(f"evb live totals benchmark: local[2], dt {DT} ticks, {os.cpu_count()} cores, "
          f"{args.payload_bytes}-byte payloads")
    server, n = _make_data(work, args.fragments, args.payload_bytes)
    times: dict[str, list[float]] = {"without": [], "with": []}
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    batches: dict[str, list[float]] = {"without": [], "with": []}
    progress = _Progress(spark)
    observed = _Timed()
    try:
        for way in ("with", "without"):  # not counted: the first job of either way is slower
            _job(spark, server.target, work / f"warm-{way}", n, args.micro_batches, way == "with")
        with observed:
            observed.seconds, observed.calls = 0.0, 0
            for k in range(args.repeats):
                for way in ("with", "without") if k % 2 == 0 else ("without", "with"):
                    before = set(progress.by_run)
                    seconds, used = _job(spark, server.target, work / f"{way}-{k}", n,
                                         args.micro_batches, way == "with")  # fmt: skip
                    times[way].append(seconds)
                    cpu[way].append(used)
                    batches[way].append(progress.since(before))
                    print(f"  job {way:<7} --ui: {seconds:7.2f} s "
                          f"({seconds / n * 1e6:.2f} µs per fragment), its micro-batches "
                          f"{batches[way][-1]:.2f} s, CPU {used:.2f} s")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {way: min(values) for way, values in times.items()}
    fastest = {way: min(values) for way, values in batches.items()}
    per_batch = observed.seconds / max(observed.calls, 1)

    def paired(values: dict[str, list[float]]) -> float:
        pairs = zip(values["with"], values["without"], strict=True)
        return statistics.median(w / o for w, o in pairs)

    least_cpu = {way: min(values) for way, values in cpu.items()}
    share = observed.seconds / sum(times["with"])
    figures = {
        "fragments": n,
        "payload_bytes": args.payload_bytes,
        "micro_batches": args.micro_batches,
        "seconds": {way: [round(s, 3) for s in values] for way, values in times.items()},
        "us_per_fragment": {way: round(s / n * 1e6, 3) for way, s in best.items()},
        "ratio_with_over_without": round(best["with"] / best["without"], 3),
        "micro_batch_seconds": {way: [round(s, 3) for s in v] for way, v in batches.items()},
        "micro_batch_ratio": round(fastest["with"] / fastest["without"], 3),
        "micro_batch_paired_ratio": round(paired(batches), 3),
        "paired_ratio": round(paired(times), 3),
        "cpu_seconds": {way: [round(s, 2) for s in values] for way, values in cpu.items()},
        "cpu_ratio": round(least_cpu["with"] / least_cpu["without"], 3),
        "cpu_paired_ratio": round(paired(cpu), 3),
        "totals_seconds_per_micro_batch": round(per_batch, 3),
        "totals_share_of_job": round(share, 4),
    }
    print(f"best: without --ui {best['without']:.2f} s, with --ui {best['with']:.2f} s: "
          f"{(best['with'] / best['without'] - 1) * 100:+.1f} % per fragment; the totals "
          f"{per_batch * 1e3:.0f} ms per micro-batch, {share * 100:.1f} % of the job's time")
    print(f"micro-batches alone: without --ui {fastest['without']:.2f} s, with --ui "
          f"{fastest['with']:.2f} s: {(fastest['with'] / fastest['without'] - 1) * 100:+.1f} %")
    print(f"CPU of the job's processes: without --ui {least_cpu['without']:.2f} s, with --ui "
          f"{least_cpu['with']:.2f} s: {(figures['cpu_ratio'] - 1) * 100:+.1f} %")
    print(f"median of the pairs (with / without, run side by side): the job "
          f"{(figures['paired_ratio'] - 1) * 100:+.1f} %, its micro-batches "
          f"{(figures['micro_batch_paired_ratio'] - 1) * 100:+.1f} %, its CPU "
          f"{(figures['cpu_paired_ratio'] - 1) * 100:+.1f} %")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=1_000_000)
    parser.add_argument("--micro-batches", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--payload-bytes", type=int, default=16, help="each fragment's payload")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = job.create_session("local[2]", app="evb-bench-live")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        figures = run(spark, args)
    finally:
        spark.stop()
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
