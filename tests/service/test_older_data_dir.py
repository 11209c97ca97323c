"""A data directory written before each payload was written once (its ordered log holds the
payloads, ``ORDERED_SCHEMA_WITH_PAYLOADS``) still reads: the ``--path`` readers give exactly
what the evb that wrote it read back; ``evb replay`` replays it; ``evb serve`` refuses to
continue its run with one line saying why and what to do, and changes nothing in it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from orderer.config import OrdererConfig
from orderer.formats import log_format
from orderer.formats.payloads import ordered_batches, read_ordered
from orderer.replay.stream import replay_path

DATA = Path(__file__).parents[1] / "data"
OLD = DATA / "data-dir-v0.1.0"
ROOT = Path(__file__).parents[2]


def _expected() -> list[list[object]]:
    return json.loads((DATA / "data-dir-v0.1.0-expected.json").read_text())


def _rows(batches: object) -> list[list[object]]:
    return [
        [b.first_seq + i, int(b.source[i]), int(b.timestamp[i]), int(b.barrier[i]),
         bool(b.late[i]), b.payload_of(i).hex()]
        for b in batches  # type: ignore[attr-defined]
        for i in range(len(b))
    ]


def test_the_ordered_log_with_payloads_reads_as_it_did() -> None:
    segments = log_format.ordered_segments(OLD)
    assert log_format.ordered_format_of(OLD / "ordered") is log_format.ORDERED_SCHEMA_WITH_PAYLOADS
    assert _rows(b for s in segments for b in ordered_batches(s)) == _expected()
    # what the Spark job's --path read takes: the batches as held, with their own payloads
    assert _rows(b for s in segments for b in read_ordered(s)) == _expected()


def test_evb_replay_replays_it(tmp_path: Path) -> None:
    out = tmp_path / "replayed.arrow"
    config = log_format.read_parameters(OLD)
    assert isinstance(config, OrdererConfig)
    replay_path(OLD, out, None, config)
    with pa.ipc.open_stream(str(out)) as reader:
        table = reader.read_all()
    assert table.column("payload").to_pylist() == [bytes.fromhex(r[5]) for r in _expected()]


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "LOCK"
    }


def test_evb_serve_refuses_to_continue_it_and_changes_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "old"
    shutil.copytree(OLD, data_dir, ignore=shutil.ignore_patterns("README.md"))
    before = _digest(data_dir)
    done = subprocess.run(
        [sys.executable, "-m", "orderer.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(data_dir)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "--data-dir" in lines[0] and "keeps a second copy of every payload" in lines[0]
    assert "new --data-dir" in lines[0]
    assert _digest(data_dir) == before


def test_the_spark_path_reader_takes_it() -> None:
    """The executors' read of a partition (payloads of the partition's part only)."""
    from orderer.spark.source.planning import OffsetRange
    from orderer.spark.source.readers import read_segments

    segments = tuple(str(s) for s in log_format.ordered_segments(OLD))
    part = OffsetRange(10, 100, None, segments)
    rows = [r for batch in read_segments(part) for r in batch.to_pylist()]
    want = _expected()[10:100]
    assert [r["offset"] for r in rows] == [w[0] for w in want]
    assert [bytes(r["payload"]) for r in rows] == [bytes.fromhex(str(w[5])) for w in want]
