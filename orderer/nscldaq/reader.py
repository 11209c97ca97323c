"""Ring-item files (or a stream on standard input) into fragments: what ``evb send --nscldaq`` and
``evb replay --nscldaq`` read.

Why streaming, in chunks: a readout's output may be piped in (``-``) and never end, and a file
may be many gigabytes; a chunk is indexed at once (:func:`~orderer.nscldaq.format.scan_ring_items`,
the walk compiled) and becomes one :class:`~orderer.batch.FragmentBatch` whose payloads are the
whole ring items, as NSCLDAQ's fragments carry them: the batch's payload is the chunk's bytes
themselves (no copy) whenever the items it keeps are contiguous, as they are but for a skipped
item. Every fragment before a bad item is handed on before its error is raised, so a sender can
have them acknowledged first: nothing that came before is lost.

Rules (docs/nscldaq.md): a RING_FORMAT item is checked (a major version evb does not read is
refused) and not sent; an item without a body header is refused, or with ``skip_unstamped``
counted and left out; the all-ones "no timestamp" stamp becomes the timestamp of the previous
item of the same source (0 if there was none), as NSCLDAQ's orderer does.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from orderer.batch import ArrivalRecords, FragmentBatch
from orderer.nscldaq.format import (
    NULL_TIMESTAMP,
    READABLE_MAJORS,
    RING_FORMAT,
    NscldaqFormatError,
    RingIndex,
    scan_ring_items,
    truncated_item_error,
    unpack_ring_format,
)

__all__ = ["STDIN", "RingItemReader", "read_records"]

STDIN = "-"
"""The file name that stands for standard input."""
DEFAULT_CHUNK = 8 << 20


@dataclass
class RingItemReader:
    """Reads ring-item files into fragment batches; its counters (and the per-source memory of
    the last timestamp, for items stamped "no timestamp") span every file it reads."""

    skip_unstamped: bool = False
    chunk_size: int = DEFAULT_CHUNK
    items: int = 0
    fragments: int = 0
    bytes_read: int = 0
    unstamped_skipped: int = 0
    null_timestamps: int = 0
    format_items: int = 0
    sources: set[int] = field(default_factory=set)
    _last: dict[int, int] = field(default_factory=dict)

    def summary(self) -> dict[str, int]:
        """The counters, for ``evb send``'s JSON summary."""
        return {
            "items": self.items,
            "bytes": self.bytes_read,
            "unstamped_skipped": self.unstamped_skipped,
            "null_timestamps": self.null_timestamps,
            "format_items": self.format_items,
        }

    def read_paths(self, paths: Iterable[str | Path]) -> Iterator[FragmentBatch]:
        """The batches of each file in turn (``-``: standard input)."""
        for path in paths:
            if str(path) == STDIN:
                with open(sys.stdin.fileno(), "rb", closefd=False) as stdin:
                    yield from self.read_stream(stdin, "<stdin>")
            else:
                with Path(path).open("rb") as stream:
                    yield from self.read_stream(stream, str(path))

    def read_stream(self, stream: io.BufferedIOBase, name: str) -> Iterator[FragmentBatch]:
        """The batches of one stream, one a chunk; a truncated last item is an error naming
        its offset (what came before it has been yielded). Each chunk is read into a buffer of
        its own, after the partial item the last one ended with: the batches' payloads are
        views of it, and nothing writes to it once read."""
        pending = np.zeros(0, dtype=np.uint8)
        base = 0  # offset in the stream of pending[0]
        while True:
            buf = np.empty(len(pending) + self.chunk_size, dtype=np.uint8)
            buf[: len(pending)] = pending
            got = stream.readinto(buf.data[len(pending) :])
            if not got:
                break
            buf = buf[: len(pending) + got]
            index, error = scan_ring_items(buf, name, base)
            if len(index):
                batch, unstamped = self._batch(buf, index, name, base)
                if len(batch):
                    yield batch
                error = unstamped or error
            if error is not None:
                raise error
            pending = buf[index.end :]
            base += index.end
        if len(pending):
            raise truncated_item_error(name, base, pending.data)

    def _batch(
        self, buf: npt.NDArray[np.uint8], index: RingIndex, name: str, base: int
    ) -> tuple[FragmentBatch, NscldaqFormatError | None]:
        """The chunk's fragments; with an unstamped item (not skipped), those before it and its
        error."""
        keep = index.has_body_header.copy()
        formats = np.flatnonzero(index.type == RING_FORMAT)
        for i in formats.tolist():
            self._check_format(buf, index, i, name, base)
        keep[formats] = False
        self.format_items += len(formats)
        unstamped = np.flatnonzero(~index.has_body_header & (index.type != RING_FORMAT))
        if unstamped.size:
            if not self.skip_unstamped:
                first = int(unstamped[0])
                error = NscldaqFormatError(
                    name,
                    base + int(index.offset[first]),
                    f"ring item of type {int(index.type[first])} has no body header "
                    "(no timestamp or source id)",
                    hint="--skip-unstamped leaves such items out and counts them",
                )
                keep[first:] = False
                self._count(index, first)
                return self._fragments(buf, index, keep), error
            self.unstamped_skipped += int(unstamped.size)
        self._count(index, len(index))
        return self._fragments(buf, index, keep), None

    def _count(self, index: RingIndex, items: int) -> None:
        self.items += items
        self.bytes_read += int(index.offset[items]) if items < len(index) else index.end

    def _fragments(
        self, buf: npt.NDArray[np.uint8], index: RingIndex, keep: npt.NDArray[np.bool_]
    ) -> FragmentBatch:
        """The kept items as a batch; payload = each whole ring item, a slice of ``buf`` when
        the kept items are contiguous (offsets relative to the first), else gathered."""
        rows = np.flatnonzero(keep)
        if not len(rows):
            return FragmentBatch.from_arrays([], [])
        source = index.source[rows]
        timestamp = index.timestamp[rows]
        first, last = int(rows[0]), int(rows[-1])
        start, stop = int(index.offset[first]), int(index.offset[last]) + int(index.size[last])
        offsets = np.empty(len(rows) + 1, dtype=np.uint64)
        if last - first + 1 == len(rows):
            offsets[:-1] = index.offset[first : last + 1] - start
            offsets[-1] = stop - start
            payload = buf[start:stop]
        else:
            offsets[0] = 0
            np.cumsum(index.size[rows], out=offsets[1:])
            payload = buf[: index.end][np.repeat(keep[: len(index)], index.size)]
        self._fill_null(source, timestamp)
        self.fragments += len(rows)
        return FragmentBatch(source, timestamp, index.barrier[rows], offsets, payload)

    def _fill_null(self, source: npt.NDArray[np.uint32], timestamp: npt.NDArray[np.uint64]) -> None:
        """NSCLDAQ's orderer: a fragment stamped all-ones takes the timestamp of the fragment
        its source sent just before (0 if none). In place (``timestamp`` is the index's own
        copy); remembers each source's last, and every source seen."""
        null = timestamp == np.uint64(NULL_TIMESTAMP)
        if null.any():
            self.null_timestamps += int(null.sum())
            for s in np.unique(source[null]).tolist():
                rows = np.flatnonzero(source == s)
                values = timestamp[rows]
                stamped = values != np.uint64(NULL_TIMESTAMP)
                # position of the last stamped item at or before each one (-1: none yet)
                last = np.where(stamped, np.arange(len(rows)), -1)
                np.maximum.accumulate(last, out=last)
                before = np.uint64(self._last.get(s, 0))
                timestamp[rows] = np.where(last >= 0, values[np.maximum(last, 0)], before)
        if source[0] == source[-1] and (source == source[0]).all():  # the usual: one source
            ids, last_rows = [int(source[0])], [len(source) - 1]
        else:
            unique, first_from_end = np.unique(source[::-1], return_index=True)
            ids, last_rows = unique.tolist(), (len(source) - 1 - first_from_end).tolist()
        for s, row in zip(ids, last_rows, strict=True):
            self._last[s] = int(timestamp[row])
        self.sources.update(ids)

    @staticmethod
    def _check_format(
        buf: npt.NDArray[np.uint8], index: RingIndex, i: int, name: str, base: int
    ) -> None:
        start = int(index.offset[i])
        major, minor = unpack_ring_format(
            buf[start : start + int(index.size[i])].data, name, base + start
        )
        if major not in READABLE_MAJORS:
            readable = ", ".join(str(m) for m in sorted(READABLE_MAJORS))
            raise NscldaqFormatError(
                name,
                base + start,
                f"RING_FORMAT says NSCLDAQ format {major}.{minor}; evb reads major version "
                f"{readable}",
            )


def read_records(paths: Iterable[str | Path], *, skip_unstamped: bool = False) -> ArrivalRecords:
    """Every fragment of the files as ``evb replay`` records, in file order, all arriving at
    ``t`` = 0 (ring-item files carry no arrival times)."""
    reader = RingItemReader(skip_unstamped=skip_unstamped)
    batches = list(reader.read_paths(paths))
    whole = FragmentBatch.concat(batches) if batches else FragmentBatch.from_arrays([], [])
    return ArrivalRecords.fragments(whole).at(0.0)
