"""Benchmark of the Spark consumer: ordered log -> Parquet events in ``local[2]``, against the way
a data engineer would otherwise do it, and end-to-end latency.

Not a pytest test: run it as ``python tests/bench/bench_spark.py [--fragments N]`` (with the
repository on ``PYTHONPATH``, or from the checkout). One run, one data set, one SparkSession:

0. the data (not timed): a real ``evb serve`` on 127.0.0.1 takes a synthetic run (six sources,
   16-byte payloads, a source delivering a late backlog, sync barriers) as fast as it can and
   ends the run; its ordered log is the input of every phase;
1. evb, streaming: ``spark.readStream.format("evb")`` from the live orderer over gRPC, the events
   built where the executors read them (``output`` = ``events``, as the job reads), Spark's
   Parquet file sink with the job's options (:func:`orderer.spark.output.writer.writer_options`) and
   a checkpoint, at most ``--micro-batches`` micro-batches (``maxFragmentsPerTrigger``: the share
   of one, plus the longest event, since a micro-batch ends at the last event start within its
   limit); timed from the start of its first micro-batch to the last batch committed, the time
   from ``start()`` to the first micro-batch printed beside it (:func:`run_query`);
2. evb, batch: ``spark.read.format("evb")`` of the finished run's log directory -> Parquet;
3. the peer baseline, the same fragments exported (not timed) to as many Parquet files as there
   are micro-batches, the way they would land from a message bus: Structured Streaming reads them
   (``maxFilesPerTrigger=1``), declares an event-time watermark and drops resent duplicates within
   it (``dropDuplicatesWithinWatermark``), and ``foreachBatch`` sorts the micro-batch by event
   time, collects it to the driver, glooms it there with the open event carried from the previous
   batch (the same :func:`~orderer.building.glom.event_starts` and
   :func:`~orderer.building.glom.build_events`) and writes Parquet; timed as evb's stream; ratio
   evb / baseline;
4. latency at the default trigger: a fresh ``evb serve``, four paced sources (``--rate`` in all,
   ``--latency-seconds``) whose payload is the wall-clock time of the send, the job's streaming
   query (default trigger: a micro-batch as soon as the previous one is done); an event's latency
   is the modification time of the Parquet file it landed in minus the send time of its last
   fragment (loopback, client linger 2 ms: send ~ arrival at the orderer). The first
   ``--latency-warmup`` seconds are left out.

``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

# As evb sets it (orderer/cli/__init__.py): this process asks an orderer over gRPC, then starts
# Spark's JVM (a fork with a preexec_fn), which gRPC's fork support can kill or hang
# (grpc/grpc#43055).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orderer.apps.send import send_synthetic  # noqa: E402
from orderer.building.config import GlomConfig  # noqa: E402
from orderer.building.glom import build_events, event_starts, fragment_rows  # noqa: E402
from orderer.client import SourceClient, end_run  # noqa: E402
from orderer.formats.payloads import ordered_batches  # noqa: E402
from orderer.replay.synthetic import Stall, SyntheticRun  # noqa: E402
from orderer.spark.driver.demo import _Server  # noqa: E402
from orderer.spark.source.access import segment_files  # noqa: E402
from orderer.spark.source.glom import glom_options  # noqa: E402

DT = 100_000
TICK_RATE = 1e8


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=2_000_000)
    parser.add_argument("--micro-batches", type=int, default=10)
    parser.add_argument("--rate", type=float, default=2000.0, help="latency: fragments/s in all")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--latency-warmup", type=float, default=3.0)
    parser.add_argument("--workdir", type=Path, help="keep the data here (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    return parser


def _timed(label: str, fragments: int, seconds: float, **more: Any) -> dict[str, Any]:
    figures = {
        "fragments": fragments,
        "seconds": round(seconds, 3),
        "fragments_per_s": round(fragments / seconds, 1),
        **more,
    }
    print(f"{label:<44} {fragments:>10,} fragments {seconds:8.2f} s "
          f"{fragments / seconds:>12,.0f} fragments/s")
    return figures


def _make_data(work: Path, fragments: int, payload: int = 16) -> tuple[_Server, int]:
    per_source = max(fragments // 6, 10)
    run = SyntheticRun(
        n_sources=6,
        fragments_per_source=per_source,
        rate=1_000.0,
        batch_size=1000,
        jitter=0.001,
        stalls=(Stall(source=5, start=0.3 * per_source / 1_000, end=0.5 * per_source / 1_000,
                      backlog=True),),
        sync_barriers=3,
        payload_size=payload,
        seed=7,
    )
    server = _Server(work / "data", work / "serve.log", "--build-window", "0.2",
                     "--startup-delay", "0", "--sources", "1,2,3,4,5,6", "--fsync", "never")
    started = time.monotonic()
    send_synthetic(server.target, run, speed=0.0, progress=False)
    last = end_run(server.target)
    print(f"data: {last:,} fragments through evb serve in {time.monotonic() - started:.1f} s")
    return server, last


def _evb_stream(
    spark: Any, target: str, out: Path, n: int, micro_batches: int, until: int | None = None,
    partitions: int = 2, label: str = "evb streaming (gRPC -> Parquet)",
) -> dict[str, Any]:
    from orderer.spark.output.writer import writer_options

    config = GlomConfig(DT)
    reader = (
        spark.readStream.format("evb").option("target", target).options(**glom_options(config))
        .option("numPartitions", partitions).option("consumer", out.name)
        .option("maxFragmentsPerTrigger", -(-n // micro_batches) + config.largest_event)
    )
    if until is not None:
        reader = reader.option("endingOffset", until)
    events = reader.option("output", "events").load()
    query = (
        events.writeStream.format("parquet").options(**writer_options("parquet"))
        .option("path", str(out / "events")).option("checkpointLocation", str(out / "checkpoint"))
        .start()
    )
    try:
        figures = run_query(query, label, n)
    finally:
        query.stop()
    figures["events"] = spark.read.parquet(str(out / "events")).count()
    return figures


def _evb_batch(spark: Any, data: Path, out: Path, n: int) -> dict[str, Any]:
    config = GlomConfig(DT)
    started = time.monotonic()
    (
        spark.read.format("evb").option("path", str(data)).options(**glom_options(config))
        .option("numPartitions", 2).option("output", "events").load()
        .write.mode("overwrite").parquet(str(out))
    )
    seconds = time.monotonic() - started
    events = spark.read.parquet(str(out)).count()
    return _timed("evb batch (log directory -> Parquet)", n, seconds, events=events)


def _export(data: Path, out: Path, files: int) -> None:
    """The ordered fragments as Parquet files, in order (what would land from a bus)."""
    table = pa.Table.from_batches(
        [fragment_rows(b) for s in segment_files(data) for b in ordered_batches(s)]
    )
    out.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for k in range(files):
        pq.write_table(table.slice(k * step, step), out / f"part-{k:05d}.parquet")


def _baseline(spark: Any, fragments_dir: Path, out: Path, n: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    config = GlomConfig(DT)
    out.mkdir(parents=True)
    carry: list[pa.Table] = []

    def glom_batch(frame: Any, batch_id: int) -> None:
        # sort by event time, collect, glom on the driver with the open event carried over
        rows = frame.orderBy("timestamp", "source").drop("event_time").toArrow()
        table = pa.concat_tables([*carry, rows.cast(carry[0].schema)]) if carry else rows
        carry.clear()
        if table.num_rows == 0:
            return
        ts = table.column("timestamp").to_numpy().view(np.uint64)
        barrier = table.column("barrier").to_numpy()
        starts = event_starts(ts, barrier, dt=DT, max_fragments=config.max_fragments)
        last = int(starts[-1])
        carry.append(table.slice(last))
        if last:
            events = build_events(table.slice(0, last), config)
            pq.write_table(pa.Table.from_batches([events]), out / f"batch-{batch_id:05d}.parquet")

    schema = spark.read.parquet(str(fragments_dir)).schema
    query = (
        spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(fragments_dir))
        .withColumn("event_time", F.timestamp_seconds(F.col("timestamp") / TICK_RATE))
        .withWatermark("event_time", "2 seconds")
        .dropDuplicatesWithinWatermark(["source", "timestamp"])
        .writeStream.foreachBatch(glom_batch)
        .option("checkpointLocation", str(out.parent / f"{out.name}-checkpoint")).start()
    )
    try:  # timed as evb's stream is (run_query); the event left open at the end is not timed
        figures = run_query(query, "baseline (watermark + sort in foreachBatch)", n)
    finally:
        query.stop()
    if carry and carry[0].num_rows:
        events = build_events(carry[0], config)
        pq.write_table(pa.Table.from_batches([events]), out / "batch-last.parquet")
    figures["events"] = pq.read_table(out, columns=["event"]).num_rows
    return figures


def _paced_sources(target: str, rate: float, seconds: float) -> int:
    """Four sources, round robin, each fragment's payload the wall-clock time of its send."""
    sources = [1, 2, 3, 4]
    sent = 0
    with SourceClient(target, sources=sources, batch_size=64, linger=0.002) as client:
        start = time.monotonic()
        origin = time.time()
        while True:
            due = start + sent / rate
            now = time.monotonic()
            if due - start > seconds:
                break
            if due > now:
                time.sleep(due - now)
            source = sources[sent % len(sources)]
            ts = int((time.time() - origin) * TICK_RATE) + 1_000_000
            client.send(source, ts, payload=struct.pack("<d", time.time()))
            sent += 1
        for source in sources:
            client.end_source(source)
    return sent


def _latency(spark: Any, work: Path, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    server = _Server(work / "latency-data", work / "latency-serve.log", "--build-window", "1",
                     "--startup-delay", "0", "--sources", "1,2,3,4")
    config = GlomConfig(DT)
    out = work / "latency"
    try:
        query = (
            spark.readStream.format("evb").option("target", server.target)
            .options(**glom_options(config)).option("numPartitions", 2)
            .option("output", "events").load()
            .writeStream.format("parquet").option("path", str(out / "events"))
            .option("checkpointLocation", str(out / "checkpoint")).start()
        )
        while not (work / "latency-data" / "consumers.json").exists():
            time.sleep(0.05)
        time.sleep(2.0)  # the query is polling: measure steady state, not its first batch
        started = time.time()
        sent = _paced_sources(server.target, rate, seconds)
        end_run(server.target)
        query.processAllAvailable()
        batches = query.lastProgress["batchId"] + 1
        query.stop()
    finally:
        server.stop()
    latencies = []
    for path in sorted((out / "events").glob("*.parquet")):
        landed = path.stat().st_mtime
        table = pq.read_table(path, columns=["barrier", "fragments"])
        for barrier, frags in zip(table.column("barrier").to_pylist(),
                                  table.column("fragments").to_pylist(), strict=True):
            if barrier:
                continue
            sends = [struct.unpack("<d", f["payload"])[0] for f in frags]
            if max(sends) - started >= warmup:
                latencies.append(landed - max(sends))
    values = np.array(latencies) * 1e3
    figures = {
        "fragments_sent": sent,
        "rate": rate,
        "micro_batches": batches,
        "events": int(values.size),
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p90_ms": round(float(np.percentile(values, 90)), 1),
        "p99_ms": round(float(np.percentile(values, 99)), 1),
        "max_ms": round(float(values.max()), 1),
    }
    print(f"latency, send -> event in the Parquet sink (default trigger, {rate:g} fragments/s): "
          f"p50 {figures['p50_ms']} ms, p90 {figures['p90_ms']} ms, p99 {figures['p99_ms']} ms, "
          f"max {figures['max_ms']} ms over {values.size:,} events in {batches} micro-batches")
    return figures


def run_query(query: Any, label: str, n: int, **more: Any) -> dict[str, Any]:
    """Run a started streaming query until it processed everything available; its figures.

    Two clocks: the rate is taken from the start of the first micro-batch to the end; the time
    from ``start()`` to the first micro-batch is the query's fixed cost, kept apart
    (``start_to_first_batch_s``, and ``from_start_s`` for the whole). Why apart: a Python data
    source's query starts a fresh Python process for the driver's side of the source (Spark's
    ``PythonWorkerFactory.createSimpleWorker``) where a file stream starts none; per job, not per
    fragment."""
    began_wall, began = time.time(), time.monotonic()
    query.processAllAvailable()
    seconds = time.monotonic() - began
    progress = query.recentProgress
    first = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    before = min(max(first - began_wall, 0.0), seconds)
    durations: dict[str, int] = {}
    for one in progress:
        for key, value in one.get("durationMs", {}).items():
            durations[key] = durations.get(key, 0) + int(value)
    figures = _timed(
        label, n, seconds - before, micro_batches=query.lastProgress["batchId"] + 1,
        start_to_first_batch_s=round(before, 3), from_start_s=round(seconds, 3),
        ms_per_phase=durations, **more,
    )
    print(f"{'':<44} {figures['micro_batches']} micro-batches; start() -> first micro-batch "
          f"{before:.2f} s; ms per phase: {durations}")
    return figures


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    from orderer.spark.source.datasource import register

    register(spark)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="evb-bench-spark-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    print(f"evb Spark benchmark: local[2], dt {DT} ticks, {os.cpu_count()} cores")
    server, n = _make_data(work, args.fragments)
    _export(work / "data", work / "fragments", args.micro_batches)
    # warm-up, not counted: the first query of a session starts the Python workers
    warm = min(n, 20_000)
    print("warm-up (not counted):")
    try:
        _evb_stream(spark, server.target, work / "warm-evb", warm, 2, until=warm)
        (work / "warm-fragments").mkdir()
        first = sorted((work / "fragments").glob("*.parquet"))[0]
        shutil.copy(first, work / "warm-fragments" / first.name)
        _baseline(spark, work / "warm-fragments", work / "warm-baseline",
                  pq.read_metadata(first).num_rows)
        print("measured:")
        stream = _evb_stream(spark, server.target, work / "evb-stream", n, args.micro_batches)
    finally:
        server.stop()
    batch = _evb_batch(spark, work / "data", work / "evb-batch", n)
    baseline = _baseline(spark, work / "fragments", work / "baseline", n)
    figures = {
        "fragments": n,
        "evb_stream": stream,
        "evb_batch": batch,
        "baseline": baseline,
        "ratio_evb_stream_over_baseline": round(
            stream["fragments_per_s"] / baseline["fragments_per_s"], 2
        ),
        "ratio_evb_batch_over_baseline": round(
            batch["fragments_per_s"] / baseline["fragments_per_s"], 2
        ),
    }
    print(f"ratio evb streaming / baseline: {figures['ratio_evb_stream_over_baseline']}x; "
          f"evb batch / baseline: {figures['ratio_evb_batch_over_baseline']}x "
          f"(events: evb {stream['events']:,}, baseline {baseline['events']:,}; the baseline "
          "sorts late fragments back to their timestamps, so its events differ there)")
    figures["latency"] = _latency(spark, work, args.rate, args.latency_seconds,
                                  args.latency_warmup)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def _write_json(path: Path | None, figures: dict[str, Any]) -> None:
    """``--json``: the figures, for the record of a ``make bench`` run."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    from orderer.spark.driver.job import create_session

    args = _parser().parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = create_session("local[2]", app="evb-bench-spark")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        figures = run(spark, args)
    finally:
        spark.stop()
    _write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
