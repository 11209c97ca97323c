"""Smoke tests of ``tests/bench/bench_spark.py`` and ``bench_spark_scaling.py``: every phase
runs end to end on a tiny input (real ``evb serve`` subprocesses, PySpark local mode in this
process, sharing the Spark tests' session) and reports figures; the figures themselves depend on
the machine and are not checked, only that evb and the baseline built the same number of events
from the same fragments, and that the partitions do not change the events."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.bench import bench_spark, bench_spark_scaling
from tests.spark.conftest import spark_session


def test_bench_spark_runs_on_a_tiny_input(tmp_path: Path, capsys: Any) -> None:
    spark = spark_session()  # the session the Spark tests use (one JVM per test run)
    args = bench_spark._parser().parse_args(
        ["--fragments", "3000", "--micro-batches", "3", "--rate", "400",
         "--latency-seconds", "0.5", "--latency-warmup", "0", "--workdir", str(tmp_path / "w")]
    )
    figures = bench_spark.run(spark, args)
    n = figures["fragments"]
    assert n >= 3000
    for phase in ("evb_stream", "evb_batch", "baseline"):
        assert figures[phase]["fragments"] == n and figures[phase]["fragments_per_s"] > 0
    assert figures["evb_stream"]["events"] == figures["evb_batch"]["events"] > 0
    assert figures["baseline"]["events"] > 0
    # at most --micro-batches: each ends at the last event start within its share plus the
    # longest event
    assert 1 <= figures["evb_stream"]["micro_batches"] <= 3
    assert 0 <= figures["evb_stream"]["start_to_first_batch_s"] <= figures["evb_stream"][
        "from_start_s"
    ]
    assert figures["ratio_evb_stream_over_baseline"] > 0
    latency = figures["latency"]
    assert latency["events"] > 0 and latency["p99_ms"] >= latency["p50_ms"] > 0
    assert "ratio evb streaming / baseline" in capsys.readouterr().out


def test_bench_spark_scaling_runs_on_a_tiny_input(tmp_path: Path, capsys: Any) -> None:
    """Both masters' phases on the Spark tests' session (its master cannot change in one JVM:
    the partitions do, 1 then 2), the figures summarised and the cores arithmetic printed.

    The smallest inputs the script takes: one round (a second one only runs the same queries
    again, floors first: 28 streaming queries instead of 14), and the job as a process on one
    run of 1,000 fragments, its smallest (each run is a JVM's start; with one size the script
    says it cannot tell the rate from the fixed cost, the intercept of two sizes)."""
    spark = spark_session()

    @contextmanager
    def shared(master: str) -> Iterator[Any]:
        yield spark

    args = bench_spark_scaling._parser().parse_args(
        ["--fragments", "3000", "--micro-batches", "1", "--warm-up", "300", "--rounds", "1",
         "--job-fragments", "1000", "--workdir", str(tmp_path / "w")]
    )
    figures = bench_spark_scaling.run(shared, args)
    one, two = bench_spark_scaling.MASTERS
    measured = figures["rounds"][0]
    assert measured[one]["partitions"] == 1 and measured[two]["partitions"] == 2
    # the partitions change where the work is done, never the events built
    assert measured[one]["evb_stream"]["events"] == measured[two]["evb_stream"]["events"] > 0
    for phase in ("evb_stream", "evb_source_identity", "spark_identity", "spark_identity_tuned",
                  "spark_jvm"):
        assert figures[phase][one] > 0 and figures[phase][two] > 0 and figures[phase]["scaling"] > 0
        assert measured[two][phase]["fragments"] == figures["fragments"] >= 3000
    assert figures["executor_cores_needed"] == -(-args.orderer_ingest // figures["job_per_core"])
    job = figures["job_process"]
    assert job["runs"]["quarter"]["fragments"] >= 1000 and job["runs"]["quarter"]["seconds"] > 0
    assert job["runs"]["whole"] == job["runs"]["quarter"] and job["fragments_per_s"] is None
    out = capsys.readouterr().out
    assert "scaling of the evb job local[2] / local[1]" in out
    assert "evb job / Spark's one-Python-step floor" in out and "evb spark-job as a process" in out
    assert "evb job / that floor with the job's Parquet options" in out
    assert out.count("warm-up (not counted)") == 2 and out.count("measured") == 2
    assert set(figures["start_to_first_batch_s"]) >= {"evb_stream", "spark_identity"}


def test_bench_spark_scaling_masters_are_local_n() -> None:
    assert bench_spark_scaling.cores_of("local[2]") == 2
    for bad in ("local[*]", "yarn", "local[0]"):
        with pytest.raises(ValueError, match=re.escape(bad)):
            bench_spark_scaling.cores_of(bad)
