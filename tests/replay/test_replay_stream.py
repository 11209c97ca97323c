"""``evb replay`` of columnar inputs (Arrow IPC file and stream, Parquet) and of arrival logs:
the same output as the JSON path on the worked examples, streaming in chunks, configuration
changes and runs walked as recovery walks them, a torn tail left out, and bad columns refused
with the file, the column or the row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.cli import main
from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.formats import log_format
from orderer.formats.json_lines import read_records
from orderer.formats.payloads import ordered_batches
from orderer.replay.stream import input_batches, replay_path
from tests.conftest import example_dirs


def _config(example: Path) -> OrdererConfig:
    return OrdererConfig.from_mapping(json.loads((example / "config.json").read_text()))


def _records(example: Path) -> ArrivalRecords:
    with (example / "input.jsonl").open() as lines:
        return read_records(lines)


def _batches(records: ArrivalRecords, rows: int) -> list[pa.RecordBatch]:
    return [
        log_format.arrivals_to_arrow(records.slice(start, start + rows))
        for start in range(0, len(records), rows)
    ]


def write_input(records: ArrivalRecords, path: Path, layout: str, rows: int = 3) -> Path:
    """``records`` as an Arrow IPC stream or file, a Parquet file or an arrival log, in
    record batches of ``rows`` rows (so that a replay crosses many batch boundaries)."""
    batches = _batches(records, rows)
    if layout == "parquet":
        with pq.ParquetWriter(str(path), log_format.ARRIVAL_SCHEMA) as writer:
            for batch in batches:
                writer.write_batch(batch)
    elif layout == "log":
        log = path / log_format.ARRIVALS
        log.mkdir(parents=True)
        half = len(batches) // 2
        first = 0
        for part in (batches[:half], batches[half:]):
            segment = log_format.segment_path(log, log_format.ARRIVALS, first)
            with pa.ipc.new_stream(str(segment), log_format.ARRIVAL_SCHEMA) as writer:
                for batch in part:
                    writer.write_batch(batch)
            first += sum(b.num_rows for b in part)
    else:
        opener = pa.ipc.new_file if layout == "file" else pa.ipc.new_stream
        with opener(str(path), log_format.ARRIVAL_SCHEMA) as writer:
            for batch in batches:
                writer.write_batch(batch)
    return path


@pytest.mark.parametrize("layout", ["stream", "file", "parquet", "log"])
@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_columnar_inputs_replay_like_the_json_path(
    example: Path, layout: str, tmp_path: Path
) -> None:
    config = _config(example)
    expected = replay_path(example / "input.jsonl", tmp_path / "json.jsonl", None, config)
    source = write_input(_records(example), tmp_path / f"input.{layout}", layout)
    got = replay_path(source, tmp_path / "got.jsonl", None, config)
    assert got == expected
    assert (tmp_path / "got.jsonl").read_text() == (tmp_path / "json.jsonl").read_text()
    # the ordered log's layout carries the same rows
    replay_path(source, tmp_path / "got.arrow", None, config)
    with pa.ipc.open_stream(str(tmp_path / "got.arrow")) as reader:
        table = reader.read_all()
    assert table.schema.equals(log_format.ORDERED_SCHEMA_WITH_PAYLOADS)
    lines = [json.loads(line) for line in (tmp_path / "json.jsonl").read_text().splitlines()]
    assert table.column("offset").to_pylist() == [line["seq"] for line in lines]
    assert table.column("timestamp").to_pylist() == [line["ts"] for line in lines]
    assert table.column("t").to_pylist() == [line["t"] for line in lines]
    replay_path(source, tmp_path / "got.parquet", None, config)
    assert pq.read_table(tmp_path / "got.parquet").equals(table)


def _log_rows(directory: Path) -> list[tuple[int, float, int, int, int, bool, bytes]]:
    rows = []
    for segment in log_format.ordered_segments(directory):
        for batch in ordered_batches(segment):
            rows += [
                (batch.first_seq + i, float(batch.t[i]), int(batch.source[i]),
                 int(batch.timestamp[i]), int(batch.barrier[i]), bool(batch.late[i]),
                 batch.payload_of(i))
                for i in range(len(batch))
            ]
    return rows


def _arrow_rows(path: Path) -> list[tuple[int, float, int, int, int, bool, bytes]]:
    with pa.ipc.open_stream(str(path)) as reader:
        rows = []
        for batch in reader:
            rows += list(zip(*(batch.column(name).to_pylist() for name in (
                "offset", "t", "source", "timestamp", "barrier", "late", "payload")), strict=True))
    return rows


def _marked_records() -> ArrivalRecords:
    """Fragments of two sources with a configuration change, an end of run, a begin run and
    a second run, all in a few record batches (control records amid fragments)."""
    pieces, t = [], 0.0
    rng = np.random.default_rng(5)
    for step in range(40):
        t += 0.1
        source = 1 + step % 2
        stamps = np.sort(rng.integers(step * 10, step * 10 + 25, 4)).astype(np.uint64)
        pieces.append(_fragments(source, stamps, t))
        if step == 12:
            change = ArrivalRecords.configure({"build_window": 0.3})
            pieces.append(change.at(t))
        if step == 25:
            pieces.append(ArrivalRecords.marker(ArrivalKind.END_RUN).at(t))
            pieces.append(ArrivalRecords.marker(ArrivalKind.BEGIN_RUN, value=2).at(t))
    pieces.append(ArrivalRecords.marker(ArrivalKind.END_RUN).at(t + 1.0))
    return ArrivalRecords.concat(pieces)


def _fragments(source: int, stamps: np.ndarray, t: float) -> ArrivalRecords:
    from orderer.batch import FragmentBatch

    batch = FragmentBatch.from_arrays(
        source=source, timestamp=stamps, payloads=[f"{source}:{s}".encode() for s in stamps]
    )
    return ArrivalRecords.fragments(batch).at(t)


def test_configure_and_runs_amid_fragments_are_walked_like_single_records(tmp_path: Path) -> None:
    records = _marked_records()
    config = OrdererConfig(build_window=2.0, startup_delay=0.0, source_timeout=None)
    # one row a batch: each control record alone, as the service logs it
    alone = write_input(records, tmp_path / "alone", "log", rows=1)
    mixed = write_input(records, tmp_path / "mixed.parquet", "parquet", rows=50)
    first = replay_path(alone, tmp_path / "alone.arrow", None, config)
    second = replay_path(mixed, tmp_path / "mixed.arrow", None, config)
    assert first == second
    assert _arrow_rows(tmp_path / "alone.arrow") == _arrow_rows(tmp_path / "mixed.arrow")
    # the change was applied: a run without it emits at other times
    plain = ArrivalRecords.concat(
        [records.slice(i, i + 1) for i in range(len(records))
         if records.kind[i] != ArrivalKind.CONFIGURE]
    )
    replay_path(write_input(plain, tmp_path / "plain", "log"), tmp_path / "plain.arrow", None,
                config)
    assert [r[1] for r in _arrow_rows(tmp_path / "plain.arrow")] != [
        r[1] for r in _arrow_rows(tmp_path / "alone.arrow")
    ]


def test_a_torn_tail_of_the_arrival_log_is_left_out(tmp_path: Path) -> None:
    records = _marked_records()
    config = OrdererConfig(startup_delay=0.0)
    whole = write_input(records, tmp_path / "whole", "log", rows=7)
    segment = log_format.log_segments(whole / log_format.ARRIVALS, log_format.ARRIVALS)[-1]
    # the segment without its last record batch, and with half of that batch as a torn tail
    reader = log_format.SegmentReader(segment, log_format.ARRIVAL_SCHEMA)
    positions = [position for position, _ in reader]
    data = segment.read_bytes()
    with pa.ipc.open_stream(str(segment)) as opened:
        last_rows = list(opened)[-1].num_rows
    kept = len(records) - last_rows
    segment.write_bytes(data[: positions[-1] + (len(data) - positions[-1]) // 2])
    torn = replay_path(whole, tmp_path / "torn.arrow", None, config)
    cut = write_input(records.slice(0, kept), tmp_path / "cut", "log", rows=7)
    assert replay_path(cut, tmp_path / "cut.arrow", None, config) == torn
    assert _arrow_rows(tmp_path / "torn.arrow") == _arrow_rows(tmp_path / "cut.arrow")


def test_a_data_directory_replays_to_the_ordered_log_the_live_service_wrote(
    tmp_path: Path,
) -> None:
    from orderer.client import begin_run_async, configure_async, end_run_async
    from tests.service.harness import run, serving_channel, target
    from tests.service.test_run_table import _send

    config = OrdererConfig(build_window=0.05, startup_delay=0.0, source_timeout=None)

    async def body() -> None:
        async with serving_channel(tmp_path, config) as (running, channel):
            address = target(running)
            await _send(channel, 0, [10, 20, 30, 45])
            await configure_async(address, build_window=0.02)
            await _send(channel, 4, [50, 60])
            await end_run_async(address)
            await begin_run_async(address)
            await _send(channel, 6, [1, 2, 3])
            await end_run_async(address)

    run(body())
    logged = _log_rows(tmp_path)
    assert len(logged) == 9
    # the run's starting configuration is the command's flags, as the service's were
    replay_path(tmp_path, tmp_path / "replayed.arrow", None, config)
    assert _arrow_rows(tmp_path / "replayed.arrow") == logged
    replay_path(tmp_path / log_format.ARRIVALS, tmp_path / "again.arrow", None, config)
    assert _arrow_rows(tmp_path / "again.arrow") == logged


def _parquet(path: Path, columns: dict[str, pa.Array]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _good_columns(t: list[float]) -> dict[str, pa.Array]:
    n = len(t)
    return {
        "kind": pa.array([0] * n, pa.uint8()),
        "t": pa.array(t, pa.float64()),
        "source": pa.array([1] * n, pa.uint32()),
        "value": pa.array(list(range(n)), pa.uint64()),
        "barrier": pa.array([0] * n, pa.uint32()),
        "payload": pa.array([b"x"] * n, pa.binary()),
    }


def test_bad_columns_and_time_going_back_name_the_file_column_or_row(tmp_path: Path) -> None:
    config = OrdererConfig()
    good = _good_columns([0.0, 1.0, 2.0])
    # narrower integer types and binary payloads are taken as they are
    wider = {**good, "source": pa.array([1, 1, 1], pa.int16())}
    assert replay_path(_parquet(tmp_path / "ok.parquet", wider), None, None, config)[
        "totals"]["received"] == 3
    missing = {k: v for k, v in good.items() if k != "barrier"}
    with pytest.raises(ConfigError, match=r"missing\.parquet: no column 'barrier'"):
        replay_path(_parquet(tmp_path / "missing.parquet", missing), None, None, config)
    mistyped = {**good, "source": pa.array(["a", "b", "c"])}
    with pytest.raises(ConfigError, match=r"column 'source' is string, expected uint32"):
        replay_path(_parquet(tmp_path / "mistyped.parquet", mistyped), None, None, config)
    negative = {**good, "value": pa.array([1, -2, 3], pa.int64())}
    with pytest.raises(ConfigError, match=r"column 'value' has values outside uint64"):
        replay_path(_parquet(tmp_path / "negative.parquet", negative), None, None, config)
    nulls = {**good, "t": pa.array([0.0, None, 2.0], pa.float64())}
    with pytest.raises(ConfigError, match=r"column 't' is null"):
        replay_path(_parquet(tmp_path / "nulls.parquet", nulls), None, None, config)
    back = _good_columns([0.0, 2.0, 1.0])
    with pytest.raises(ConfigError, match=r"back\.parquet: row 3: t=1\.0 is before the previous"):
        replay_path(_parquet(tmp_path / "back.parquet", back), None, None, config)
    # across record batches, rows counted over the whole file
    records = next(input_batches(_parquet(tmp_path / "b.parquet", _good_columns([0.0, 1.0]))))
    stream = tmp_path / "back.arrow"
    with pa.ipc.new_stream(str(stream), log_format.ARRIVAL_SCHEMA) as writer:
        writer.write_batch(log_format.arrivals_to_arrow(records))
        writer.write_batch(log_format.arrivals_to_arrow(records))
    with pytest.raises(ConfigError, match=r"row 3: t=0\.0 is before the previous row's t=1\.0"):
        replay_path(stream, None, None, config)


def test_the_command_reads_an_arrival_log_and_writes_arrow(tmp_path: Path) -> None:
    example = example_dirs()[0]
    source = write_input(_records(example), tmp_path / "data", "log")
    config = json.loads((example / "config.json").read_text())
    flags = [
        f"--{key.replace('_', '-')}=" + (",".join(map(str, v)) if isinstance(v, list) else str(v))
        for key, v in config.items()
    ]
    stats = tmp_path / "stats.json"
    assert main(["replay", str(source), "--output", str(tmp_path / "o.arrow"),
                 "--stats", str(stats), *flags]) == 0
    expected = json.loads((example / "expected-stats.json").read_text())
    assert json.loads(stats.read_text())["totals"] == expected["totals"]
    # no --output: the counters only (a second STATS into the same file: asked for)
    assert main(["replay", str(source), "--stats", str(stats), "--overwrite", *flags]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["replay", str(empty)]) == 2
