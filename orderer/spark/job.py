"""The evb Spark job: ordered stream -> built events (Parquet, partitioned by run) -> run summary
(JSON) and report (PNG plots + HTML).

Run as ``evb spark-job ...`` or as the SparkApplication's main file
(``spark-submit local:///opt/evb/orderer/spark/job.py --target ... --dt ...``). With
``--target`` it reads the live orderer as a stream (:mod:`orderer.spark.source`), writes the
events with Spark's file sink (exactly once: the checkpoint and the sink's log), and finishes by
itself once the run ended and everything was consumed (``GetStats.run_ended``; the
SparkApplication relies on that). With ``--path`` it reads a finished run's log directory in one
batch. Either way the events are built by :func:`orderer.spark.glom.glom_batches` on the
executors, one partition at a time, and the source only cuts where events start, so the events
are the sequential glom's.

Output layout under ``--output``: ``events/run=<run>/`` (Parquet or JSON), ``summary.json``,
``report/`` (``rates.png``, ``lateness.png``, ``multiplicity.png``, ``index.html``),
``_checkpoint/`` (the streaming query's). A Hadoop URI (``s3a://``, ``hdfs://``) is accepted:
the summary and the report are written locally first and copied there.

The SparkSession is created only in :func:`main`; :func:`run` takes one (the tests share theirs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JobResult", "build_parser", "main", "run"]

FORMATS = ("parquet", "json")
"""Output formats, as the EventBuilder CRD allows (spec.spark.output.format)."""


@dataclass
class JobResult:
    summary: dict[str, Any]
    events_path: str
    summary_path: str
    report_path: str
    batches: int


def build_parser() -> argparse.ArgumentParser:
    from orderer.cli import add_security_arguments

    parser = argparse.ArgumentParser(
        prog="evb spark-job",
        description="Build events from the ordered stream with Spark and write them with a run "
        "summary and a report.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", metavar="HOST:PORT", help="a live orderer: read it as a stream")
    where.add_argument(
        "--path", type=Path, metavar="DIR", help="a finished run's data directory: read it at once"
    )
    parser.add_argument("--dt", type=int, help="glom window in timestamp ticks (required to build)")
    parser.add_argument("--no-build", action="store_true", help="one event per fragment")
    parser.add_argument("--max-fragments", type=int, default=1000, help="most fragments per event")
    parser.add_argument(
        "--timestamp-policy", choices=["earliest", "latest", "average"], default="earliest"
    )
    parser.add_argument("--output", required=True, help="output directory or Hadoop URI")
    parser.add_argument("--format", choices=FORMATS, default="parquet")
    parser.add_argument("--run", help="run name (default: from the target, else 'run')")
    parser.add_argument("--checkpoint", help="checkpoint location (default OUTPUT/_checkpoint)")
    parser.add_argument("--partitions", type=int, default=2, help="partitions per micro-batch")
    parser.add_argument(
        "--max-fragments-per-trigger", type=int, help="cap on a micro-batch (whole events)"
    )
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=0.0,
        help="micro-batch interval; 0: Spark's default (as soon as the last one is done)",
    )
    parser.add_argument("--consumer", default="evb-spark-job", help="name of the commits")
    parser.add_argument("--tick-rate", type=float, default=1e8, help="timestamp ticks per second")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[2])")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between end-of-run checks")
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    # each defaults to the variable the operator sets in the SparkApplication's pods; strings,
    # as the evb data source takes its options
    add_security_arguments(
        parser, "security (a TLS orderer; the files must exist on driver and executors)", str
    )
    return parser


def _security_options(args: argparse.Namespace) -> dict[str, str]:
    """The job's security flags as options of the evb data source."""
    given = {
        "tlsCa": args.tls_ca,
        "tlsCert": args.tls_cert,
        "tlsKey": args.tls_key,
        "tokenFile": args.token_file,
        "tls": "true" if args.tls else None,
    }
    return {name: str(value) for name, value in given.items() if value}


def _glom(args: argparse.Namespace) -> Any:
    from orderer.errors import ConfigError
    from orderer.spark.glom import GlomConfig

    if args.no_build:
        return GlomConfig(None, args.max_fragments, args.timestamp_policy)
    if args.dt is None:
        raise ConfigError("--dt", None, "is required (or --no-build)")
    return GlomConfig(args.dt, args.max_fragments, args.timestamp_policy)


def _run_name(args: argparse.Namespace) -> str:
    if args.run:
        return str(args.run)
    if args.target:  # <name>-orderer.<namespace>.svc:50051, as the operator names it
        host = args.target.rsplit(":", 1)[0].split(".")[0]
        name = host.removesuffix("-orderer")
        if name and not re.fullmatch(r"[\d\[\]:]+|localhost", name):
            return name
    return "run"


def _local(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    return None if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", uri) else Path(uri)


def _publish(spark: Any, local: Path, uri: str) -> None:
    """Copy a local file or directory to a Hadoop URI (s3a://, hdfs://)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    destination = jvm.org.apache.hadoop.fs.Path(uri)
    filesystem = destination.getFileSystem(conf)
    source = jvm.org.apache.hadoop.fs.Path(str(local))
    filesystem.copyFromLocalFile(False, True, source, destination)


def _builder(glom: Any) -> Any:
    from orderer.spark.glom import glom_batches

    def build(batches: Iterator[Any]) -> Iterator[Any]:
        return glom_batches(batches, glom)

    return build


def _stream(spark: Any, args: argparse.Namespace, glom: Any, events_path: str, run: str) -> int:
    from pyspark.sql import functions as F

    from orderer.client import get_stats
    from orderer.errors import ServiceUnavailable
    from orderer.spark.glom import EVENT_SPARK_SCHEMA
    from orderer.spark.source import _security

    security = _security(tuple(_security_options(args).items()))

    reader = (
        spark.readStream.format("evb")
        .option("target", args.target)
        .options(**glom.to_options())
        .option("numPartitions", args.partitions)
        .option("consumer", args.consumer)
        .options(**_security_options(args))
    )
    if args.max_fragments_per_trigger:
        reader = reader.option("maxFragmentsPerTrigger", args.max_fragments_per_trigger)
    events = reader.load().mapInArrow(_builder(glom), EVENT_SPARK_SCHEMA)
    writer = (
        events.withColumn("run", F.lit(run))
        .writeStream.format(args.format)
        .option("path", events_path)
        .option("checkpointLocation", args.checkpoint or f"{args.output}/_checkpoint")
        .partitionBy("run")
        .queryName(f"evb-{run}")
    )
    if args.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    query = writer.start()
    try:
        while True:  # until the run ended; then read to its end and stop
            if query.awaitTermination(args.poll):
                break
            try:
                ended = get_stats(args.target, security=security)["run_ended"]
            except ServiceUnavailable as error:  # the orderer restarts: the query retries too
                print(f"evb spark-job: orderer unavailable, waiting: {error}", file=sys.stderr)
                continue
            if ended:
                query.processAllAvailable()
                break
    finally:
        batches = int(query.lastProgress["batchId"]) + 1 if query.lastProgress else 0
        query.stop()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"the streaming query failed: {error}")
    return batches


def _batch(spark: Any, args: argparse.Namespace, glom: Any, events_path: str, run: str) -> int:
    from pyspark.sql import functions as F

    from orderer.spark.glom import EVENT_SPARK_SCHEMA

    fragments = (
        spark.read.format("evb")
        .option("path", str(args.path))
        .options(**glom.to_options())
        .option("numPartitions", args.partitions)
        .load()
    )
    events = fragments.mapInArrow(_builder(glom), EVENT_SPARK_SCHEMA)
    (
        events.withColumn("run", F.lit(run))
        .write.format(args.format)
        .mode("overwrite")
        .partitionBy("run")
        .save(events_path)
    )
    return 1


def run(spark: Any, args: argparse.Namespace) -> JobResult:
    """Build the events, then write the summary and the report; returns where they are."""
    from pyspark.sql import functions as F

    from orderer.spark.report import write_report
    from orderer.spark.source import register
    from orderer.spark.summary import SUMMARY_COLUMNS, summarize

    register(spark)
    glom = _glom(args)
    name = _run_name(args)
    output = str(args.output).rstrip("/")
    events_path = f"{output}/events"
    started = time.monotonic()
    if args.target:
        batches = _stream(spark, args, glom, events_path, name)
    else:
        batches = _batch(spark, args, glom, events_path, name)
    built = time.monotonic() - started

    events = spark.read.format(args.format).load(events_path).where(F.col("run") == name)
    columns = [F.col(expression).alias(alias) for alias, expression in SUMMARY_COLUMNS.items()]
    table = events.select(*columns).toArrow()
    glom_info = {
        "dt": glom.dt,
        "max_fragments": glom.max_fragments,
        "timestamp_policy": str(glom.timestamp_policy),
    }
    summary = summarize(table, run=name, tick_rate=args.tick_rate, glom=glom_info)
    summary.data["build_seconds"] = round(built, 3)
    summary.data["micro_batches"] = batches
    summary.data["events_path"] = f"{events_path}/run={name}"

    local = _local(output)
    with tempfile.TemporaryDirectory() as scratch:
        base = local if local is not None else Path(scratch)
        base.mkdir(parents=True, exist_ok=True)
        summary_file = base / "summary.json"
        summary_file.write_text(json.dumps(summary.as_dict(), indent=2), encoding="utf-8")
        write_report(summary, base / "report")
        if local is None:
            _publish(spark, summary_file, f"{output}/summary.json")
            _publish(spark, base / "report", f"{output}/report")
    result = JobResult(
        summary=summary.as_dict(),
        events_path=f"{events_path}/run={name}",
        summary_path=f"{output}/summary.json",
        report_path=f"{output}/report/index.html",
        batches=batches,
    )
    if not args.quiet:
        print(json.dumps(summary.as_dict(), indent=2))
        print(f"events:  {result.events_path}")
        print(f"summary: {result.summary_path}")
        print(f"report:  {result.report_path}")
    return result


def create_session(master: str | None, app: str = "evb-spark-job") -> Any:
    """The job's SparkSession (spark-submit's master when it set one, else ``master`` or
    ``local[2]``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    builder = SparkSession.builder.appName(app)
    if master or not conf.contains("spark.master"):
        builder = builder.master(master or "local[2]")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not conf.contains("spark.sql.shuffle.partitions"):  # the job shuffles nothing big
        builder = builder.config("spark.sql.shuffle.partitions", "4")
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    """``evb spark-job``: exit status 0, 2 for bad arguments (naming the flag), 1 on failure."""
    from orderer.errors import ConfigError

    args = build_parser().parse_args(argv)
    try:
        _glom(args)
    except ConfigError as error:
        print(f"evb spark-job: {error}", file=sys.stderr)
        return 2
    spark = create_session(args.master)
    try:
        run(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
