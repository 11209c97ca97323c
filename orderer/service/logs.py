"""The service's two logs: the arrival log and the ordered log.

Why two logs. A fragment is acknowledged once it sits in the **arrival log**, a write-ahead log of
everything that arrived (fragments, watermarks, ends, live configuration changes, end of run),
each with the time the orderer took it in. The orderer is deterministic given those times (the
contract ``evb replay`` checks), so the arrival log alone can rebuild the orderer's state and its
whole output after a crash: :mod:`orderer.service.recovery` replays it and appends to the
**ordered log** what the crash kept from being written, so every offset is written exactly once.
The ordered log is what consumers read (``Subscribe``, ``evb tail``, Spark); its offsets are the
``seq`` of ``evb replay``.

Why each payload is written once: the ordered log keeps, for each fragment, its row in the
arrival log (``payload_row``) instead of a second copy of its payload, and readers gather the
payloads from the arrival log (:mod:`orderer.formats.payloads`). Twice the bytes on disk was
twice the disk bandwidth and the volume a run needs, and a copy more of every byte in the
process; the arrival log is kept for the whole run anyway.

Each log is one segmented stream (:mod:`orderer.service.segments`) of its schema, in its own
directory; the format (schemas, segment names, the torn-tail rule, the conversions) is
:mod:`orderer.formats.log_format`'s, which the readers outside the service share. Here is what
each log holds and how it is read: arrival records in arrival order, fragments by offset, and
the ordered log's retention.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Self

import numpy as np
import pyarrow as pa

from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch
from orderer.errors import InterfaceError, InternalOrdererError
from orderer.formats import log_format
from orderer.formats.json_lines import write_records
from orderer.formats.payloads import ArrivalPayloads
from orderer.service.segments import FsyncPolicy, SegmentedStream

__all__ = ["APPEND_CHUNK", "ArrivalLog", "OrderedLog"]

APPEND_CHUNK = 65536
"""Most rows per record batch of the ordered log (what one read has to load at most)."""


class _Log:
    """What both logs are: one segmented stream of their schema, in their own directory."""

    _NAME: ClassVar[str]
    _SCHEMA: ClassVar[pa.Schema]

    def __init__(self, stream: SegmentedStream) -> None:
        self._stream = stream

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        fsync: FsyncPolicy = FsyncPolicy.BATCH,
        segment_bytes: int = 64 << 20,
    ) -> Self:
        return cls(SegmentedStream(Path(directory), cls._NAME, cls._SCHEMA, fsync, segment_bytes))

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
    """Write-ahead log of everything that arrived, in arrival order, with its arrival time; the
    only copy of the payloads on disk (:attr:`payloads` gathers them by row for readers)."""

    _NAME = log_format.ARRIVALS
    _SCHEMA = log_format.ARRIVAL_SCHEMA

    def __init__(self, stream: SegmentedStream) -> None:
        super().__init__(stream)
        self.payloads = ArrivalPayloads(stream.directory)
        """The payloads by row, for the readers of the ordered log (on the event loop's
        thread)."""

    def close(self) -> None:
        super().close()
        self.payloads.close()

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
    """The durable ordered output; offsets are consecutive from 0 and never reused. It keeps
    where each fragment's payload lies in the arrival log (``payload_row``), not the payload."""

    _NAME = log_format.ORDERED
    _SCHEMA = log_format.ORDERED_SCHEMA

    def __init__(self, stream: SegmentedStream) -> None:
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
        """Up to ``max_fragments`` fragments from ``from_offset``, with their ``payload_row``
        and without their payloads (:func:`~orderer.formats.payloads.with_payloads` gathers
        them); empty once caught up."""
        if from_offset < self.first_offset:
            raise InterfaceError(
                f"offset {from_offset} was removed by retention; the log starts at "
                f"{self.first_offset}"
            )
        stream = self._stream
        parts: list[pa.RecordBatch] = []
        wanted = min(max_fragments, self.next_offset - from_offset)
        index = stream.find(from_offset) if wanted > 0 else len(stream.batches)
        offset = from_offset
        while wanted > 0 and index < len(stream.batches):
            ref = stream.batches[index]
            batch = stream.read_batch(ref)
            start = offset - ref.first
            take = min(wanted, ref.rows - start)
            parts.append(batch.slice(start, take))
            offset += take
            wanted -= take
            index += 1
        if not parts:
            return EmittedBatch.empty(from_offset)
        # one conversion of the joined rows (Arrow joins them in one call): a read spans many
        # record batches, one a cycle of the orderer's thread
        whole = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
        return log_format.emitted_from_arrow(whole)

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
        active = stream.active_segment
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
            stream.drop_segment(path)
            total -= sizes[path]
            deleted.append(path)
        return deleted
