"""Durable storage of the orderer service: the arrival log and the ordered log.

Why two logs. A fragment is acknowledged once it sits in the **arrival log**, a write-ahead log of
everything that arrived (fragments, watermarks, ends, live configuration changes, end of run),
each with the time the orderer took it in. The orderer is deterministic given those times (the
contract ``evb replay`` checks), so the arrival log alone can rebuild the orderer's state and its
whole output after a crash: :func:`recover` replays it and appends to the **ordered log** what the
crash kept from being written, so every offset is written exactly once. The ordered log is what
consumers read (``Subscribe``, ``evb tail``, Spark); its offsets are the ``seq`` of ``evb replay``.

Both logs are directories of segment files in Arrow IPC stream format; the format (schemas,
segment names, the torn-tail rule, the conversions) is :mod:`orderer.formats.log_format`'s, which
the readers outside the service share. This module writes through it, with the durability the
service needs: fsync policies, a failed write cut back, retention, recovery.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import pyarrow as pa

from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch
from orderer.clock import MonotonicClock
from orderer.config import OrdererConfig
from orderer.errors import InterfaceError, InternalOrdererError
from orderer.formats import log_format
from orderer.formats.json_lines import write_records
from orderer.replay.run_walk import walk_arrivals
from orderer.wire import convert

__all__ = [
    "ArrivalKind",
    "ArrivalLog",
    "ArrivalRecords",
    "ConsumerOffsets",
    "FsyncPolicy",
    "OrderedLog",
    "Recovered",
    "record_parameters",
    "recover",
    "replace_file",
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


APPEND_CHUNK = 65536
"""Most rows per record batch of the ordered log (what one read has to load at most)."""


@dataclass(slots=True)
class _BatchRef:
    """Where one record batch of a segmented log lives."""

    first: int  # first row number (offset) in the whole log
    rows: int
    segment: Path
    position: int  # byte position of its IPC message in the segment


class _SegmentedStream:
    """Append-only record batches in rolling Arrow IPC stream files; one job: bytes on disk.

    Segments are named and read as :mod:`orderer.formats.log_format` says. Opening scans every
    segment, cuts a torn last batch and indexes the rest; appends always go to a fresh segment
    after that.
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
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._schema_bytes = len(schema.serialize())
        self._position = 0  # bytes written to the open segment
        self._segment: Path | None = None
        self._dirty = False
        directory.mkdir(parents=True, exist_ok=True)
        for segment in self.segments():
            self._scan(segment)

    def segments(self) -> list[Path]:
        return log_format.segment_files(self.directory, self.prefix)

    def _scan(self, segment: Path) -> None:
        first = log_format.first_row(segment)
        if self.batches and first != self.rows:
            raise InternalOrdererError(
                f"{segment}: starts at {first}, but the segments before it end at {self.rows}"
            )
        self.rows = first
        reader = log_format.SegmentReader(segment, self.schema)
        for position, batch in reader:
            self.batches.append(_BatchRef(self.rows, batch.num_rows, segment, position))
            self.rows += batch.num_rows
        if reader.whole == 0:
            segment.unlink()  # nothing whole in it, not even the schema
        elif reader.whole < segment.stat().st_size:  # a torn tail: cut it
            with segment.open("r+b") as torn:
                torn.truncate(reader.whole)
                os.fsync(torn.fileno())

    def append(self, batch: pa.RecordBatch) -> None:
        """Append one record batch. If the write fails (a full volume), the segment is cut back
        to where it was and closed, so the log is as before and a later append can retry."""
        if self._file is None:
            self._open_segment()
        assert self._file is not None
        assert self._writer is not None
        position = self._position
        try:
            # Arrow's stream writer, which writes the batch's buffers where they are (a dozen
            # system calls, no copy) in one call without the GIL. Not batch.serialize() and a
            # write: two calls, each waiting for the event loop's thread to let go of the GIL
            # afterwards (0.3-1 ms each while the loop is busy), and a copy of the batch.
            self._writer.write_batch(batch)
            self._position = self._file.tell()
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
        self._file = self._segment = self._writer = None
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
        self._segment = log_format.segment_path(self.directory, self.prefix, self.rows)
        if self._segment.exists():
            raise InternalOrdererError(f"{self._segment} exists already")
        # a native file: Arrow writes straight to the descriptor, without a Python layer
        self._file = pa.OSFile(str(self._segment), "wb")
        try:
            # the stream writer writes the schema together with the first batch, which so
            # begins after it (an empty segment left by a crash is removed when scanned)
            self._writer = pa.ipc.new_stream(self._file, self.schema)
            self._position = self._schema_bytes
            _fsync_directory(self.directory)
        except BaseException:
            self._cut_back(0)
            raise

    def _close_segment(self) -> None:
        if self._file is not None:
            good = self._position
            try:
                self._file.write(log_format.END_OF_STREAM)  # readers do without it
            except OSError:
                self._cut_back(good)
                return
            if self.fsync is not FsyncPolicy.NEVER:
                os.fsync(self._file.fileno())  # always: a sync racing with this may miss it
            self._dirty = False
            self._file.close()
            self.sealed += 1
        self._file = self._segment = self._writer = None

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
        return log_format.read_batch_at(ref.segment, ref.position, self.schema)

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


def replace_file(path: Path, content: bytes) -> None:
    """Replace ``path`` atomically (write a temporary file, fsync, rename, fsync the directory):
    a crash leaves the old content or the new one, never a torn file."""
    temporary = path.with_suffix(".tmp")
    with temporary.open("wb") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def record_parameters(directory: Path, config: OrdererConfig) -> None:
    """Record the parameters a new run begins with in its data directory (before its logs hold
    a record), so that every later start recovers it with them, whatever its command line."""
    replace_file(Path(directory) / log_format.PARAMETERS, log_format.parameters_bytes(config))


class _Log:
    """What both logs are: one segmented stream of their schema, in their own directory."""

    _NAME: ClassVar[str]
    _SCHEMA: ClassVar[pa.Schema]

    def __init__(self, stream: _SegmentedStream) -> None:
        self._stream = stream

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        fsync: FsyncPolicy = FsyncPolicy.BATCH,
        segment_bytes: int = 64 << 20,
    ) -> Self:
        return cls(_SegmentedStream(Path(directory), cls._NAME, cls._SCHEMA, fsync, segment_bytes))

    @property
    def directory(self) -> Path:
        return self._stream.directory

    def _last_batch(self) -> pa.RecordBatch | None:
        batches = self._stream.batches
        return self._stream.read_batch(batches[-1]) if batches else None

    def sync(self) -> None:
        """Everything appended before this call is durable when it returns (group commit)."""
        self._stream.sync()

    def close(self) -> None:
        self._stream.close()


class ArrivalLog(_Log):
    """Write-ahead log of everything that arrived, in arrival order, with its arrival time."""

    _NAME = log_format.ARRIVALS
    _SCHEMA = log_format.ARRIVAL_SCHEMA

    @property
    def records(self) -> int:
        return self._stream.rows

    @property
    def last_arrival_time(self) -> float | None:
        """Arrival time of the last record in the log."""
        last = self._last_batch()
        return None if last is None else float(log_format.arrivals_from_arrow(last).times()[-1])

    def append_rows(self, t: float | None, rows: ArrivalRecords) -> None:
        """Records that arrived together at ``t`` (None: each at the time it carries), as one
        record batch."""
        if len(rows):
            self._stream.append(log_format.arrivals_to_arrow(rows if t is None else rows.at(t)))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every record batch, in arrival order."""
        return self._stream.iter_batches()

    def read_records(self) -> Iterator[ArrivalRecords]:
        """Every record batch as arrival records, in arrival order."""
        return map(log_format.arrivals_from_arrow, self.batches())

    def export_replay(self, path: Path) -> int:
        """The arrival record as an ``evb replay`` input file; returns how many configuration
        changes it could not express (the replay format has none; end of run is the file's end)."""
        skipped = 0
        with Path(path).open("w", encoding="utf-8") as out:
            for records in self.read_records():
                skipped += int(np.count_nonzero(records.kind == ArrivalKind.CONFIGURE))
                write_records(records, out)
        return skipped


class OrderedLog(_Log):
    """The durable ordered output; offsets are consecutive from 0 and never reused."""

    _NAME = log_format.ORDERED
    _SCHEMA = log_format.ORDERED_SCHEMA

    def __init__(self, stream: _SegmentedStream) -> None:
        super().__init__(stream)
        last = self._last_batch()
        self._last_t = None if last is None else float(log_format.emitted_from_arrow(last).t[-1])

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
        whole = log_format.emitted_to_arrow(emitted)
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
            parts.append(log_format.emitted_from_arrow(batch.slice(start, take)))
            offset += take
            wanted -= take
            index += 1
        if not parts:
            return EmittedBatch.empty(from_offset)
        return parts[0] if len(parts) == 1 else EmittedBatch.concat(parts)

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


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restarted service continues from."""

    orderer: Orderer
    next_sequence: dict[int, int]
    """Per source: the sequence number the next new fragment must carry (dedupe of resends)."""
    resume_time: float
    """Time of the last record or flush of the recovered run; the live clock starts here."""
    run_ended: bool
    run: int | None = None
    """The run number of the log's last begin run; None: no run was begun (the first run)."""
    run_start_offset: int = 0
    """Output offset of that run's first fragment."""
    runs: tuple[tuple[int, int], ...] = ()
    """Every begun run, in order: ``(number, output offset of its first fragment)`` (the
    service's run table, after its first run)."""


def recover(config: OrdererConfig, arrivals: ArrivalLog, ordered: OrderedLog) -> Recovered:
    """Rebuild the orderer from the arrival log and complete the ordered log.

    Every arrival is replayed at its recorded time, then the deadlines up to the last flush the
    ordered log saw are run; the orderer being deterministic, its output up to the log's end is
    what the log holds, and what comes after was emitted (or due) before the crash but not yet
    written: it is appended now. A fresh directory gives a fresh orderer at time 0.
    """
    resume = max(arrivals.last_arrival_time or 0.0, ordered.last_emit_time or 0.0)
    orderer = Orderer(config, clock=MonotonicClock(start=resume))
    next_sequence: dict[int, int] = {}
    logged = ordered.next_offset

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

    def noting_sequences() -> Iterator[ArrivalRecords]:
        for records in arrivals.read_records():
            if records.sequence is not None:
                sources, values = records.source, records.sequence
                valid = records.carries_sequence()
                for source in np.unique(sources[valid]):
                    top = int(values[valid & (sources == source)].max())
                    next_sequence[int(source)] = max(next_sequence.get(int(source), 0), top + 1)
            yield records

    walk = walk_arrivals(orderer, noting_sequences(), complete_log)
    run, run_start_offset = walk.runs[-1] if walk.runs else (None, 0)
    # deadline flushes the live run made after its last arrival, up to its last logged flush
    orderer.advance(now=resume)
    complete_log()
    if ordered.next_offset < logged or orderer.emitted_seq < logged:
        raise InternalOrdererError(
            f"the ordered log holds {logged} fragments but replaying the arrival log emits "
            f"only {orderer.emitted_seq}: the two logs do not belong together"
        )
    ordered.sync()
    return Recovered(
        orderer, next_sequence, resume, walk.run_ended, run, run_start_offset, tuple(walk.runs)
    )


class ConsumerOffsets:
    """The offsets consumers have committed (``Commit``), durable in one small JSON file, with
    the Unix time of each consumer's last commit.

    Why: the ordered log's retention must never delete output a known consumer (the Spark job)
    has not processed yet, or a restarted consumer could not replay it (exactly-once). Each
    consumer's offset only moves forward; the file is replaced atomically (write, fsync,
    rename), so a crash leaves the old or the new content, never a torn one. The file maps each
    name to ``{"offset", "last_commit"}`` and, when the commit carried some, ``"metadata"``
    (base64: the consumer's opaque state at that offset, so that it can resume there without
    reading the log before it, which retention may have deleted); a file of a server before last
    commit times were kept maps names to offsets alone, and reads with no last commit time.
    """

    MAX_NAME = 253
    MAX_METADATA = convert.MAX_COMMIT_METADATA

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offsets: dict[str, int] = {}
        self._last_commit: dict[str, float] = {}
        self._metadata: dict[str, bytes] = {}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                for name, entry in loaded.items():
                    if isinstance(entry, dict):
                        self._offsets[str(name)] = int(entry["offset"])
                        if entry.get("last_commit") is not None:
                            self._last_commit[str(name)] = float(entry["last_commit"])
                        if entry.get("metadata"):
                            self._metadata[str(name)] = base64.b64decode(
                                entry["metadata"], validate=True
                            )
                    else:  # offsets only
                        self._offsets[str(name)] = int(entry)
            except (ValueError, AttributeError, TypeError, KeyError) as error:
                raise InternalOrdererError(
                    f"{self.path}: not a consumer offset file: {error!r}"
                ) from None

    def __getitem__(self, consumer: str) -> int:
        return self._offsets[consumer]

    def as_dict(self) -> dict[str, int]:
        return dict(self._offsets)

    def last_commit(self, consumer: str) -> float | None:
        """Unix time of the consumer's last commit; None if the file did not keep it."""
        return self._last_commit.get(consumer)

    def metadata(self, consumer: str) -> bytes:
        """The metadata committed with the consumer's offset (empty when none)."""
        return self._metadata.get(consumer, b"")

    def lowest(self) -> int | None:
        """The lowest committed offset over every known consumer; None when there is none."""
        return min(self._offsets.values(), default=None)

    def commit(
        self,
        consumer: str,
        offset: int,
        *,
        metadata: bytes | None = None,
        now: float | None = None,
    ) -> int:
        """Record that ``consumer`` processed everything below ``offset`` at Unix time ``now``
        (the wall clock when omitted); returns its offset now (a lower offset than the recorded
        one changes nothing but the last commit time, which then is not written down: a commit
        that moves nothing costs no fsync). ``metadata`` always describes the recorded offset: a
        commit that moves the offset stores it (none when None), one at exactly the recorded
        offset replaces it unless None, one below it is ignored with the offset."""
        if not consumer or len(consumer) > self.MAX_NAME or not consumer.isprintable():
            raise InterfaceError(
                f"consumer: {consumer!r} must be 1 to {self.MAX_NAME} printable characters"
            )
        if metadata is not None and len(metadata) > self.MAX_METADATA:
            raise InterfaceError(
                f"metadata: {len(metadata)} bytes is above the limit of {self.MAX_METADATA}"
            )
        self._last_commit[consumer] = time.time() if now is None else now
        current = self._offsets.get(consumer)
        if current is not None and offset <= current:
            if offset == current and metadata is not None and metadata != self.metadata(consumer):
                self._set_metadata(consumer, metadata)
                self._save()
            return current
        self._offsets[consumer] = offset
        self._set_metadata(consumer, metadata or b"")
        self._save()
        return offset

    def _set_metadata(self, consumer: str, metadata: bytes) -> None:
        if metadata:
            self._metadata[consumer] = bytes(metadata)
        else:
            self._metadata.pop(consumer, None)

    def delete(self, consumer: str) -> bool:
        """Forget ``consumer`` (durably): its offset no longer holds retention back. Returns
        whether it was known; forgetting an unknown consumer writes nothing."""
        self._last_commit.pop(consumer, None)
        self._metadata.pop(consumer, None)
        if self._offsets.pop(consumer, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        """Replace the file atomically (:func:`replace_file`)."""
        entries: dict[str, dict[str, Any]] = {
            name: {"offset": offset, "last_commit": self._last_commit.get(name)}
            for name, offset in self._offsets.items()
        }
        for name, metadata in self._metadata.items():
            entries[name]["metadata"] = base64.b64encode(metadata).decode("ascii")
        replace_file(self.path, json.dumps(entries, sort_keys=True).encode())
