"""Durable storage of the orderer service: the arrival log and the ordered log.

Why two logs. A fragment is acknowledged once it sits in the **arrival log**, a write-ahead log of
everything that arrived (fragments, watermarks, ends, live configuration changes, end of run),
each with the time the orderer took it in. The orderer is deterministic given those times (the
contract ``evb replay`` checks), so the arrival log alone can rebuild the orderer's state and its
whole output after a crash: :func:`recover` replays it and appends to the **ordered log** what the
crash kept from being written, so every offset is written exactly once. The ordered log is what
consumers read (``Subscribe``, ``evb tail``, Spark); its offsets are the ``seq`` of ``evb replay``.

Both logs are directories of segment files in Arrow IPC stream format, a standard columnar
format any Arrow reader opens. A segment ends cleanly or with a torn last batch (a crash in the
middle of a write); opening a log cuts a torn tail and later appends go to a new segment.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import enum
import errno
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from orderer.api import Orderer
from orderer.batch import EmittedBatch, FragmentBatch, concat_payloads
from orderer.clock import MonotonicClock
from orderer.config import OrdererConfig
from orderer.errors import InterfaceError, InternalOrdererError

__all__ = [
    "ARRIVAL_SCHEMA",
    "ORDERED_SCHEMA",
    "ArrivalLog",
    "ConsumerOffsets",
    "FsyncPolicy",
    "OrderedLog",
    "Recovered",
    "recover",
]


class FsyncPolicy(enum.StrEnum):
    """When written data is forced to the disk.

    ``always``: after every append (slowest, survives a power cut at every ack).
    ``batch``: when :meth:`sync` is called; the service calls it once for everything written
    since the last call before acknowledging (group commit).
    ``never``: data goes to the operating system only; survives the process being killed,
    not the machine losing power.
    """

    ALWAYS = "always"
    BATCH = "batch"
    NEVER = "never"


class ArrivalKind(enum.IntEnum):
    FRAGMENT = 0
    WATERMARK = 1
    END_OF_SOURCE = 2
    CONFIGURE = 3
    END_RUN = 4


ARRIVAL_SCHEMA = pa.schema(
    [
        ("kind", pa.uint8()),  # ArrivalKind
        ("t", pa.float64()),  # arrival time: when the orderer took the record in
        ("source", pa.uint32()),
        ("value", pa.uint64()),  # timestamp of a fragment, or the watermark
        ("barrier", pa.uint32()),
        ("sequence", pa.uint64()),  # per-source sequence number, null when unsequenced
        ("payload", pa.large_binary()),  # fragment payload, or the JSON of a configuration change
    ]
)

ORDERED_SCHEMA = pa.schema(
    [
        ("offset", pa.uint64()),
        ("t", pa.float64()),  # time of the flush that emitted the fragment
        ("source", pa.uint32()),
        ("timestamp", pa.uint64()),
        ("barrier", pa.uint32()),
        ("late", pa.bool_()),
        ("payload", pa.large_binary()),
    ]
)

_SEGMENT_DIGITS = 20
APPEND_CHUNK = 65536
"""Most rows per record batch of the ordered log (what one read has to load at most)."""
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The IPC stream format's end-of-stream marker (continuation token, zero length)."""


@dataclass(slots=True)
class _BatchRef:
    """Where one record batch of a segmented log lives."""

    first: int  # first row number (offset) in the whole log
    rows: int
    segment: Path
    position: int  # byte position of its IPC message in the segment


class _SegmentedStream:
    """Append-only record batches in rolling Arrow IPC stream files; one job: bytes on disk.

    Segment files are named ``<prefix>-<first row number>.arrow``. Opening scans every segment,
    cuts a torn last batch and indexes the rest; appends always go to a fresh segment after that.
    """

    def __init__(
        self,
        directory: Path,
        prefix: str,
        schema: pa.Schema,
        fsync: FsyncPolicy,
        segment_bytes: int,
    ) -> None:
        self.directory = directory
        self.prefix = prefix
        self.schema = schema
        self.fsync = FsyncPolicy(fsync)
        self.segment_bytes = segment_bytes
        self.batches: list[_BatchRef] = []
        self.rows = 0
        self.sealed = 0  # segments closed by this process (a cue for retention)
        self._file: pa.OSFile | None = None
        self._position = 0  # bytes written to the open segment
        self._segment: Path | None = None
        self._dirty = False
        directory.mkdir(parents=True, exist_ok=True)
        for segment in self.segments():
            self._scan(segment)

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.prefix}-*.arrow"))

    def _scan(self, segment: Path) -> None:
        first = int(segment.stem.rsplit("-", 1)[1])
        if self.batches and first != self.rows:
            raise InternalOrdererError(
                f"{segment}: starts at {first}, but the segments before it end at {self.rows}"
            )
        self.rows = first
        good = 0
        with pa.OSFile(str(segment), "rb") as source:
            try:
                reader = pa.ipc.open_stream(source)
                if not reader.schema.equals(self.schema):
                    raise InternalOrdererError(f"{segment}: unexpected schema {reader.schema}")
                position = source.tell()
                while True:
                    batch = reader.read_next_batch()
                    self.batches.append(_BatchRef(self.rows, batch.num_rows, segment, position))
                    self.rows += batch.num_rows
                    position = good = source.tell()
            except StopIteration:
                good = source.tell()
            except (pa.ArrowInvalid, OSError):
                pass  # a torn tail: keep what was whole
        if good == 0:
            segment.unlink()  # nothing whole in it, not even the schema
        elif good < segment.stat().st_size:
            with segment.open("r+b") as torn:
                torn.truncate(good)
                os.fsync(torn.fileno())

    def append(self, batch: pa.RecordBatch) -> None:
        """Append one record batch. If the write fails (a full volume), the segment is cut back
        to where it was and closed, so the log is as before and a later append can retry."""
        if self._file is None:
            self._open_segment()
        assert self._file is not None
        position = self._position
        try:
            # the IPC stream's encapsulated message, written at once: a stream writer issues a
            # write per buffer (a dozen system calls a batch, most of the cost of appending)
            self._position += self._file.write(batch.serialize())
        except BaseException:
            self._cut_back(position)
            raise
        self.batches.append(_BatchRef(self.rows, batch.num_rows, self._segment, position))  # type: ignore[arg-type]
        self.rows += batch.num_rows
        self._dirty = True
        if self.fsync is FsyncPolicy.ALWAYS:
            self.sync()
        if self._position >= self.segment_bytes:
            self._close_segment()

    def _cut_back(self, good: int) -> None:
        """A write failed half way: drop the segment's torn tail (the whole segment if it holds
        no batch) and close it; the next append opens a new segment."""
        segment, file = self._segment, self._file
        self._file = self._segment = None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        if segment is None or not segment.exists():
            return
        if not self.batches or self.batches[-1].segment != segment:
            segment.unlink()
        else:
            with segment.open("r+b") as torn:
                torn.truncate(good)
                if self.fsync is not FsyncPolicy.NEVER:
                    os.fsync(torn.fileno())
            self.sealed += 1

    def _open_segment(self) -> None:
        self._segment = self.directory / f"{self.prefix}-{self.rows:0{_SEGMENT_DIGITS}d}.arrow"
        if self._segment.exists():
            raise InternalOrdererError(f"{self._segment} exists already")
        # a native file: Arrow writes straight to the descriptor, without a Python layer
        self._file = pa.OSFile(str(self._segment), "wb")
        try:
            self._position = self._file.write(self.schema.serialize())
            _fsync_directory(self.directory)
        except BaseException:
            self._cut_back(0)
            raise

    def _close_segment(self) -> None:
        if self._file is not None:
            good = self._position
            try:
                self._file.write(_END_OF_STREAM)  # readers do without it
            except OSError:
                self._cut_back(good)
                return
            if self.fsync is not FsyncPolicy.NEVER:
                os.fsync(self._file.fileno())  # always: a sync racing with this may miss it
            self._dirty = False
            self._file.close()
            self.sealed += 1
        self._file = self._segment = None

    def sync(self) -> None:
        """Make everything appended so far durable (per the fsync policy).

        May run in a worker thread while the loop thread rolls the segment over: closing a
        segment syncs it, so a file closed under our feet has nothing left to sync."""
        file = self._file
        if file is None or not self._dirty:
            return
        self._dirty = False
        if self.fsync is not FsyncPolicy.NEVER:
            try:
                os.fsync(file.fileno())
            except (ValueError, OSError) as error:
                if isinstance(error, OSError) and error.errno != errno.EBADF:
                    raise

    def read_batch(self, ref: _BatchRef) -> pa.RecordBatch:
        with pa.OSFile(str(ref.segment), "rb") as source:
            source.seek(ref.position)
            message = pa.ipc.read_message(source)
            return pa.ipc.read_record_batch(message, self.schema)

    def find(self, row: int) -> int:
        """Index of the batch holding ``row``."""
        firsts = [ref.first for ref in self.batches]  # small: one entry per appended batch
        return bisect.bisect_right(firsts, row) - 1

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        for ref in self.batches:
            yield self.read_batch(ref)

    def close(self) -> None:
        self._close_segment()


def _fsync_directory(directory: Path) -> None:
    """A new file's name is durable only once its directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _column(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A zero-copy Arrow view of a numpy column (``valid``: which rows are not null).

    Not ``pa.array``: its first call imports pandas to look for pandas input, a second of a
    live server's time spent in the middle of a run."""
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [validity, pa.py_buffer(bits)])
    values = np.ascontiguousarray(values)
    dtype = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(dtype, len(values), [validity, pa.py_buffer(values)])


_NUMPY_OF_ARROW = {
    pa.uint8(): np.uint8,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.int64(): np.int64,
    pa.float64(): np.float64,
}


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a numeric or boolean column, a view where Arrow's layout allows one; the
    inverse of :func:`_column`, and like it without pandas. Nulls are not looked at."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n, start = len(column), column.offset
    data = column.buffers()[1]
    if column.type == pa.bool_():
        if data is None:
            return np.zeros(n, dtype=np.bool_)
        bits = np.frombuffer(data, dtype=np.uint8)
        return np.unpackbits(bits, count=start + n, bitorder="little")[start:].view(np.bool_)
    dtype = np.dtype(_NUMPY_OF_ARROW[column.type])
    if data is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=n, offset=start * dtype.itemsize)


def _binary_column(offsets: np.ndarray, payload: np.ndarray, n: int) -> pa.Array:
    """A large_binary column over packed payloads, without copying them."""
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int64)), pa.py_buffer(payload)],
    )


def _unpack_binary(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(n + 1 offsets from 0, payload bytes) of a large_binary column."""
    _, offsets_buffer, data_buffer = column.buffers()
    n = len(column)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=n + 1, offset=column.offset * 8)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[start:stop]
        if data_buffer is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return (offsets - start).astype(np.uint64), data


@dataclass(slots=True)
class ArrivalRows:
    """Rows for the arrival log as columns; the arrival time is given when they are appended."""

    kind: np.ndarray  # uint8, ArrivalKind
    source: np.ndarray  # uint32
    value: np.ndarray  # uint64: a fragment's timestamp, or the watermark
    barrier: np.ndarray  # uint32
    sequence: np.ndarray  # uint64
    sequenced: np.ndarray | None  # bool: which rows carry a sequence; None: all of them
    payload_offsets: np.ndarray  # uint64, n + 1 from 0
    payload: np.ndarray  # uint8

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @classmethod
    def fragments(
        cls, batch: FragmentBatch, sequence: np.ndarray, sequenced: np.ndarray | None
    ) -> ArrivalRows:
        n = len(batch)
        return cls(
            np.zeros(n, dtype=np.uint8),
            batch.source,
            batch.timestamp,
            batch.barrier,
            sequence,
            sequenced,
            batch.payload_offsets,
            batch.payload,
        )

    @classmethod
    def marker(
        cls, kind: ArrivalKind, source: int = 0, value: int = 0, payload: bytes = b""
    ) -> ArrivalRows:
        """One row that is not a fragment (watermark, end of source, configure, end of run)."""
        return cls(
            np.array([kind], dtype=np.uint8),
            np.array([source], dtype=np.uint32),
            np.array([value], dtype=np.uint64),
            np.zeros(1, dtype=np.uint32),
            np.zeros(1, dtype=np.uint64),
            np.zeros(1, dtype=np.bool_),
            np.array([0, len(payload)], dtype=np.uint64),
            np.frombuffer(payload, dtype=np.uint8),
        )

    @classmethod
    def configure(cls, changes: Mapping[str, Any]) -> ArrivalRows:
        """A live change of parameters; ``recover`` reads the JSON back."""
        return cls.marker(ArrivalKind.CONFIGURE, payload=json.dumps(dict(changes)).encode())

    @classmethod
    def concat(cls, pieces: list[ArrivalRows]) -> ArrivalRows:
        if len(pieces) == 1:
            return pieces[0]
        offsets, payload = concat_payloads([(p.payload_offsets, p.payload) for p in pieces])
        masked = any(piece.sequenced is not None for piece in pieces)
        return cls(
            np.concatenate([piece.kind for piece in pieces]),
            np.concatenate([piece.source for piece in pieces]),
            np.concatenate([piece.value for piece in pieces]),
            np.concatenate([piece.barrier for piece in pieces]),
            np.concatenate([piece.sequence for piece in pieces]),
            np.concatenate(
                [
                    np.ones(len(piece), dtype=np.bool_) if piece.sequenced is None
                    else piece.sequenced
                    for piece in pieces
                ]
            )
            if masked
            else None,
            offsets,
            payload,
        )


class ArrivalLog:
    """Write-ahead log of everything that arrived, in arrival order, with its arrival time."""

    def __init__(self, stream: _SegmentedStream) -> None:
        self._stream = stream

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        fsync: FsyncPolicy = FsyncPolicy.BATCH,
        segment_bytes: int = 64 << 20,
    ) -> ArrivalLog:
        return cls(
            _SegmentedStream(Path(directory), "arrivals", ARRIVAL_SCHEMA, fsync, segment_bytes)
        )

    @property
    def directory(self) -> Path:
        return self._stream.directory

    @property
    def records(self) -> int:
        return self._stream.rows

    def append_rows(self, t: float, rows: ArrivalRows) -> None:
        """Rows that arrived together at ``t``, as one record batch."""
        n = len(rows)
        if n == 0:
            return
        sequence = _column(rows.sequence, valid=rows.sequenced)
        self._stream.append(
            pa.record_batch(
                [
                    _column(rows.kind),
                    _column(np.full(n, t, dtype=np.float64)),
                    _column(rows.source),
                    _column(rows.value),
                    _column(rows.barrier),
                    sequence,
                    _binary_column(rows.payload_offsets, rows.payload, n),
                ],
                schema=ARRIVAL_SCHEMA,
            )
        )

    def sync(self) -> None:
        """Everything appended before this call is durable when it returns (group commit)."""
        self._stream.sync()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every record batch, in arrival order."""
        return self._stream.iter_batches()

    def export_replay(self, path: Path) -> int:
        """The arrival record as an ``evb replay`` input file; returns how many configuration
        changes it could not express (the replay format has none; end of run is the file's end)."""
        skipped = 0
        with Path(path).open("w", encoding="utf-8") as out:
            for batch in self.batches():
                columns = batch.to_pydict()
                for kind, t, source, value, barrier, payload in zip(
                    columns["kind"],
                    columns["t"],
                    columns["source"],
                    columns["value"],
                    columns["barrier"],
                    columns["payload"],
                    strict=True,
                ):
                    if kind == ArrivalKind.FRAGMENT:
                        record: dict[str, Any] = {"t": t, "source": source, "ts": value}
                        if barrier:
                            record["barrier"] = barrier
                        if payload:
                            record["payload"] = base64.b64encode(payload).decode()
                    elif kind == ArrivalKind.WATERMARK:
                        record = {"t": t, "source": source, "watermark": value}
                    elif kind == ArrivalKind.END_OF_SOURCE:
                        record = {"t": t, "source": source, "end": True}
                    else:
                        skipped += kind == ArrivalKind.CONFIGURE
                        continue
                    out.write(json.dumps(record) + "\n")
        return skipped

    def close(self) -> None:
        self._stream.close()


class OrderedLog:
    """The durable ordered output; offsets are consecutive from 0 and never reused."""

    def __init__(self, stream: _SegmentedStream) -> None:
        self._stream = stream
        self._last_t: float | None = None
        if stream.batches:
            last = stream.read_batch(stream.batches[-1])
            self._last_t = float(last.column("t")[-1].as_py())

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        fsync: FsyncPolicy = FsyncPolicy.BATCH,
        segment_bytes: int = 64 << 20,
    ) -> OrderedLog:
        return cls(
            _SegmentedStream(Path(directory), "ordered", ORDERED_SCHEMA, fsync, segment_bytes)
        )

    @property
    def next_offset(self) -> int:
        """Offset the next emitted fragment gets; everything below it is in the log."""
        return self._stream.rows

    @property
    def first_offset(self) -> int:
        """Lowest offset still in the log (retention removes older segments)."""
        return self._stream.batches[0].first if self._stream.batches else self._stream.rows

    @property
    def sealed_segments(self) -> int:
        """Segments this process has closed; retention has news when it changes."""
        return self._stream.sealed

    @property
    def last_emit_time(self) -> float | None:
        """Flush time of the last fragment in the log."""
        return self._last_t

    def append(self, emitted: EmittedBatch) -> None:
        n = len(emitted)
        if n == 0:
            return
        if emitted.first_seq > self.next_offset or emitted.first_seq + n < self.next_offset:
            raise InternalOrdererError(
                f"ordered log at offset {self.next_offset} was handed offsets "
                f"{emitted.first_seq} to {emitted.first_seq + n}"
            )
        if emitted.first_seq < self.next_offset:  # a retry after a failed write: what it lacks
            emitted = emitted.slice(self.next_offset - emitted.first_seq)
            n = len(emitted)
            if n == 0:
                return
        first = emitted.first_seq
        whole = pa.record_batch(
            [
                _column(np.arange(first, first + n, dtype=np.uint64)),
                _column(emitted.t),
                _column(emitted.source),
                _column(emitted.timestamp),
                _column(emitted.barrier),
                _column(emitted.late),
                _binary_column(emitted.payload_offsets, emitted.payload, n),
            ],
            schema=ORDERED_SCHEMA,
        )
        # bounded record batches: a reader of a few fragments never loads a whole backlog
        for start in range(0, n, APPEND_CHUNK):
            self._stream.append(whole.slice(start, APPEND_CHUNK))
        self._last_t = float(emitted.t[-1])

    def read(self, from_offset: int, max_fragments: int = 65536) -> EmittedBatch:
        """Up to ``max_fragments`` fragments from ``from_offset``; empty once caught up."""
        if from_offset < self.first_offset:
            raise InterfaceError(
                f"offset {from_offset} was removed by retention; the log starts at "
                f"{self.first_offset}"
            )
        stream = self._stream
        parts: list[EmittedBatch] = []
        wanted = min(max_fragments, self.next_offset - from_offset)
        index = stream.find(from_offset) if wanted > 0 else len(stream.batches)
        offset = from_offset
        while wanted > 0 and index < len(stream.batches):
            ref = stream.batches[index]
            batch = stream.read_batch(ref)
            start = offset - ref.first
            take = min(wanted, ref.rows - start)
            parts.append(_emitted_from_arrow(batch.slice(start, take)))
            offset += take
            wanted -= take
            index += 1
        if not parts:
            return EmittedBatch.empty(from_offset)
        return parts[0] if len(parts) == 1 else EmittedBatch.concat(parts)

    def sync(self) -> None:
        self._stream.sync()

    def apply_retention(
        self,
        *,
        keep_from_offset: int,
        max_bytes: int | None = None,
        max_age_seconds: float | None = None,
    ) -> list[Path]:
        """Delete whole sealed segments that are entirely below ``keep_from_offset`` (what every
        consumer has committed) and either make the log exceed ``max_bytes`` or are older than
        ``max_age_seconds``. Returns the deleted files."""
        stream = self._stream
        segments = stream.segments()
        active = stream._segment
        sizes = {path: path.stat().st_size for path in segments}
        total = sum(sizes.values())
        now = time.time()
        deleted: list[Path] = []
        for path in segments:
            if path == active:
                break
            refs = [ref for ref in stream.batches if ref.segment == path]
            end = refs[-1].first + refs[-1].rows if refs else 0
            if end > keep_from_offset:
                break
            too_big = max_bytes is not None and total > max_bytes
            too_old = max_age_seconds is not None and now - path.stat().st_mtime > max_age_seconds
            if not (too_big or too_old):
                break
            path.unlink()
            total -= sizes[path]
            stream.batches = [ref for ref in stream.batches if ref.segment != path]
            deleted.append(path)
        return deleted

    def close(self) -> None:
        self._stream.close()


def _emitted_from_arrow(batch: pa.RecordBatch) -> EmittedBatch:
    offsets, payload = _unpack_binary(batch.column("payload"))
    return EmittedBatch(
        first_seq=int(batch.column("offset")[0].as_py()) if batch.num_rows else 0,
        t=_numpy(batch.column("t")),
        source=_numpy(batch.column("source")),
        timestamp=_numpy(batch.column("timestamp")),
        barrier=_numpy(batch.column("barrier")),
        late=_numpy(batch.column("late")),
        payload_offsets=offsets,
        payload=payload,
    )


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restarted service continues from."""

    orderer: Orderer
    next_sequence: dict[int, int]
    """Per source: the sequence number the next new fragment must carry (dedupe of resends)."""
    resume_time: float
    """Time of the last record or flush of the recovered run; the live clock starts here."""
    run_ended: bool


def recover(config: OrdererConfig, arrivals: ArrivalLog, ordered: OrderedLog) -> Recovered:
    """Rebuild the orderer from the arrival log and complete the ordered log.

    Every arrival is replayed at its recorded time, then the deadlines up to the last flush the
    ordered log saw are run; the orderer being deterministic, its output up to the log's end is
    what the log holds, and what comes after was emitted (or due) before the crash but not yet
    written: it is appended now. A fresh directory gives a fresh orderer at time 0.
    """
    last_t = 0.0
    if arrivals._stream.batches:
        last = arrivals._stream.read_batch(arrivals._stream.batches[-1])
        last_t = float(last.column("t")[-1].as_py())
    resume = max(last_t, ordered.last_emit_time or 0.0)
    orderer = Orderer(config, clock=MonotonicClock(start=resume))
    next_sequence: dict[int, int] = {}
    logged = ordered.next_offset
    run_ended = False

    def complete_log() -> None:
        emitted = orderer.take_emitted()
        n = len(emitted)
        if n == 0:
            return
        end = emitted.first_seq + n
        if end <= logged:
            return
        skip = max(0, logged - emitted.first_seq)
        if skip:
            emitted = emitted.slice(skip)
        ordered.append(emitted)

    pending: list[pa.RecordBatch] = []
    pending_rows = 0

    def replay_pending() -> None:
        nonlocal pending, pending_rows
        if not pending:
            return
        table = pa.Table.from_batches(pending).combine_chunks()
        payload_offsets, payload = _unpack_binary(table.column("payload").chunk(0))
        orderer.replay_arrays(
            _numpy(table.column("kind")),
            _numpy(table.column("t")),
            _numpy(table.column("source")),
            _numpy(table.column("value")),
            _numpy(table.column("barrier")),
            payload_offsets,
            payload,
        )
        pending, pending_rows = [], 0
        complete_log()

    for batch in arrivals.batches():
        kinds = _numpy(batch.column("kind"))
        sequences = batch.column("sequence")
        if sequences.null_count < len(sequences):
            sources = _numpy(batch.column("source"))
            values = _numpy(sequences)
            valid = _numpy(sequences.is_valid())
            for source in np.unique(sources[valid]):
                top = int(values[valid & (sources == source)].max())
                next_sequence[int(source)] = max(next_sequence.get(int(source), 0), top + 1)
        kind = int(kinds[0])
        if kind in (ArrivalKind.CONFIGURE, ArrivalKind.END_RUN):
            replay_pending()
            t = float(batch.column("t")[0].as_py())
            if kind == ArrivalKind.CONFIGURE:
                changes = json.loads(batch.column("payload")[0].as_py())
                orderer.configure(
                    orderer.config.from_mapping({**orderer.config.to_mapping(), **changes}), now=t
                )
            else:
                orderer.end_run(now=t)
                run_ended = True
            complete_log()
            continue
        if kind == ArrivalKind.FRAGMENT:
            run_ended = False
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows >= 1 << 16:
            replay_pending()
    replay_pending()
    # deadline flushes the live run made after its last arrival, up to its last logged flush
    orderer.advance(now=resume)
    complete_log()
    if ordered.next_offset < logged or orderer.emitted_seq < logged:
        raise InternalOrdererError(
            f"the ordered log holds {logged} fragments but replaying the arrival log emits "
            f"only {orderer.emitted_seq}: the two logs do not belong together"
        )
    ordered.sync()
    return Recovered(orderer, next_sequence, resume, run_ended)


class ConsumerOffsets:
    """The offsets consumers have committed (``Commit``), durable in one small JSON file.

    Why: the ordered log's retention must never delete output a known consumer (the Spark job)
    has not processed yet, or a restarted consumer could not replay it (exactly-once). Each
    consumer's offset only moves forward; the file is replaced atomically (write, fsync,
    rename), so a crash leaves the old or the new content, never a torn one.
    """

    MAX_NAME = 253

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offsets: dict[str, int] = {}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                self._offsets = {str(name): int(offset) for name, offset in loaded.items()}
            except (ValueError, AttributeError, TypeError) as error:
                raise InternalOrdererError(
                    f"{self.path}: not a consumer offset file: {error}"
                ) from None

    def __getitem__(self, consumer: str) -> int:
        return self._offsets[consumer]

    def as_dict(self) -> dict[str, int]:
        return dict(self._offsets)

    def lowest(self) -> int | None:
        """The lowest committed offset over every known consumer; None when there is none."""
        return min(self._offsets.values(), default=None)

    def commit(self, consumer: str, offset: int) -> int:
        """Record that ``consumer`` processed everything below ``offset``; returns its offset
        now (a lower offset than the recorded one changes nothing)."""
        if not consumer or len(consumer) > self.MAX_NAME or not consumer.isprintable():
            raise InterfaceError(
                f"consumer: {consumer!r} must be 1 to {self.MAX_NAME} printable characters"
            )
        current = self._offsets.get(consumer)
        if current is not None and offset <= current:
            return current
        self._offsets[consumer] = offset
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            json.dump(self._offsets, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        _fsync_directory(self.path.parent)
        return offset
