"""``evb spark-job --format nscldaq`` (orderer/spark/output/nscldaq.py): built events come out as
the ring items NSCLDAQ's glom writes, byte for byte equal to what this file's own small writer
assembles from the sequential oracle's events; fragments whose payloads are ring items come back
unchanged inside them; a barrier passes through as its state-change item (or wrapped in
EVB_UNKNOWN_PAYLOAD when its payload is not a ring item); a streaming run stopped mid-way and
restarted (with an interrupted batch's leftovers on disk) has every event exactly once; the job
itself writes such files, its summary and its report, in local mode.

The writer here is independent of orderer.nscldaq.format on purpose: the layouts are restated
from NSCLDAQ's DataFormat.h and glom (docs/nscldaq.md, "Built events")."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import build_events, glom_batches
from orderer.job_config import JobConfig, TimestampPolicy
from orderer.spark.driver import job
from orderer.spark.output.nscldaq import NscldaqSink, ring_items
from orderer.spark.source.glom import EVENT_SPARK_SCHEMA, glom_options
from tests.spark.conftest import DT, FinishedRun
from tests.spark.logdata import write_ordered_log
from tests.spark.oracle import Event, fragments_of, glom, glom_main

# --- the tests' own NSCLDAQ writer (version 11, little-endian) -------------------------------
PHYSICS_EVENT, BEGIN_RUN, END_RUN, EVB_UNKNOWN_PAYLOAD = 30, 1, 2, 41


def item(item_type: int, body: bytes, timestamp: int, source: int, barrier: int = 0) -> bytes:
    """A ring item with a body header: {size, type}, {20, timestamp, source, barrier}, body."""
    return struct.pack("<IIIQII", 8 + 20 + len(body), item_type, 20, timestamp, source,
                       barrier) + body


def fragment(timestamp: int, source: int, barrier: int, payload: bytes) -> bytes:
    """An event-builder fragment: {timestamp, source, payload size, barrier}, payload."""
    return struct.pack("<QIII", timestamp, source, len(payload), barrier) + payload


def expected_items(events: list[Event], fragments: dict[int, Any], glom_source: int) -> bytes:
    """What glom writes for the oracle's events: a PHYSICS_EVENT per event (its body a u32
    counting itself and the fragments), a barrier's payload as it is if it is a ring item."""
    out = b""
    for event in events:
        if event.barrier:
            payload = event.payloads[0]
            size, kind = struct.unpack_from("<II", payload) if len(payload) >= 8 else (0, 0)
            if size == len(payload) and kind in (BEGIN_RUN, END_RUN, PHYSICS_EVENT):
                out += payload
            else:
                f = fragments[event.offsets[0]]
                whole = fragment(f.timestamp, f.source, f.barrier, payload)
                out += struct.pack("<II", 8 + len(whole), EVB_UNKNOWN_PAYLOAD) + whole
            continue
        body = b"".join(
            fragment(fragments[o].timestamp, fragments[o].source, 0, fragments[o].payload)
            for o in event.offsets
        )
        out += item(PHYSICS_EVENT, struct.pack("<I", len(body) + 4) + body, event.timestamp,
                    glom_source)
    return out


def readout_stream(n: int = 400) -> pa.Table:
    """What ``evb send --nscldaq`` makes of a readout's file: fragments whose payloads are the
    whole ring items (physics events; a begin run and an end run as barriers), plus one barrier
    whose payload is not a ring item."""
    rows: list[tuple[int, int, int, bytes]] = []
    rows.append((10, 1, BEGIN_RUN, item(BEGIN_RUN, b"run 7 title\0", 10, 1, BEGIN_RUN)))
    for i in range(n):
        source, stamp = 1 + i % 3, 100 + 7 * i - (i % 3)
        body = bytes([i % 256]) * (i % 9)
        rows.append((stamp, source, 0, item(PHYSICS_EVENT, body, stamp, source)))
        if i == n // 2:
            rows.append((stamp, 2, 3, b"not a ring item"))
    rows.append((10**6, 1, END_RUN, item(END_RUN, b"", 10**6, 1, END_RUN)))
    return pa.table({
        "offset": pa.array(range(len(rows)), pa.int64()),
        "source": pa.array([r[1] for r in rows], pa.int64()),
        "timestamp": pa.array([r[0] for r in rows], pa.int64()),
        "barrier": pa.array([r[2] for r in rows], pa.int64()),
        "late": pa.array([False] * len(rows)),
        "payload": pa.array([r[3] for r in rows], pa.binary()),
    })


def _expected(
    table: pa.Table,
    dt: int | None,
    glom_source: int,
    policy: str = "earliest",
    max_fragments: int = 1000,  # glom's --maxfragments default (glom.ggo)
) -> bytes:
    fragments = fragments_of(table)
    by_offset = {f.offset: f for f in fragments}
    return expected_items(glom(fragments, dt, max_fragments, policy), by_offset, glom_source)


def physics_multiplicities(items: bytes) -> list[int]:
    """How many fragments each PHYSICS_EVENT of a ring-item stream holds, read from the bytes:
    after the item and body headers, a u32 (itself and the fragments), then fragments, each a
    20-byte header (timestamp, source, payload size, barrier) and its payload."""
    counts, at = [], 0
    while at < len(items):
        size, kind = struct.unpack_from("<II", items, at)
        if kind == PHYSICS_EVENT:
            (inner,) = struct.unpack_from("<I", items, at + 28)
            cursor, stop, n = at + 32, at + 28 + inner, 0
            while cursor < stop:
                (length,) = struct.unpack_from("<I", items, cursor + 12)
                cursor, n = cursor + 20 + length, n + 1
            assert cursor == stop
            counts.append(n)
        at += size
    return counts


def glom_multiplicities(table: pa.Table, dt: int, maxfragments: int) -> list[int]:
    """The fragments in each event glom's own loop (glomMain.cpp, transcribed: ``glom_main``)
    builds of the stream, barriers left out (they are not PHYSICS_EVENT items)."""
    barrier = table.column("barrier").to_pylist()
    events = glom_main(table.column("timestamp").to_pylist(), barrier, dt, maxfragments)
    return [len(event) for event in events if not barrier[event[0]]]


def _concatenated(directory: Path) -> bytes:
    """``cat DIR/*.evt`` in name order, as the format promises it can be read."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("[!.]*.evt")))


# --- without Spark ----------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["earliest", "latest", "average"])
def test_events_are_glom_ring_items_byte_for_byte(policy: str) -> None:
    table = readout_stream()
    events = build_events(table, GlomConfig(20, 1000, TimestampPolicy(policy)))
    got = ring_items(events, 77)
    assert got == _expected(table, 20, 77, policy)
    # the first item is the begin run as it arrived; a PHYSICS_EVENT carries its fragments'
    # ring items whole, so reading them back gives the readout's items unchanged
    first = table.column("payload")[0].as_py()
    assert got.startswith(first)
    size, kind, _, _stamp, source, _ = struct.unpack_from("<IIIQII", got, len(first))
    assert (kind, source) == (PHYSICS_EVENT, 77)
    (count,) = struct.unpack_from("<I", got, len(first) + 28)
    assert count == size - 28
    _ts, _src, length, barrier = struct.unpack_from("<QIII", got, len(first) + 32)
    inner = got[len(first) + 52 : len(first) + 52 + length]
    assert inner == table.column("payload")[1].as_py() and barrier == 0


@pytest.mark.parametrize("max_fragments", [1, 2, 3, None])
def test_max_fragments_n_writes_events_of_up_to_n_plus_1_fragments_as_glom(
    max_fragments: int | None,
) -> None:
    """glom's ``--maxfragments N`` (glomMain.cpp, ``accumulateEvent``: the open event is flushed
    when ``fragmentCount > maxFragments``, checked before the fragment is added) writes
    PHYSICS_EVENT items of up to N + 1 fragments: 1 pairs, 2 triples; unset, glom's default 1000
    (glom.ggo). The readout's fragments are 7 ticks apart, so dt 40 would take about six."""
    table = readout_stream()
    config = GlomConfig(40) if max_fragments is None else GlomConfig(40, max_fragments)
    n = config.max_fragments
    got = ring_items(build_events(table, config), 3)
    assert got == _expected(table, 40, 3, max_fragments=n)
    sizes = physics_multiplicities(got)
    assert sizes == glom_multiplicities(table, 40, n)
    assert max(sizes) == (n + 1 if max_fragments is not None else 6)


def test_a_barrier_without_a_ring_item_is_wrapped_as_glom_wraps_it() -> None:
    table = readout_stream()
    got = ring_items(build_events(table, GlomConfig(20)), 0)
    wrapped = struct.pack("<II", 8 + 20 + 15, EVB_UNKNOWN_PAYLOAD)
    at = got.index(wrapped)
    assert got[at + 8 : at + 8 + 20 + 15] == fragment(
        100 + 7 * 200 - 2, 2, 3, b"not a ring item"
    )


# --- the job, and the sink across a restart ---------------------------------------------------
def test_the_job_writes_ring_items_summary_and_report(spark: Any, tmp_path: Path) -> None:
    table = readout_stream(3000)
    data = write_ordered_log(tmp_path / "data", table, batch=500)
    out = tmp_path / "out"
    result = job.run(spark, JobConfig.from_argv([
        "--path", str(data), "--dt", "20", "--output", str(out), "--run", "r7",
        "--format", "nscldaq", "--glom-source-id", "5", "--partitions", "3", "--quiet",
    ]))
    events_dir = out / "events" / "run=r7"
    files = sorted(p.name for p in events_dir.glob("*.evt"))
    assert len(files) > 1 and files[0] == "000000000000-00000.evt"
    assert _concatenated(events_dir) == _expected(table, 20, 5)
    assert result.summary["fragments"] == table.num_rows
    assert (out / "runs" / "r7" / "report" / "index.html").is_file()
    building = json.loads((events_dir / "_nscldaq" / "000000000000.json").read_text())
    assert sum(building["files"].values()) == len(_concatenated(events_dir))


@pytest.mark.parametrize("max_fragments", [1, 2, 3, None])
def test_the_job_builds_as_glom_maxfragments(
    spark: Any, tmp_path: Path, max_fragments: int | None
) -> None:
    """``evb spark-job --max-fragments N --format nscldaq`` writes what glom ``--maxfragments N``
    writes (glomMain.cpp, ``accumulateEvent``: up to N + 1 fragments an event); without the flag,
    glom's default (1000). Three partitions, so events are cut where the limit ends them."""
    table = readout_stream(900)
    data = write_ordered_log(tmp_path / "data", table, batch=128)
    out = tmp_path / "out"
    flag = [] if max_fragments is None else ["--max-fragments", str(max_fragments)]
    job.run(spark, JobConfig.from_argv([
        "--path", str(data), "--dt", "40", "--output", str(out), "--run", "m",
        "--format", "nscldaq", "--partitions", "3", "--quiet", *flag,
    ]))
    n = 1000 if max_fragments is None else max_fragments
    written = _concatenated(out / "events" / "run=m")
    assert written == _expected(table, 40, 0, max_fragments=n)
    assert physics_multiplicities(written) == glom_multiplicities(table, 40, n)


def test_bad_glom_source_id_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    status = job.main(["--path", ".", "--dt", "1", "--output", "/tmp/x", "--format", "nscldaq",
                       "--glom-source-id", str(2**32)])
    assert status == 2
    assert "--glom-source-id" in capsys.readouterr().err


def _stream(spark: Any, target: str, out: Path, config: GlomConfig) -> Any:
    def build(batches: Any) -> Any:
        return glom_batches(batches, config)

    events = (
        spark.readStream.format("evb").option("target", target).options(**glom_options(config))
        .option("numPartitions", 2).option("consumer", out.name)
        .option("maxFragmentsPerTrigger", 150).load().mapInArrow(build, EVENT_SPARK_SCHEMA)
    )
    return (
        events.writeStream.foreachBatch(NscldaqSink(spark, str(out / "events"), 9))
        .option("checkpointLocation", str(out / "checkpoint")).start()
    )


def test_a_restarted_streaming_run_writes_each_event_once(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    config = GlomConfig(DT)
    expected = _expected(finished_run.fragments, DT, 9)
    query = _stream(spark, finished_run.target, tmp_path, config)
    deadline = time.monotonic() + 120
    while (query.lastProgress or {}).get("batchId", -1) < 2:
        assert time.monotonic() < deadline and query.isActive
        time.sleep(0.1)
    query.stop()
    events = tmp_path / "events"
    written = _concatenated(events)
    assert 0 < len(written) < len(expected) and expected.startswith(written)
    # a driver killed inside the next batch: a whole file of it, a partial one, no manifest
    sink = NscldaqSink(spark, str(events), 9)
    following = max(sink.committed()) + 1
    (events / f"{following:012d}-00000.evt").write_bytes(b"\0" * 40)
    (events / f".tmp-{following:012d}-00001.evt").write_bytes(b"partial")
    before = {p.name: p.stat().st_mtime_ns for p in events.glob("[!.]*.evt")}
    query = _stream(spark, finished_run.target, tmp_path, config)
    query.processAllAvailable()
    query.stop()
    assert _concatenated(events) == expected
    assert not list(events.glob(".tmp-*"))
    after = {p.name: p.stat().st_mtime_ns for p in events.glob("[!.]*.evt")}
    assert all(after[n] == t for n, t in before.items() if not n.startswith(f"{following:012d}"))
    # Spark calling again with a batch id already written writes nothing
    sink(spark.createDataFrame([], EVENT_SPARK_SCHEMA), 0)
    assert _concatenated(events) == expected
    assert sink.summary_rows("event long").count() == len(glom(fragments_of(
        finished_run.fragments), DT))
