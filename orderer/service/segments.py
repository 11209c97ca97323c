"""The segmented Arrow stream both logs are written as: record batches appended to rolling
segment files, with the durability the service needs.

Why its own module: the bytes on disk are one job, apart from what each log holds
(:mod:`orderer.service.logs`). The format itself (segment names, the torn-tail rule, the
readers) is :mod:`orderer.formats.log_format`'s; here is how the service writes through it:
when data is forced to the disk (:class:`FsyncPolicy`), a failed write cut back so that the log
is as before and a later append can retry, a torn tail cut when a log is opened, and an index
of the record batches so that a read loads only the batches it needs.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from orderer.errors import InternalOrdererError
from orderer.formats import log_format
from orderer.service.durable import fsync_directory

__all__ = ["BatchRef", "FsyncPolicy", "SegmentedStream"]


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


@dataclass(slots=True)
class BatchRef:
    """Where one record batch of a segmented log lives."""

    first: int  # first row number (offset) in the whole log
    rows: int
    segment: Path
    position: int  # byte position of its IPC message in the segment


class SegmentedStream:
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
        self.batches: list[BatchRef] = []
        self.rows = 0
        self.sealed = 0  # segments closed by this process (a cue for retention)
        self._file: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._schema_bytes = len(schema.serialize())
        self._position = 0  # bytes written to the open segment
        self._segment: Path | None = None
        self._dirty = False
        self._mapped: tuple[Path, pa.MemoryMappedFile, int] | None = None
        """The segment the last read mapped, its map and the map's size."""
        directory.mkdir(parents=True, exist_ok=True)
        for segment in self.segments():
            self._scan(segment)

    def segments(self) -> list[Path]:
        """The segment files on disk, in row order."""
        return log_format.log_segments(self.directory, self.prefix)

    @property
    def active_segment(self) -> Path | None:
        """The segment appends go to now; None until the next append opens one."""
        return self._segment

    def drop_segment(self, segment: Path) -> None:
        """Delete a sealed segment and forget its batches (retention)."""
        if self._mapped is not None and self._mapped[0] == segment:
            self._mapped = None
        segment.unlink()
        self.batches = [ref for ref in self.batches if ref.segment != segment]

    def _scan(self, segment: Path) -> None:
        first = log_format.first_row(segment)
        if self.batches and first != self.rows:
            raise InternalOrdererError(
                f"{segment}: starts at {first}, but the segments before it end at {self.rows}"
            )
        self.rows = first
        reader = log_format.SegmentReader(segment, self.schema)
        for position, batch in reader:
            self.batches.append(BatchRef(self.rows, batch.num_rows, segment, position))
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
            # afterwards while the loop is busy, and a copy of the batch.
            self._writer.write_batch(batch)
            self._position = self._file.tell()
        except BaseException:
            self._cut_back(position)
            raise
        self.batches.append(BatchRef(self.rows, batch.num_rows, self._segment, position))  # type: ignore[arg-type]
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
            fsync_directory(self.directory)
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

    def read_batch(self, ref: BatchRef) -> pa.RecordBatch:
        """The record batch ``ref`` as views of its segment's map. The last segment read stays
        mapped (mapped again once it grew past the map): a read of many small batches maps it
        once, not once a batch. Called on one thread (the service's loop)."""
        mapped = self._mapped
        if mapped is None or mapped[0] != ref.segment or ref.position >= mapped[2]:
            source = pa.memory_map(str(ref.segment))
            mapped = self._mapped = (ref.segment, source, source.size())
        source = mapped[1]
        source.seek(ref.position)
        try:
            return pa.ipc.read_record_batch(pa.ipc.read_message(source), self.schema)
        except (pa.ArrowInvalid, OSError, EOFError):  # past the map: the file grew since
            self._mapped = None
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
