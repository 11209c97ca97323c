"""The service's two logs (:mod:`orderer.service.logs`, written as segments by
:mod:`orderer.service.segments`, completed by :mod:`orderer.service.recovery`): the ordered
log's segments, torn tails, retention, and recovery of a crashed run from the arrival log with
every offset written exactly once.

The runs here do by hand what the service does: each arrival logged, taken in with its row in
the arrival log in place of its payload (:mod:`orderer.service.payload_rows`), the output
appended to the ordered log, which keeps the rows; payloads are read back from the arrival
log."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from orderer import (
    EmittedBatch,
    FragmentBatch,
    InterfaceError,
    InternalOrdererError,
    Orderer,
    OrdererConfig,
)
from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.clock import SimulatedClock
from orderer.formats.json_lines import read_records
from orderer.formats.payloads import ArrivalPayloads, with_payloads
from orderer.replay.simulate import replay
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.payload_rows import fragments_with_rows, rows_of
from orderer.service.recovery import recover
from orderer.service.segments import FsyncPolicy

CONFIG = OrdererConfig(build_window=2.0, startup_delay=0.5, source_timeout=None)


def _live_run(
    directory: Path, *, steps: int = 60, segment_bytes: int = 4096, timer_after_last: bool = True
) -> tuple[ArrivalLog, OrderedLog]:
    """What the service does: log each arrival, take it in, append what was emitted."""
    arrivals = ArrivalLog.open(directory / "arrivals", segment_bytes=segment_bytes)
    ordered = OrderedLog.open(directory / "ordered", segment_bytes=segment_bytes)
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    rng = np.random.default_rng(3)
    t = 0.0
    for step in range(steps):
        t += float(rng.uniform(0.05, 0.4))
        source = int(rng.integers(1, 4))
        if source == 3 and 20 < step < 35:
            continue  # a stall of source 3
        first = step * 10
        stamps = np.sort(rng.integers(first, first + 30, 5)).astype(np.uint64)
        barrier = np.zeros(5, dtype=np.uint32)
        if step in (30, 31, 32):
            barrier[-1] = 3
        batch = FragmentBatch.from_arrays(
            source=source,
            timestamp=stamps,
            barrier=barrier,
            payloads=[f"{source}:{s}".encode() for s in stamps],
        )
        sequence = np.arange(step * 5, step * 5 + len(batch), dtype=np.uint64)
        row = arrivals.records
        arrivals.append_rows(t, ArrivalRecords.fragments(batch, sequence, None))
        orderer.submit(fragments_with_rows(batch, row), now=t)
        ordered.append(rows_of(orderer.take_emitted()))
        if step == 40:
            arrivals.append_rows(t, ArrivalRecords.marker(ArrivalKind.WATERMARK, 2, 450))
            orderer.watermark(2, 450, now=t)
            ordered.append(rows_of(orderer.take_emitted()))
    if timer_after_last:
        orderer.advance(now=t + 1.0)  # a deadline timer after the last arrival
        ordered.append(rows_of(orderer.take_emitted()))
    arrivals.sync()
    ordered.sync()
    return arrivals, ordered


def _all(ordered: OrderedLog) -> list[tuple[int, int, int, bool, bytes]]:
    rows = []
    offset = ordered.first_offset
    payloads = ArrivalPayloads(ordered.directory.parent / "arrivals")
    while True:
        batch = with_payloads(ordered.read(offset, 1000), payloads)
        if not len(batch):
            return rows
        rows += [
            (
                int(batch.source[i]),
                int(batch.timestamp[i]),
                int(batch.barrier[i]),
                bool(batch.late[i]),
                batch.payload_of(i),
            )
            for i in range(len(batch))
        ]
        offset += len(batch)


def test_offsets_continue_across_segments_and_reopening(tmp_path: Path) -> None:
    _arrivals, ordered = _live_run(tmp_path)
    rows = _all(ordered)
    assert len(rows) == ordered.next_offset > 0
    assert len(list((tmp_path / "ordered").glob("*.arrow"))) > 1
    ordered.close()
    again = OrderedLog.open(tmp_path / "ordered")
    assert again.next_offset == len(rows)
    assert _all(again) == rows
    assert all(payload == f"{s}:{ts}".encode() for s, ts, _, _, payload in rows)


def test_a_torn_tail_is_cut_and_appends_go_on_without_a_gap(tmp_path: Path) -> None:
    arrivals, ordered = _live_run(tmp_path)
    rows = _all(ordered)
    ordered.close()
    last = sorted((tmp_path / "ordered").glob("*.arrow"))[-1]
    size = last.stat().st_size
    with last.open("r+b") as f:
        f.truncate(size - 40)  # a crash in the middle of the last batch
    torn = OrderedLog.open(tmp_path / "ordered")
    assert torn.next_offset < len(rows)
    assert _all(torn) == rows[: torn.next_offset]
    one = Orderer({"startup_delay": 0}, clock=SimulatedClock())
    row = arrivals.records
    batch = FragmentBatch.from_arrays(source=9, timestamp=[1])
    arrivals.append_rows(100.0, ArrivalRecords.fragments(batch))
    arrivals.sync()
    one.submit(fragments_with_rows(batch, row), now=0.0)
    fragment = rows_of(one.take_emitted())
    with pytest.raises(InternalOrdererError, match="was handed offsets 0 to 1"):
        torn.append(fragment)
    next_offset = torn.next_offset
    torn.append(EmittedBatch(next_offset, *dataclasses.astuple(fragment)[1:]))
    torn.close()
    reopened = OrderedLog.open(tmp_path / "ordered")
    assert reopened.next_offset == next_offset + 1
    assert _all(reopened)[-1] == (9, 1, 0, False, b"")


def test_recovery_writes_every_offset_exactly_once(tmp_path: Path) -> None:
    arrivals, ordered = _live_run(tmp_path)
    complete = _all(ordered)
    arrivals.close()
    ordered.close()
    # the crash: the last few appends to the ordered log never reached the disk
    last = sorted((tmp_path / "ordered").glob("*.arrow"))[-1]
    with last.open("r+b") as f:
        f.truncate(last.stat().st_size // 2)
    arrivals = ArrivalLog.open(tmp_path / "arrivals")
    ordered = OrderedLog.open(tmp_path / "ordered")
    assert ordered.next_offset < len(complete)
    recovered = recover(CONFIG, arrivals, ordered)
    assert _all(ordered) == complete[: ordered.next_offset]
    # the restarted service's timer runs the deadlines the lost part of the log came from
    recovered.orderer.advance(now=recovered.resume_time + 1.0)
    ordered.append(rows_of(recovered.orderer.take_emitted()))
    assert _all(ordered) == complete
    assert set(recovered.next_sequence) <= {1, 2, 3}
    assert max(recovered.next_sequence.values()) == 59 * 5 + 5
    # a second recovery on the completed logs changes nothing
    ordered.close()
    again = OrderedLog.open(tmp_path / "ordered")
    recover(CONFIG, arrivals, again)
    assert _all(again) == complete


def test_recovered_orderer_carries_on_where_the_run_stopped(tmp_path: Path) -> None:
    arrivals, ordered = _live_run(tmp_path)
    before = ordered.next_offset
    recovered = recover(CONFIG, arrivals, ordered)
    assert recovered.orderer.emitted_seq == before
    assert recovered.resume_time >= ordered.last_emit_time
    recovered.orderer.end_run(now=recovered.resume_time + 1)
    ordered.append(rows_of(recovered.orderer.take_emitted()))
    counters = recovered.orderer.counters()["totals"]
    assert counters["received"] == counters["emitted"] + counters["dropped"]
    assert ordered.next_offset == counters["emitted"]


def test_arrival_record_replays_to_the_ordered_log(tmp_path: Path) -> None:
    # evb replay ends the run at the last record: so does this run, before any later deadline
    arrivals, ordered = _live_run(tmp_path, timer_after_last=False)
    recovered = recover(CONFIG, arrivals, ordered)
    orderer = recovered.orderer
    orderer.end_run(now=recovered.resume_time)
    ordered.append(rows_of(orderer.take_emitted()))
    record = tmp_path / "arrivals.jsonl"
    assert arrivals.export_replay(record) == 0
    with record.open() as lines:
        emitted, _ = replay(read_records(lines), CONFIG)
    logged = _all(ordered)
    assert [(s, ts, b, late) for s, ts, b, late, _ in logged] == [
        (int(s), int(ts), int(b), bool(late))
        for s, ts, b, late in zip(
            emitted.source, emitted.timestamp, emitted.barrier, emitted.late, strict=True
        )
    ]


def test_retention_removes_only_committed_sealed_segments(tmp_path: Path) -> None:
    _arrivals, ordered = _live_run(tmp_path, segment_bytes=2048)
    segments = sorted((tmp_path / "ordered").glob("*.arrow"))
    assert len(segments) >= 3
    assert ordered.apply_retention(keep_from_offset=0, max_bytes=1) == []
    middle = ordered.next_offset // 2
    deleted = ordered.apply_retention(keep_from_offset=middle, max_bytes=1)
    assert deleted and all(not p.exists() for p in deleted)
    assert 0 < ordered.first_offset <= middle
    with pytest.raises(InterfaceError, match="removed by retention"):
        ordered.read(0)
    assert len(ordered.read(ordered.first_offset, 10)) == 10
    ordered.close()
    assert OrderedLog.open(tmp_path / "ordered").first_offset == ordered.first_offset


def test_fsync_policies_are_named(tmp_path: Path) -> None:
    for policy in ("always", "batch", "never"):
        log = OrderedLog.open(tmp_path / policy, fsync=FsyncPolicy(policy))
        orderer = Orderer({"startup_delay": 0}, clock=SimulatedClock())
        batch = FragmentBatch.from_arrays(source=1, timestamp=[1, 2])
        orderer.submit(fragments_with_rows(batch, 0), now=1.0)
        log.append(rows_of(orderer.take_emitted()))
        log.sync()
        log.close()
        assert OrderedLog.open(tmp_path / policy).next_offset == 2
    with pytest.raises(ValueError):
        FsyncPolicy("sometimes")
    shutil.rmtree(tmp_path / "always")


def test_a_large_append_is_stored_in_bounded_record_batches(tmp_path: Path) -> None:
    from orderer.service.logs import APPEND_CHUNK

    log = OrderedLog.open(tmp_path / "ordered")
    orderer = Orderer({"startup_delay": 0}, clock=SimulatedClock())
    n = 2 * APPEND_CHUNK + 10
    batch = FragmentBatch.from_arrays(source=1, timestamp=np.arange(n))
    orderer.submit(fragments_with_rows(batch, 0), now=0.0)
    log.append(rows_of(orderer.take_emitted()))
    assert [ref.rows for ref in log._stream.batches] == [APPEND_CHUNK, APPEND_CHUNK, 10]
    part = log.read(APPEND_CHUNK - 5, 20)
    assert part.first_seq == APPEND_CHUNK - 5
    assert part.timestamp.tolist() == list(range(APPEND_CHUNK - 5, APPEND_CHUNK + 15))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64, np.float64, np.bool_])
def test_numpy_and_arrow_columns_convert_both_ways_also_for_slices(dtype: type) -> None:
    from orderer.formats.log_format import _column, _numpy

    values = (np.arange(37) % 3 == 1) if dtype is np.bool_ else np.arange(37).astype(dtype)
    column = _column(values)
    assert column.to_pylist() == values.tolist()
    assert _numpy(column).tolist() == values.tolist()
    assert _numpy(column.slice(5, 20)).tolist() == values[5:25].tolist()
    assert _numpy(_column(values[3:])).tolist() == values[3:].tolist()


def test_writing_reading_and_recovering_the_logs_never_imports_pandas(tmp_path: Path) -> None:
    """pandas costs a second to import: on the live path (the first write, the first
    Subscribe) that second is a stall of the whole service."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from tests.service.test_logs import _live_run, CONFIG
        from orderer.service.logs import ArrivalLog, OrderedLog
        from orderer.service.recovery import recover
        arrivals, ordered = _live_run(Path({str(tmp_path)!r}))
        first = ordered.read(3, 1000)
        arrivals.close()
        ordered.close()
        arrivals = ArrivalLog.open(Path({str(tmp_path)!r}) / "arrivals")
        ordered = OrderedLog.open(Path({str(tmp_path)!r}) / "ordered")
        recover(CONFIG, arrivals, ordered)
        assert len(first) and "pandas" not in sys.modules
        """
    )
    repo = Path(__file__).parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo)
    assert done.returncode == 0, done.stderr
