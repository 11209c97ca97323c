"""Benchmark of the live page's running totals (``evb spark-job --ui``): the job with and without
them on the same run, and the share of the job's time the totals take.

Not a pytest test: ``python tests/bench/bench_live.py [--fragments N] [--micro-batches M]``. One
run (bench_spark.py's data: six sources, 16-byte payloads, a late backlog, sync barriers, through
a real ``evb serve``), one SparkSession, then the whole job (``orderer.spark.job.run``: the
stream, the events written, the summary and the report) over it ``--repeats`` times each way,
alternating (with, without, with, ...), each with its own output and consumer, ``M``
micro-batches (``--max-fragments-per-trigger``). Printed per way: the best time per fragment;
then the ratio, and the time spent inside the totals' observer per micro-batch (counting on the
executors, the checkpoint's totals file, the board's rendering) as a share of the job's time.

Why the whole job and not the query alone: the issue's goal is the job's time per fragment, and
with ``--ui`` the events are written by the stages' sink (``foreachBatch``) instead of Spark's
file sink: that difference is a part of what ``--ui`` costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from orderer.spark import job  # noqa: E402
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

        observer.LiveRun.__call__ = call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        observer.LiveRun.__call__ = self._original  # type: ignore[method-assign]


def _job(spark: Any, target: str, out: Path, n: int, micro_batches: int, ui: bool) -> float:
    flags = [
        "--target", target, "--dt", str(DT), "--output", str(out), "--run", "bench",
        "--consumer", out.name, "--max-fragments-per-trigger", str(-(-n // micro_batches)),
        "--quiet",
    ]  # fmt: skip
    if ui:
        flags += ["--ui", "127.0.0.1:0"]
    started = time.monotonic()
    job.run(spark, JobConfig.from_argv(flags), None, Board() if ui else None)
    return time.monotonic() - started


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    from orderer.spark.source import register

    register(spark)
    work = Path(tempfile.mkdtemp(prefix="evb-bench-live-"))
    print(f"evb live totals benchmark: local[2], dt {DT} ticks, {os.cpu_count()} cores, "
          f"{args.payload_bytes}-byte payloads")
    server, n = _make_data(work, args.fragments, args.payload_bytes)
    times: dict[str, list[float]] = {"without": [], "with": []}
    observed = _Timed()
    try:
        _job(spark, server.target, work / "warm", n, args.micro_batches, True)  # not counted
        with observed:
            observed.seconds, observed.calls = 0.0, 0
            for k in range(args.repeats):
                for way in ("with", "without") if k % 2 == 0 else ("without", "with"):
                    seconds = _job(spark, server.target, work / f"{way}-{k}", n,
                                   args.micro_batches, way == "with")  # fmt: skip
                    times[way].append(seconds)
                    print(f"  job {way:<7} --ui: {seconds:7.2f} s "
                          f"({seconds / n * 1e6:.2f} µs per fragment)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {way: min(values) for way, values in times.items()}
    per_batch = observed.seconds / max(observed.calls, 1)
    share = observed.seconds / sum(times["with"])
    figures = {
        "fragments": n,
        "payload_bytes": args.payload_bytes,
        "micro_batches": args.micro_batches,
        "seconds": {way: [round(s, 3) for s in values] for way, values in times.items()},
        "us_per_fragment": {way: round(s / n * 1e6, 3) for way, s in best.items()},
        "ratio_with_over_without": round(best["with"] / best["without"], 3),
        "totals_seconds_per_micro_batch": round(per_batch, 3),
        "totals_share_of_job": round(share, 4),
    }
    print(f"best: without --ui {best['without']:.2f} s, with --ui {best['with']:.2f} s: "
          f"{(best['with'] / best['without'] - 1) * 100:+.1f} % per fragment; the totals "
          f"{per_batch * 1e3:.0f} ms per micro-batch, {share * 100:.1f} % of the job's time")
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
