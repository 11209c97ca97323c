"""The payloads of the arrival log, by row: where every reader of the ordered stream takes them.

Why: each payload byte is written to the disk once, in the arrival log (the write-ahead log an
ack waits for). The ordered log holds each fragment's row in the arrival log instead of a second
copy (:data:`~orderer.formats.log_format.ORDERED_SCHEMA`), so a reader that wants the payloads
(``Subscribe``, the Spark job's ``--path`` read, ``evb tail``) gathers them here: the arrival
segments are memory-mapped, their record batches read as views of the map, and the payloads
copied once, in output order, by one compiled call without the GIL
(:func:`orderer._core.core.gather_payloads`). Only the pages that hold the wanted payloads are
touched; output is read a little behind arrival, so those pages are usually still in the page
cache.

The arrival log may grow while it is read (the service appends to it): a row beyond what has
been indexed rescans the last segment from where the last scan stopped, and looks for new
segments. The torn-tail rule is the format's: a record batch that cannot be read whole ends the
segment, and a row that lies past it does not exist (:class:`~orderer.errors.InterfaceError`
naming the row).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from orderer._core.core import gather_payloads, locate_rows
from orderer.batch import EmittedBatch
from orderer.errors import InterfaceError
from orderer.formats.log_format import (
    ARRIVAL_SCHEMA,
    ARRIVALS,
    END_OF_STREAM,
    ORDERED_SCHEMA,
    ORDERED_SCHEMA_WITH_PAYLOADS,
    SegmentReader,
    emitted_from_arrow,
    first_row,
    log_segments,
)

__all__ = [
    "MAPPED_SEGMENTS",
    "ArrivalPayloads",
    "Located",
    "ordered_batches",
    "read_ordered",
    "read_ordered_range",
    "with_payloads",
]

MAPPED_SEGMENTS = 16
"""Arrival segments kept mapped at once (least recently used first out): readers move forward
through the log, and a process has a bounded number of maps (``vm.max_map_count``)."""

_Part = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]


@dataclass(slots=True, eq=False)
class _Segment:
    """One arrival segment: its record batches as far as scanned, and its map while mapped."""

    path: Path
    first: int
    firsts: list[int] = field(default_factory=list)
    """First row of each whole record batch found so far."""
    positions: list[int] = field(default_factory=list)
    """Byte position of each of those batches' IPC message."""
    end: int = 0
    """Row after the last batch found so far."""
    scanned_to: int = 0
    """Byte position where the next scan goes on (0: the schema is not read yet)."""
    ended: bool = False
    """The end-of-stream marker was read: the segment is sealed, nothing more will come."""
    mapped: pa.MemoryMappedFile | None = None
    mapped_size: int = 0
    parts: dict[int, _Part] = field(default_factory=dict)
    _firsts_array: npt.NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        self.end = self.first

    def firsts_array(self) -> npt.NDArray[np.int64]:
        """:attr:`firsts` as an array (made again only once a scan found more)."""
        if self._firsts_array is None or self._firsts_array.shape[0] != len(self.firsts):
            self._firsts_array = np.asarray(self.firsts, dtype=np.int64)
        return self._firsts_array


@dataclass(frozen=True, slots=True)
class Located:
    """Where some payloads lie (:meth:`ArrivalPayloads.locate`): row ``i``'s is row
    ``in_batch[i]`` of the record batch whose payload column is ``parts[which[i]]``."""

    parts: list[_Part]
    which: npt.NDArray[np.int64]
    in_batch: npt.NDArray[np.int64]

    def gather(
        self, stop: int | None = None, *, start: int = 0, fill: bool = True
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8] | None]:
        """Payloads ``start:stop`` (all): ``(offsets from 0, bytes)``; with ``fill`` false only
        the offsets, ``None`` for the bytes (one compiled call without the GIL)."""
        which, in_batch = self.which[start:stop], self.in_batch[start:stop]
        if which.shape[0] == 0:
            return np.zeros(1, dtype=np.uint64), (np.zeros(0, np.uint8) if fill else None)
        return gather_payloads(self.parts, which, in_batch, fill)


class ArrivalPayloads:
    """The payloads of the arrival log in ``directory`` (an ``arrivals/`` directory), by row."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._segments: list[_Segment] = []
        self._segment_firsts = np.zeros(0, dtype=np.int64)
        self._lru: OrderedDict[int, None] = OrderedDict()

    @classmethod
    def of_data_dir(cls, data_dir: Path) -> ArrivalPayloads:
        return cls(Path(data_dir) / ARRIVALS)

    def close(self) -> None:
        """Unmap every segment (the views already handed out stay valid: they hold the map)."""
        for segment in self._segments:
            self._unmap(segment)
        self._lru.clear()

    # ------------------------------------------------------------------ gather

    def gather(
        self, rows: npt.NDArray[np.uint64], *, fill: bool = True
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8] | None]:
        """The payloads of arrival rows ``rows``, in that order: ``(n + 1 offsets from 0,
        bytes)``; with ``fill`` false only the offsets (the sizes), ``None`` for the bytes."""
        return self.locate(rows).gather(fill=fill)

    def locate(self, rows: npt.NDArray[np.uint64]) -> Located:
        """Where the payloads of arrival rows ``rows`` lie: found once, then sized and copied
        (a reply is sized before it is cut, and only what it keeps is copied).

        One compiled pass over the rows finds each one's record batch, searching from where the
        last one was found (rows in output order lie close together in the arrival log), and
        numbers the batches they touch; a segment's rows are found apart only when the rows
        span several segments."""
        rows = np.asarray(rows, dtype=np.uint64)
        n = rows.shape[0]
        parts: list[_Part] = []
        which = np.empty(n, dtype=np.int64)
        in_batch = np.empty(n, dtype=np.int64)
        if n == 0:
            return Located(parts, which, in_batch)
        wanted = rows.view(np.int64)
        if int(wanted.min()) < 0:  # a row >= 2**63: it cannot exist
            raise self._missing(int(rows[int(np.argmin(wanted))]))
        top = int(wanted.max())
        if not self._segments or top >= self._segments[-1].end:
            self._refresh(top)
        if not self._segments or int(wanted.min()) < self._segments[0].first:
            raise self._missing(int(rows[int(np.argmin(wanted))]))
        first = int(np.searchsorted(self._segment_firsts, int(wanted.min()), "right")) - 1
        if first == int(np.searchsorted(self._segment_firsts, top, "right")) - 1:
            # all in one segment (the usual case): its batches found in one pass, as they are
            which, in_batch, batches = self._in_segment(first, wanted, top)
            return Located([self._part(first, int(b)) for b in batches], which, in_batch)
        seg_part, _, segments = locate_rows(wanted, self._segment_firsts)
        for j, s in enumerate(segments.tolist()):
            here = np.flatnonzero(seg_part == j)
            local = wanted[here]
            part, row_in, batches = self._in_segment(s, local, int(local.max()))
            which[here] = part + len(parts)
            in_batch[here] = row_in
            parts.extend(self._part(s, int(b)) for b in batches)
        return Located(parts, which, in_batch)

    def _in_segment(
        self, index: int, rows: npt.NDArray[np.int64], last: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:func:`~orderer._core.core.locate_rows` of ``rows`` (``last`` the highest) in
        segment ``index``, scanned further first when they reach past what is indexed."""
        segment = self._segments[index]
        if last >= segment.end:
            self._scan(index)
            if last >= segment.end:
                raise self._missing(last)
        return locate_rows(rows, segment.firsts_array())

    def _missing(self, row: int) -> InterfaceError:
        return InterfaceError(
            f"arrival row {row} is not in the arrival log {self.directory} (the ordered log "
            "refers to it): the log is missing or torn there"
        )

    # ------------------------------------------------------------------ index

    def _refresh(self, row: int) -> None:
        """Look for segments written since the last look, and scan the last one further, until
        ``row`` is indexed or nothing more is there."""
        known = {segment.path for segment in self._segments}
        for path in log_segments(self.directory, ARRIVALS):
            if path not in known:
                self._segments.append(_Segment(path, first_row(path)))
        self._segment_firsts = np.asarray([seg.first for seg in self._segments], dtype=np.int64)
        if self._segments and row >= self._segments[-1].end:
            self._scan(len(self._segments) - 1)

    def _scan(self, index: int) -> None:
        """Index the segment's whole record batches after what is indexed already."""
        segment = self._segments[index]
        if segment.ended:
            return
        source = self._map(index, fresh=True)
        try:
            if segment.scanned_to == 0:
                reader = pa.ipc.open_stream(source)
                if not reader.schema.equals(ARRIVAL_SCHEMA):
                    raise InterfaceError(
                        f"{segment.path}: not an arrival-log segment (schema {reader.schema})"
                    )
                segment.scanned_to = source.tell()
            size = segment.mapped_size
            while segment.scanned_to < size:
                source.seek(segment.scanned_to)
                if source.read(len(END_OF_STREAM)) == END_OF_STREAM:
                    segment.ended = True  # sealed: nothing more will come
                    return
                source.seek(segment.scanned_to)
                message = pa.ipc.read_message(source)
                if message.type != "record batch":
                    return
                batch = pa.ipc.read_record_batch(message, ARRIVAL_SCHEMA)
                segment.firsts.append(segment.end)
                segment.positions.append(segment.scanned_to)
                segment.end += batch.num_rows
                segment.scanned_to = source.tell()
        except (EOFError, pa.ArrowInvalid, OSError):
            pass  # a torn tail, or the end of what is written so far

    def _map(self, index: int, *, fresh: bool = False) -> pa.MemoryMappedFile:
        """The segment's map (mapped again when ``fresh`` and the file grew since); the least
        recently used segment is unmapped past :data:`MAPPED_SEGMENTS`."""
        segment = self._segments[index]
        if segment.mapped is None or (fresh and segment.path.stat().st_size > segment.mapped_size):
            self._unmap(segment)
            segment.mapped = pa.memory_map(str(segment.path))
            segment.mapped_size = segment.mapped.size()
        self._lru[index] = None
        self._lru.move_to_end(index)
        while len(self._lru) > MAPPED_SEGMENTS:
            oldest, _ = self._lru.popitem(last=False)
            self._unmap(self._segments[oldest])
        return segment.mapped

    @staticmethod
    def _unmap(segment: _Segment) -> None:
        """Forget the segment's map and the views read from it (they stay valid while held)."""
        if segment.mapped is not None:
            segment.mapped.close()
        segment.mapped, segment.mapped_size = None, 0
        segment.parts.clear()

    def _part(self, index: int, batch: int) -> _Part:
        """The payload column of segment ``index``'s ``batch``-th record batch, as views of
        the map (a batch that was indexed lies within every map made since)."""
        segment = self._segments[index]
        source = self._map(index)
        part = segment.parts.get(batch)
        if part is None:
            source.seek(segment.positions[batch])
            record = pa.ipc.read_record_batch(pa.ipc.read_message(source), ARRIVAL_SCHEMA)
            column = record.column("payload")
            _, offsets, data = column.buffers()
            n = len(column)
            part = (
                np.frombuffer(offsets, np.int64, count=n + 1, offset=column.offset * 8),
                np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8),
            )
            segment.parts[batch] = part
        return part


def with_payloads(emitted: EmittedBatch, payloads: ArrivalPayloads) -> EmittedBatch:
    """``emitted`` with the payloads its ``payload_row`` points at, gathered from the arrival
    log (a batch without payload rows is returned as it is)."""
    if emitted.payload_row is None:
        return emitted
    offsets, data = payloads.gather(emitted.payload_row)
    assert data is not None
    return replace(emitted, payload_offsets=offsets, payload=data)


def read_ordered(segment: Path) -> Iterator[EmittedBatch]:
    """What one segment of the ordered log holds whole, as it holds it, one record batch at a
    time (empty ones left out; ``first_seq`` is the offset of the first): views of the mapped
    file, with ``payload_row`` and no payloads (a segment of
    :data:`~orderer.formats.log_format.ORDERED_SCHEMA_WITH_PAYLOADS`: with its payloads).
    :func:`with_payloads` gathers the payloads of the part a reader wants."""
    for _, batch in SegmentReader(segment, ORDERED_SCHEMA, ORDERED_SCHEMA_WITH_PAYLOADS):
        if batch.num_rows:
            yield emitted_from_arrow(batch)


def ordered_batches(segment: Path, *, payload: bool = True) -> Iterator[EmittedBatch]:
    """:func:`read_ordered` with the payloads, gathered from the arrival log of the segment's
    data directory; without ``payload``, with none."""
    payloads = ArrivalPayloads.of_data_dir(Path(segment).parent.parent) if payload else None
    try:
        for _, batch in SegmentReader(segment, ORDERED_SCHEMA, ORDERED_SCHEMA_WITH_PAYLOADS):
            if batch.num_rows:
                emitted = emitted_from_arrow(batch, payload=payload)
                yield emitted if payloads is None else with_payloads(emitted, payloads)
    finally:
        if payloads is not None:
            payloads.close()


READ_ROWS = 65536
"""Rows a range read (:func:`read_ordered_range`) joins before it gathers their payloads: the
ordered log's record batches are a cycle's output each (a few thousand rows), and a gather has
a fixed cost that a few thousand rows of 32 bytes do not carry."""

READ_BYTES = 64 << 20
"""... and payload bytes a piece of it holds at most (a batch handed on stays far below the
2 GiB a binary column holds)."""


def read_ordered_range(
    segments: Iterable[Path], first: int, until: int, payloads: ArrivalPayloads
) -> Iterator[EmittedBatch]:
    """The fragments at offsets ``[first, until)`` of the ordered log's ``segments`` (in
    order), with their payloads, in pieces of up to :data:`READ_ROWS` rows and
    :data:`READ_BYTES` payload bytes: record batches of one segment joined by Arrow, then one
    lookup and one copy of their payloads (what the Spark job's executors read)."""
    for segment in segments:
        pending: list[pa.RecordBatch] = []
        count = 0
        for _, batch in SegmentReader(segment, ORDERED_SCHEMA, ORDERED_SCHEMA_WITH_PAYLOADS):
            if not batch.num_rows:
                continue
            low = int(batch.column("offset")[0].as_py())
            high = low + batch.num_rows
            if high <= first or low >= until:
                continue
            start, stop = max(first, low) - low, min(until, high) - low
            pending.append(batch.slice(start, stop - start))
            count += stop - start
            if count >= READ_ROWS:
                yield from _pieces(pending, payloads)
                pending, count = [], 0
        if pending:
            yield from _pieces(pending, payloads)


def _pieces(batches: list[pa.RecordBatch], payloads: ArrivalPayloads) -> Iterator[EmittedBatch]:
    """Record batches of one segment, joined, with their payloads, cut at :data:`READ_BYTES`."""
    joined = emitted_from_arrow(batches[0] if len(batches) == 1 else pa.concat_batches(batches))
    if joined.payload_row is None:  # a log that holds its payloads
        yield joined
        return
    located = payloads.locate(joined.payload_row)
    sizes, _ = located.gather(fill=False)
    start = 0
    n = len(joined)
    while start < n:
        stop = int(np.searchsorted(sizes, sizes[start] + READ_BYTES, "right")) - 1
        stop = min(n, max(stop, start + 1))
        offsets, data = located.gather(stop, start=start)
        assert data is not None
        yield replace(joined.slice(start, stop), payload_offsets=offsets, payload=data)
        start = stop
