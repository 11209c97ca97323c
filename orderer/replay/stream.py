"""``evb replay`` of any recorded input, streaming: the inputs it reads, the outputs it writes.

Why streaming: a night's run is 10^9 records; read whole, it would not fit in memory, and the
JSON path (:mod:`orderer.formats.json_lines`) parses 0.3 M records/s. The arrival log and
Arrow/Parquet files are columnar already: their record batches become
:class:`~orderer.batch.ArrivalRecords` without a copy, go through the walk recovery uses
(:mod:`orderer.replay.run_walk`) one chunk at a time, and what each chunk emitted is written
before the next is read.

**Inputs** (told apart by their content, not their name): a JSON Lines run (read whole, as
ever; :func:`orderer.formats.json_lines.read_records`); a data directory or its ``arrivals/``
(the arrival log's segments in order, the torn tail left out,
:class:`~orderer.formats.log_format.SegmentReader`); an Arrow IPC file or stream, or a Parquet
file, with the arrival log's columns (:data:`REQUIRED`).

**Outputs** by OUT's suffix: ``.arrow`` is the ordered log's layout as an Arrow IPC stream,
``.parquet`` the same columns in Parquet, anything else the JSON Lines of ``evb replay``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from orderer.api import Orderer
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.clock import SimulatedClock
from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.formats import log_format
from orderer.formats.json_lines import read_records, write_emitted
from orderer.formats.result_files import staged
from orderer.replay.run_walk import ArrivalWalker

__all__ = [
    "REQUIRED",
    "Sink",
    "input_batches",
    "input_files",
    "open_sink",
    "recorded_parameters",
    "replay_into",
    "replay_path",
    "rereadable_batches",
    "write_stats",
]

REQUIRED = ("kind", "t", "source", "value", "barrier", "payload")
"""The columns an Arrow or Parquet input must have, with the arrival log's types (or integer
and float types that convert to them without loss; payload ``binary`` or ``large_binary``);
``sequence`` is optional and ignored (deduplication is the live service's business)."""
_TYPES = {name: log_format.ARRIVAL_SCHEMA.field(name).type for name in REQUIRED}
PARQUET_BATCH_ROWS = JOIN_ROWS = 1 << 16
_PARQUET_MAGIC = b"PAR1"
_ARROW_FILE_MAGIC = b"ARROW1"
_ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"


def _arrival_segments(path: Path) -> list[Path]:
    """The arrival log's segments when ``path`` is a data directory or its ``arrivals/``."""
    directory = path / log_format.ARRIVALS if (path / log_format.ARRIVALS).is_dir() else path
    segments = log_format.log_segments(directory, log_format.ARRIVALS)
    if not segments:
        raise ConfigError(
            str(path), None, "a directory to replay must be a data directory or its arrivals/; "
            "it holds no arrivals-<row>.arrow segment"
        )
    return segments


def _column(batch: pa.RecordBatch, name: str, path: Path) -> pa.Array:
    """Column ``name`` with the arrival log's type; an error names the file and the column."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise ConfigError(
            str(path), None, f"no column {name!r} (the columns needed: {', '.join(REQUIRED)})"
        )
    column = batch.column(index)
    wanted = _TYPES[name]
    if column.null_count:
        row = int(np.flatnonzero(~np.asarray(column.is_valid()))[0])
        raise ConfigError(str(path), None, f"column {name!r} is null in a row (batch row {row})")
    if column.type == wanted:
        return column
    if name == "payload" and column.type == pa.binary():
        return column.cast(wanted)
    numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
    if name != "payload" and numeric and (name == "t" or pa.types.is_integer(column.type)):
        try:
            return column.cast(wanted, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ConfigError(
                str(path), None, f"column {name!r} has values outside {wanted}"
            ) from None
    raise ConfigError(str(path), None, f"column {name!r} is {column.type}, expected {wanted}")


def _table_records(batch: pa.RecordBatch, path: Path) -> ArrivalRecords:
    """A record batch of an Arrow or Parquet input as arrival records (sequence left out)."""
    columns = [_column(batch, name, path) for name in REQUIRED]
    sequence = pa.nulls(batch.num_rows, pa.uint64())
    return log_format.arrivals_from_arrow(
        pa.record_batch([*columns[:5], sequence, columns[5]], schema=log_format.ARRIVAL_SCHEMA)
    )


def _arrow_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """Read, not mapped: the mapped pages of a long run would stay resident."""
    with pa.OSFile(str(path), "rb") as source:
        head = source.read(6)
        source.seek(0)
        if head == _ARROW_FILE_MAGIC:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from pa.ipc.open_stream(source)


def _log_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The whole record batches of the arrival log's segments, in order (torn tail left out).
    A segment is mapped while it is read, and unmapped before the next: resident memory holds
    one segment of the log at most, however long the run (:func:`_joined` copies the rows)."""
    for segment in _arrival_segments(path):
        for _, batch in log_format.SegmentReader(segment, log_format.ARRIVAL_SCHEMA):
            yield batch


def _joined(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Consecutive record batches joined into batches of about :data:`JOIN_ROWS` rows: the
    service logs one batch per arrival (a thousand rows, often fewer), and converting a batch
    costs about as much as copying 64 thousand rows."""
    group: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        group.append(batch)
        rows += batch.num_rows
        if rows >= JOIN_ROWS:
            yield _join(group)
            group, rows = [], 0
    if group:
        yield _join(group)


def _join(group: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(group) == 1:
        return group[0]
    return pa.Table.from_batches(group).combine_chunks().to_batches()[0]


def _file_kind(path: Path) -> str:
    with path.open("rb") as file:
        head = file.read(6)
    if head[:4] == _PARQUET_MAGIC:
        return "parquet"
    if head == _ARROW_FILE_MAGIC or head[:4] == _ARROW_STREAM_MAGIC:
        return "arrow"
    return "jsonl"


def input_batches(path: Path) -> Iterator[ArrivalRecords]:
    """The records of ``path``, one record batch at a time, in arrival order; an Arrow or
    Parquet input whose ``t`` goes back is refused with the row (counted from 1)."""
    path = Path(path)
    if path.is_dir():
        yield from map(log_format.arrivals_from_arrow, _joined(_log_batches(path)))
        return
    kind = _file_kind(path)
    if kind == "jsonl":
        with path.open(encoding="utf-8") as lines:
            yield read_records(lines)
        return
    if kind == "parquet":
        try:
            batches: Iterator[pa.RecordBatch] = pq.ParquetFile(path).iter_batches(
                batch_size=PARQUET_BATCH_ROWS
            )
        except pa.ArrowInvalid as error:
            raise ConfigError(str(path), None, f"not a readable Parquet file ({error})") from None
    else:
        batches = _joined(_arrow_batches(path))
    row, previous = 0, -np.inf
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            records = _table_records(batch, path)
            t = records.times()
            back = np.flatnonzero(np.diff(t, prepend=previous) < 0)
            if back.size or not np.isfinite(t).all():
                i = int(back[0]) if back.size else int(np.flatnonzero(~np.isfinite(t))[0])
                before = previous if i == 0 else float(t[i - 1])
                why = (
                    f"t={float(t[i])} is before the previous row's t={before}"
                    if back.size else f"t={float(t[i])} is not a finite number of seconds"
                )
                raise ConfigError(f"{path}: row {row + i + 1}", None, why)
            row += len(records)
            previous = float(t[-1])
            yield records
    except (pa.ArrowInvalid, OSError) as error:
        raise ConfigError(str(path), None, f"not a readable Arrow IPC file ({error})") from None


def rereadable_batches(path: Path, keep: int = 1 << 22) -> Callable[[], Iterator[ArrivalRecords]]:
    """:func:`input_batches` of ``path`` as a function each pass of a simulation calls (the
    sliced replay makes one pass a setting): the first pass keeps what it read when that is at
    most ``keep`` records (a JSON Lines run, read slowly, is not parsed again), else every pass
    reads again (a long columnar run streams)."""
    kept: list[ArrivalRecords] = []
    whole = [False]

    def batches() -> Iterator[ArrivalRecords]:
        if whole[0]:
            yield from kept
            return
        rows = 0
        for batch in input_batches(path):
            rows += len(batch)
            if rows <= keep:
                kept.append(batch)
            else:
                kept.clear()
            yield batch
        whole[0] = rows <= keep

    return batches


class Sink(Protocol):
    def write(self, emitted: EmittedBatch) -> None: ...
    def close(self) -> None: ...


class _ArrowSink:
    """The ordered log's layout as one Arrow IPC stream (or Parquet file), written by a thread
    of its own while the orderer works on the next chunk (Arrow writes without the GIL): the
    replay then takes about the longer of the two, not their sum. One write in flight at most,
    so memory stays bounded."""

    def __init__(self, path: Path, parquet: bool) -> None:
        self._writer: Any = (
            pq.ParquetWriter(str(path), log_format.ORDERED_SCHEMA_WITH_PAYLOADS)
            if parquet
            else pa.ipc.new_stream(str(path), log_format.ORDERED_SCHEMA_WITH_PAYLOADS)
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evb-replay-write")
        self._in_flight: Future[None] | None = None

    def _wait(self) -> None:
        if self._in_flight is not None:
            self._in_flight.result()  # a failed write raises here
            self._in_flight = None

    def write(self, emitted: EmittedBatch) -> None:
        if len(emitted):
            batch = log_format.emitted_to_arrow(emitted, log_format.ORDERED_SCHEMA_WITH_PAYLOADS)
            self._wait()
            self._in_flight = self._thread.submit(self._writer.write_batch, batch)

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self._thread.shutdown()
            self._writer.close()


class _JsonSink:
    """The JSON Lines of ``evb replay`` (slow: one formatted line per fragment)."""

    def __init__(self, path: Path) -> None:
        self._out: IO[str] = path.open("w", encoding="utf-8")

    def write(self, emitted: EmittedBatch) -> None:
        write_emitted(emitted, self._out)

    def close(self) -> None:
        self._out.close()


class _NoSink:
    def write(self, emitted: EmittedBatch) -> None:
        pass

    def close(self) -> None:
        pass


def open_sink(path: Path | None) -> Sink:
    """Where emitted fragments go, by ``path``'s suffix; None: nowhere (stats only)."""
    if path is None:
        return _NoSink()
    suffix = Path(path).suffix.lower()
    if suffix in (".arrow", ".parquet"):
        return _ArrowSink(Path(path), parquet=suffix == ".parquet")
    return _JsonSink(Path(path))


def replay_into(
    input_path: Path,
    settings: Sequence[tuple[OrdererConfig, Callable[[EmittedBatch], None]]],
    *,
    track_arrival: bool = False,
) -> list[Orderer]:
    """One pass over ``input_path`` feeding one orderer a setting, each handing what it emits
    to its own ``write`` after every chunk (with arrival times if ``track_arrival``); the run
    ends at the last record's time unless the input ended it. Returns the orderers."""
    orderers = [
        Orderer(config, clock=SimulatedClock(), track_arrival=track_arrival)
        for config, _ in settings
    ]

    def taker(orderer: Orderer, write: Callable[[EmittedBatch], None]) -> Callable[[], None]:
        return lambda: write(orderer.take_emitted())

    takes = [taker(o, write) for o, (_, write) in zip(orderers, settings, strict=True)]
    walkers = [ArrivalWalker(o, take) for o, take in zip(orderers, takes, strict=True)]
    for batch in input_batches(input_path):
        for walker in walkers:
            walker.feed(batch)
    for orderer, walker, take in zip(orderers, walkers, takes, strict=True):
        walk = walker.finish()
        if not walk.run_ended and walk.last_t is not None:
            orderer.end_run(now=walk.last_t)
            take()
    return orderers


def replay_path(
    input_path: Path, output_path: Path | None, stats_path: Path | None, config: OrdererConfig
) -> dict[str, Any]:
    """``evb replay`` of one setting without the argument parsing; returns the counters. The
    output replaces ``output_path`` only once the replay succeeded (:func:`staged`)."""
    with contextlib.ExitStack() as results:
        written = None if output_path is None else results.enter_context(staged(output_path))
        sink = open_sink(written)
        try:
            (orderer,) = replay_into(input_path, [(config, sink.write)])
        finally:
            sink.close()
    counters = orderer.counters()
    if stats_path is not None:
        write_stats(stats_path, counters)
    return counters


def input_files(path: Path) -> list[Path]:
    """The files a replay of ``path`` reads: the arrival log's segments of a data directory (or
    of its ``arrivals/``), else ``path`` itself (which need not exist: reading it says so)."""
    path = Path(path)
    return _arrival_segments(path) if path.is_dir() else [path]


def recorded_parameters(path: Path) -> OrdererConfig | None:
    """The parameters the run began with when ``path`` is a data directory (or its
    ``arrivals/``) that recorded them (:data:`~orderer.formats.log_format.PARAMETERS`): a replay
    of it starts from them, as recovery does, so that it gives the ordered log without repeating
    the run's flags; flags given go over them (a what-if, a sweep). None for anything else (a
    file, an exported or copied arrival log, a directory written before parameters were
    recorded)."""
    path = Path(path)
    if not path.is_dir():
        return None
    directory = path.parent if path.name == log_format.ARRIVALS else path
    return log_format.read_parameters(directory)


def write_stats(path: Path, counters: Any) -> None:
    """The STATS file (JSON), in place only once whole (:func:`staged`)."""
    with staged(path) as written:
        written.write_text(json.dumps(counters, indent=1) + "\n", encoding="utf-8")
