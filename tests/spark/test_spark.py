"""The ``evb`` data source and the Spark job in PySpark local mode against a real ``evb serve``:
the events equal the sequential oracle for partition counts {1, 2, 7} and micro-batch sizes
from one fragment up (including sizes that split events); a streaming query stopped mid-run and
restarted from its checkpoint neither loses nor duplicates; the batch read of the finished
run's log directory equals the streamed result; the job writes Parquet, summary, plots and page
that agree with the oracle."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orderer.apps.send import send_synthetic
from orderer.building.config import GlomConfig
from orderer.building.glom import glom_batches
from orderer.client import end_run, get_stats
from orderer.job_config import JobConfig, OutputFormat
from orderer.replay.synthetic import SyntheticRun
from orderer.spark.driver import batch, checks, job
from orderer.spark.output.layout import run_name
from orderer.spark.source.glom import EVENT_SPARK_SCHEMA, glom_options
from tests.e2e.conftest import ServerProcess
from tests.spark.conftest import DT, RUN, SERVE_FLAGS, FinishedRun, source_rows
from tests.spark.oracle import events_of, fragments_of, glom

TIMEOUT = 240.0


def _build(config: GlomConfig) -> Any:
    def build(batches: Any) -> Any:
        return glom_batches(batches, config)

    return build


def _stream(
    spark: Any,
    target: str,
    out: Path,
    config: GlomConfig,
    *,
    partitions: int,
    per_trigger: int | None = None,
    until: int | None = None,
) -> Any:
    reader = (
        spark.readStream.format("evb")
        .option("target", target)
        .options(**glom_options(config))
        .option("numPartitions", partitions)
        .option("consumer", out.name)
    )
    if per_trigger is not None:
        reader = reader.option("maxFragmentsPerTrigger", per_trigger)
    if until is not None:
        reader = reader.option("endingOffset", until)
    events = reader.option("output", "events").load()  # as the job reads: built where read
    return (
        events.writeStream.format("parquet")
        .option("path", str(out / "events"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )


@pytest.mark.parametrize(
    ("partitions", "per_trigger", "until", "config"),
    [
        (1, None, None, GlomConfig(DT, 4)),
        (7, None, None, GlomConfig(DT, 1000, "average")),
        (2, 37, 400, GlomConfig(DT, 4, "latest")),  # batches of 37 would split events
        (7, 1, 30, GlomConfig(DT, 4)),  # one fragment per trigger: one whole event each
        (2, 50, 300, GlomConfig(None)),  # no-build mode
    ],
)
def test_streamed_events_equal_the_sequential_oracle(
    spark: Any,
    finished_run: FinishedRun,
    tmp_path: Path,
    partitions: int,
    per_trigger: int | None,
    until: int | None,
    config: GlomConfig,
) -> None:
    fragments = fragments_of(finished_run.fragments)[:until]
    expected = glom(fragments, config.dt, config.max_fragments, str(config.timestamp_policy))
    query = _stream(
        spark, finished_run.target, tmp_path, config,
        partitions=partitions, per_trigger=per_trigger, until=until,
    )
    query.processAllAvailable()
    batches = query.lastProgress["batchId"] + 1
    query.stop()
    got = events_of(spark.read.parquet(str(tmp_path / "events")).toArrow())
    assert got == expected
    assert sum(e.late for e in got) > 0 or until is not None
    if per_trigger is not None:  # the run really went through several micro-batches
        assert batches > min(len(expected), len(fragments) // per_trigger) // 2


def test_a_query_restarted_from_its_checkpoint_neither_loses_nor_duplicates(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    config = GlomConfig(DT, 4)
    expected = glom(fragments_of(finished_run.fragments), DT, 4)
    query = _stream(spark, finished_run.target, tmp_path, config, partitions=2, per_trigger=150)
    deadline = time.monotonic() + TIMEOUT
    while (query.lastProgress or {}).get("batchId", -1) < 2:
        assert time.monotonic() < deadline and query.isActive
        time.sleep(0.1)
    query.stop()  # mid-run: some batches written, the rest not
    written = spark.read.parquet(str(tmp_path / "events")).count()
    assert 0 < written < len(expected)
    query = _stream(spark, finished_run.target, tmp_path, config, partitions=2, per_trigger=150)
    query.processAllAvailable()
    first_after_restart = query.recentProgress[0]["batchId"]
    query.stop()
    assert first_after_restart >= 2  # it went on from the checkpoint, not from the start
    got = events_of(spark.read.parquet(str(tmp_path / "events")).toArrow())
    assert got == expected


def test_batch_read_of_the_finished_runs_log_equals_the_streamed_result(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    config = GlomConfig(DT, 4)
    query = _stream(spark, finished_run.target, tmp_path, config, partitions=2, per_trigger=400)
    query.processAllAvailable()
    query.stop()
    streamed = events_of(spark.read.parquet(str(tmp_path / "events")).toArrow())
    for partitions in (1, 2, 7):
        fragments = (
            spark.read.format("evb")
            .option("path", str(finished_run.data_dir))
            .options(**glom_options(config))
            .option("numPartitions", partitions)
            .load()
        )
        assert fragments.rdd.getNumPartitions() == partitions
        # fragments built by a mapInArrow of their own, and events built where read
        batch = events_of(fragments.mapInArrow(_build(config), EVENT_SPARK_SCHEMA).toArrow())
        assert batch == streamed
        built = fragments.sparkSession.read.format("evb").options(
            path=str(finished_run.data_dir), numPartitions=str(partitions), output="events",
            **glom_options(config),
        ).load()
        assert built.rdd.getNumPartitions() == partitions
        assert events_of(built.toArrow()) == streamed
    assert streamed == glom(fragments_of(finished_run.fragments), DT, 4)


def test_the_job_has_one_python_step(spark: Any, finished_run: FinishedRun) -> None:
    """The job's events are built where the source reads them: the physical plan holds the
    source's scan and no Python stage after it (no MapInArrow, no Python UDF)."""
    args = JobConfig.from_argv(
        ["--path", str(finished_run.data_dir), "--dt", str(DT), "--output", "unused"]
    )
    events = batch.batch_events(spark, args, checks.glom_config(args))
    plan = events._jdf.queryExecution().executedPlan().toString()
    assert "PythonDataSource" in plan or "BatchScan" in plan, plan
    for python_stage in ("MapInArrow", "MapInPandas", "PythonUDF", "ArrowEvalPython"):
        assert python_stage not in plan, plan


def test_the_job_consumes_a_live_run_and_writes_events_summary_and_report(
    spark: Any, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    server = ServerProcess(tmp_path / "data", logs, *SERVE_FLAGS).start()
    try:

        def play() -> None:  # once the job's query registered: it consumes the run live
            deadline = time.monotonic() + TIMEOUT
            while not (tmp_path / "data" / "consumers.json").exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            send_synthetic(server.target, RUN, speed=1.0, progress=False)
            end_run(server.target)

        sender = threading.Thread(target=play)
        sender.start()
        out = tmp_path / "out"
        args = JobConfig.from_argv(
            ["--target", server.target, "--dt", str(DT), "--output", str(out), "--run", "r1",
             "--quiet", "--poll", "0.2"]
        )
        result = job.run(spark, args)  # returns once the run ended and all was consumed
        sender.join()
        fragments = source_rows(server.target, result.summary["next_offset"])
        # the last batch is committed too: the finished job holds nothing from retention
        consumers = get_stats(server.target).consumers
        assert consumers["evb-spark-job"].committed == result.summary["next_offset"]
        assert consumers["evb-spark-job"].lag == 0
    finally:
        server.stop()
    expected = glom(fragments_of(fragments), DT)
    streamed = events_of(pa.Table.from_batches(
        spark.read.parquet(str(out / "events")).drop("run").toArrow().to_batches()
    ))
    assert streamed == expected
    assert result.batches > 1  # it consumed the run while it was going on
    summary = json.loads((out / "runs" / "r1" / "summary.json").read_text())
    assert summary["events"] == sum(1 for e in expected if not e.barrier)
    assert summary["barrier_rows"] == sum(1 for e in expected if e.barrier)
    assert summary["fragments"] == len(fragments) == fragments.num_rows
    assert summary["late"]["fragments"] == sum(e.late for e in expected) > 0
    histogram = summary["multiplicity"]["histogram"]
    assert sum(int(m) * c for m, c in histogram.items()) + summary["barrier_rows"] == len(fragments)
    assert {b["type"] for b in summary["barriers"]} == {1, 2, 3}
    assert set(summary["sources"]) == {"1", "2", "3", "4"}
    for name in ("rates.png", "lateness.png", "multiplicity.png"):
        assert (out / "runs" / "r1" / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rates.png" in (out / "runs" / "r1" / "report" / "index.html").read_text()
    assert (out / "events" / "run=r1").is_dir()
    assert (out / "runs" / "r1" / "checkpoint").is_dir()

    # the batch job on the finished run's directory builds the same events
    batch_out = tmp_path / "batch"
    args = JobConfig.from_argv(
        ["--path", str(tmp_path / "data"), "--dt", str(DT), "--output", str(batch_out),
         "--run", "r1", "--quiet", "--partitions", "3"]
    )
    batch_result = job.run(spark, args)
    batch = spark.read.parquet(str(batch_out / "events")).drop("run").toArrow()
    assert events_of(batch) == expected
    assert batch_result.summary["events"] == summary["events"]


def test_spark_job_help_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from orderer.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["spark-job", "--help"])
    assert exit_info.value.code == 0
    assert "--timestamp-policy" in capsys.readouterr().out
    assert main(["spark-job", "--target", "127.0.0.1:1", "--output", "x"]) == 2
    assert "--dt" in capsys.readouterr().err


def test_the_sparkapplication_runs_this_job_with_arguments_it_accepts() -> None:
    """The operator's SparkApplication names ``local:///opt/evb/orderer/spark/driver/job.py``;
    Dockerfile.spark links /opt/evb/orderer to the installed ``orderer`` package (COPY orderer/,
    ``orderer.spark.driver`` a package the build finds); the arguments the operator builds parse,
    and the output formats are the CRD's."""
    import tomllib

    from evb_operator import constants, crd, validation
    from evb_operator.specs import spark as specs_spark

    repo = Path(__file__).resolve().parents[2]
    relative = constants.SPARK_JOB_FILE.removeprefix("local:///opt/evb/")
    assert (repo / relative).is_file() and relative == "orderer/spark/driver/job.py"
    dockerfile = (repo / "Dockerfile.spark").read_text()
    assert "COPY orderer/ orderer/" in dockerfile and "/opt/evb/orderer" in dockerfile
    packages = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    from setuptools import find_packages

    found = find_packages(str(repo), include=packages["packages"]["find"]["include"])
    assert "orderer.spark.driver" in found  # the main file's package, in the wheel
    spark_spec = {"dt": 250, "timestampPolicy": "average",
                  "output": {"path": "s3a://bucket/run", "format": "json"}}
    typed = validation.validate({"spark": spark_spec}).spark
    assert typed is not None
    config = specs_spark.spark_job_config("run-42", "daq", typed)
    args = JobConfig.from_argv(config.to_argv())
    assert args == config
    assert (args.dt, args.timestamp_policy, args.format) == (250, "average", "json")
    assert run_name(args) == "run-42"
    spark_schema = crd.definition._spec_schema()["properties"]["spark"]
    formats = spark_schema["properties"]["output"]["properties"]["format"]["enum"]
    assert tuple(formats) == tuple(OutputFormat)


def test_the_source_reads_an_orderer_serving_tls_and_a_token(spark: Any, tmp_path: Path) -> None:
    """The security options reach every channel: the driver's planning and commits and the
    executors' reads; without them the orderer refuses the query."""
    from orderer.client import ChannelSecurity
    from tests.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server_pem = ca.issue("server", server=True)
    token = tmp_path / "token"
    token.write_text("spark-token-123\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    server = ServerProcess(
        tmp_path / "data", logs, *SERVE_FLAGS, "--tls-cert", str(server_pem.cert),
        "--tls-key", str(server_pem.key), "--token-file", str(token),
    ).start()
    security = ChannelSecurity.from_files(ca=ca.cert, token_file=token)
    try:
        small = SyntheticRun(n_sources=4, fragments_per_source=40, rate=400.0, batch_size=5,
                             payload_size=8, seed=9)
        send_synthetic(server.target, small, speed=0.0, progress=False,
                       client_options={"security": security})
        last = end_run(server.target, security=security)
        config = GlomConfig(DT, 4)
        options = {"target": server.target, "tlsCa": str(ca.cert), "tokenFile": str(token),
                   **glom_options(config), "consumer": "tls"}
        query = (
            spark.readStream.format("evb").options(**options).option("numPartitions", 2).load()
            .mapInArrow(_build(config), EVENT_SPARK_SCHEMA).writeStream.format("parquet")
            .option("path", str(tmp_path / "events"))
            .option("checkpointLocation", str(tmp_path / "checkpoint")).start()
        )
        query.processAllAvailable()
        query.stop()
        got = events_of(spark.read.parquet(str(tmp_path / "events")).toArrow())
        assert sum(e.multiplicity for e in got) == last > 0
        with pytest.raises(Exception, match=r"ServiceUnavailable|UNAUTHENTICATED"):
            spark.read.format("evb").option("target", server.target).option(
                "reconnectTimeout", "2").load().count()
    finally:
        server.stop()
