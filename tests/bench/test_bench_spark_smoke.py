"""Smoke test of ``tests/bench/bench_spark.py``: every phase runs end to end on a tiny input
(real ``evb serve`` subprocesses, PySpark local mode in this process, sharing the Spark tests'
session) and reports figures; the figures themselves depend on the machine and are not checked,
only that evb and the baseline built the same number of events from the same fragments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bench import bench_spark
from tests.spark.conftest import spark_session


def test_bench_spark_runs_on_a_tiny_input(tmp_path: Path, capsys: Any) -> None:
    spark = spark_session()  # the session the Spark tests use (one JVM per test run)
    args = bench_spark._parser().parse_args(
        ["--fragments", "3000", "--micro-batches", "3", "--rate", "400",
         "--latency-seconds", "1.5", "--latency-warmup", "0", "--workdir", str(tmp_path / "w")]
    )
    figures = bench_spark.run(spark, args)
    n = figures["fragments"]
    assert n >= 3000
    for phase in ("evb_stream", "evb_batch", "baseline"):
        assert figures[phase]["fragments"] == n and figures[phase]["fragments_per_s"] > 0
    assert figures["evb_stream"]["events"] == figures["evb_batch"]["events"] > 0
    assert figures["baseline"]["events"] > 0
    assert figures["evb_stream"]["micro_batches"] >= 3
    assert figures["ratio_evb_stream_over_baseline"] > 0
    latency = figures["latency"]
    assert latency["events"] > 0 and latency["p99_ms"] >= latency["p50_ms"] > 0
    assert "ratio evb streaming / baseline" in capsys.readouterr().out
