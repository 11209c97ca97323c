"""Columnar batches: how fragments and the other arrivals travel into and out of the orderer.

A batch is a handful of arrays, never one Python object per fragment: timestamps ``uint64``,
source ids and barrier types ``uint32``, and payloads as one byte buffer with ``n + 1`` offsets.
Three shapes: :class:`FragmentBatch` (fragments a source submits together), :class:`EmittedBatch`
(what the orderer emitted, with offsets) and :class:`ArrivalRecords` (every kind of arrival in
arrival order: an ``evb replay`` input, a synthetic run, the service's arrival log).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer.errors import InterfaceError

__all__ = ["ArrivalKind", "ArrivalRecords", "EmittedBatch", "FragmentBatch", "concat_payloads"]

_EMPTY_BYTES = np.zeros(0, dtype=np.uint8)


def concat_payloads(
    parts: Sequence[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
    """One (offsets from 0, blob) from several; a part's offsets need not start at 0 (a slice
    of a bigger batch), only its used bytes are kept."""
    if not parts:
        return np.zeros(1, dtype=np.uint64), _EMPTY_BYTES
    # A fixed number of numpy calls whatever the number of parts (the service joins thousands
    # of batches a second this way, in a thread where each call may wait for the GIL): the
    # parts' offsets are joined, then each part's are moved by (bytes before it - its start),
    # in uint64 arithmetic, which wraps to the right value when that difference is negative.
    starts = [int(part_offsets[0]) for part_offsets, _ in parts]
    stops = [int(part_offsets[-1]) for part_offsets, _ in parts]
    counts = np.asarray([len(part_offsets) - 1 for part_offsets, _ in parts], dtype=np.int64)
    sizes = np.asarray(stops, dtype=np.int64) - np.asarray(starts, dtype=np.int64)
    shift = (np.cumsum(sizes) - sizes - np.asarray(starts, dtype=np.int64)).astype(np.uint64)
    offsets = np.empty(int(counts.sum()) + 1, dtype=np.uint64)
    offsets[0] = 0
    np.concatenate([o[1:] for o, _ in parts], out=offsets[1:], casting="unsafe")
    offsets[1:] += np.repeat(shift, counts)
    blobs = [blob[start:stop] for (_, blob), start, stop in zip(parts, starts, stops, strict=True)]
    return offsets, np.concatenate(blobs)


def _array(name: str, values: object, dtype: type[np.unsignedinteger[Any]]) -> npt.NDArray:
    if isinstance(values, list | tuple):
        # a list of Python ints straight to the target type: np.asarray would make a list that
        # mixes small ints with ints >= 2**63 float64 and lose precision
        try:
            return np.asarray(values, dtype=dtype)
        except (OverflowError, TypeError, ValueError):
            pass  # fall through for the checks that name the problem
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as error:
        raise InterfaceError(f"{name}: not an array ({error})") from None
    if array.ndim != 1:
        raise InterfaceError(f"{name}: expected a 1-d array, got shape {array.shape}")
    if array.dtype != dtype:
        if array.size and array.dtype.kind not in "iu":
            raise InterfaceError(f"{name}: expected integers, got dtype {array.dtype}")
        if array.size and array.dtype.kind == "i" and int(array.min()) < 0:
            raise InterfaceError(f"{name}: negative value {int(array.min())}")
        if array.size and int(array.max()) > np.iinfo(dtype).max:
            raise InterfaceError(
                f"{name}: value {int(array.max())} does not fit in {dtype.__name__}"
            )
        array = array.astype(dtype)
    return np.ascontiguousarray(array)


@dataclass(frozen=True, slots=True)
class FragmentBatch:
    """Fragments submitted together; they share one arrival time."""

    source: npt.NDArray[np.uint32]
    timestamp: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    payload_offsets: npt.NDArray[np.uint64]
    payload: npt.NDArray[np.uint8]

    @classmethod
    def from_arrays(
        cls,
        source: object,
        timestamp: object,
        barrier: object | None = None,
        payloads: Sequence[bytes] | None = None,
        *,
        payload_offsets: object | None = None,
        payload: bytes | npt.NDArray[np.uint8] | None = None,
    ) -> FragmentBatch:
        """Build from array-likes. ``source`` may be a scalar for a single-source batch.

        Payloads come either as a list of ``bytes`` (one per fragment) or already packed as
        ``payload`` + ``payload_offsets``; none means empty payloads.
        """
        ts = _array("timestamp", timestamp, np.uint64)
        n = ts.shape[0]
        if np.isscalar(source):
            scalar: Any = source
            if not 0 <= int(scalar) < 2**32:
                raise InterfaceError(f"source: {scalar} does not fit in uint32")
            src = np.full(n, scalar, dtype=np.uint32)
        else:
            src = _array("source", source, np.uint32)
        bar = (
            np.zeros(n, dtype=np.uint32)
            if barrier is None
            else _array("barrier", barrier, np.uint32)
        )
        if payloads is not None:
            if payload is not None or payload_offsets is not None:
                raise InterfaceError("give payloads either as a list or packed, not both")
            lengths = np.fromiter((len(p) for p in payloads), dtype=np.uint64, count=len(payloads))
            offsets = np.zeros(len(payloads) + 1, dtype=np.uint64)
            np.cumsum(lengths, out=offsets[1:])
            blob = np.frombuffer(b"".join(payloads), dtype=np.uint8)
        elif payload_offsets is not None:
            offsets = _array("payload_offsets", payload_offsets, np.uint64)
            blob = _EMPTY_BYTES if payload is None else np.frombuffer(payload, dtype=np.uint8)
        else:
            offsets = np.zeros(n + 1, dtype=np.uint64)
            blob = _EMPTY_BYTES
        return cls(src, ts, bar, offsets, blob)

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])

    def slice(self, start: int, stop: int | None = None) -> FragmentBatch:
        """Fragments ``start:stop`` as views, payload offsets rebased to 0 (the new part of a
        partly resent batch, or one message's worth of a large batch)."""
        stop = len(self) if stop is None else stop
        offsets = self.payload_offsets[start : stop + 1]
        base = int(offsets[0])
        return FragmentBatch(
            source=self.source[start:stop],
            timestamp=self.timestamp[start:stop],
            barrier=self.barrier[start:stop],
            payload_offsets=offsets - np.uint64(base),
            payload=self.payload[base : int(offsets[-1])],
        )

    @classmethod
    def concat(cls, batches: Sequence[FragmentBatch]) -> FragmentBatch:
        """One batch from several (payload offsets rebased); one batch is returned as is."""
        if len(batches) == 1:
            return batches[0]
        offsets, payload = concat_payloads([(b.payload_offsets, b.payload) for b in batches])
        return cls(
            np.concatenate([b.source for b in batches]),
            np.concatenate([b.timestamp for b in batches]),
            np.concatenate([b.barrier for b in batches]),
            offsets,
            payload,
        )


@dataclass(frozen=True, slots=True)
class EmittedBatch:
    """Fragments emitted by the orderer, in emission order; ``seq`` of row i is first_seq + i.

    ``t`` is the time of the flush that emitted each fragment.
    """

    first_seq: int
    t: npt.NDArray[np.float64]
    source: npt.NDArray[np.uint32]
    timestamp: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    late: npt.NDArray[np.bool_]
    payload_offsets: npt.NDArray[np.uint64]
    payload: npt.NDArray[np.uint8]
    arrival: npt.NDArray[np.float64] | None = None
    """When each fragment arrived (the orderer's output has it: ``t - arrival`` is its delay in
    the orderer); None where the batch was read back from the ordered log, which has no such
    column."""
    payload_row: npt.NDArray[np.uint64] | None = None
    """Where each fragment's payload lies: its row in the arrival log, which the ordered log
    keeps instead of a second copy of the payload (readers gather the payloads from there);
    None where nothing says where they lie (an orderer's output, a log written before)."""

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])

    def payload_of(self, i: int) -> bytes:
        start, stop = int(self.payload_offsets[i]), int(self.payload_offsets[i + 1])
        return self.payload[start:stop].tobytes()

    def slice(self, start: int, stop: int | None = None) -> EmittedBatch:
        """Rows ``start:stop`` as views, payload offsets rebased to 0."""
        stop = len(self) if stop is None else stop
        offsets = self.payload_offsets[start : stop + 1]
        base = int(offsets[0])
        return EmittedBatch(
            first_seq=self.first_seq + start,
            t=self.t[start:stop],
            source=self.source[start:stop],
            timestamp=self.timestamp[start:stop],
            barrier=self.barrier[start:stop],
            late=self.late[start:stop],
            payload_offsets=offsets - np.uint64(base),
            payload=self.payload[base : int(offsets[-1])],
            arrival=None if self.arrival is None else self.arrival[start:stop],
            payload_row=None if self.payload_row is None else self.payload_row[start:stop],
        )

    def copy(self) -> EmittedBatch:
        """A copy owning its memory: a view into a large block (a record batch read from the
        log, a handed-over backlog) pins the whole block for as long as it lives."""
        return EmittedBatch(
            first_seq=self.first_seq,
            t=self.t.copy(),
            source=self.source.copy(),
            timestamp=self.timestamp.copy(),
            barrier=self.barrier.copy(),
            late=self.late.copy(),
            payload_offsets=self.payload_offsets.copy(),
            payload=self.payload.copy(),
            arrival=None if self.arrival is None else self.arrival.copy(),
            payload_row=None if self.payload_row is None else self.payload_row.copy(),
        )

    def records(self) -> Iterator[dict[str, object]]:
        """Rows in the ``evb replay`` OUT layout (slow; for output files and tests)."""
        t = self.t.tolist()
        source = self.source.tolist()
        ts = self.timestamp.tolist()
        barrier = self.barrier.tolist()
        late = self.late.tolist()
        for i in range(len(ts)):
            yield {
                "seq": self.first_seq + i,
                "t": t[i],
                "source": source[i],
                "ts": ts[i],
                "barrier": barrier[i],
                "late": late[i],
            }

    @classmethod
    def empty(cls, first_seq: int = 0) -> EmittedBatch:
        """No fragments; the next one would have ``first_seq``."""
        return cls(
            first_seq,
            np.zeros(0, dtype=np.float64),
            np.zeros(0, dtype=np.uint32),
            np.zeros(0, dtype=np.uint64),
            np.zeros(0, dtype=np.uint32),
            np.zeros(0, dtype=np.bool_),
            np.zeros(1, dtype=np.uint64),
            _EMPTY_BYTES,
        )

    @classmethod
    def concat(cls, batches: Sequence[EmittedBatch]) -> EmittedBatch:
        """One batch from consecutive batches (payload offsets rebased); one batch is returned
        as is (a drained backlog can be millions of fragments: a copy would cost a second)."""
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        offsets, payload = concat_payloads([(b.payload_offsets, b.payload) for b in batches])
        arrivals = [b.arrival for b in batches if b.arrival is not None]
        rows = [b.payload_row for b in batches if b.payload_row is not None]
        return cls(
            batches[0].first_seq,
            np.concatenate([b.t for b in batches]),
            np.concatenate([b.source for b in batches]),
            np.concatenate([b.timestamp for b in batches]),
            np.concatenate([b.barrier for b in batches]),
            np.concatenate([b.late for b in batches]),
            offsets,
            payload,
            np.concatenate(arrivals) if len(arrivals) == len(batches) else None,
            np.concatenate(rows) if len(rows) == len(batches) else None,
        )


class ArrivalKind(enum.IntEnum):
    """What an arrival record is: the ``kind`` column of :class:`ArrivalRecords` and of the
    arrival log. The core replays fragments, watermarks, ends and source-state changes, and
    ``evb replay`` input holds only those; the service applies the other two itself."""

    FRAGMENT = 0
    WATERMARK = 1
    END_OF_SOURCE = 2
    CONFIGURE = 3
    """A live change of parameters; the payload is its JSON."""
    END_RUN = 4
    SOURCE_STATE = 5
    """A source marked dead (``value`` 1) or revived (``value`` 0) by an operator."""
    BEGIN_RUN = 6
    """The service began the next run, numbered ``value`` (the orderer itself is untouched)."""


@dataclass(frozen=True, slots=True)
class ArrivalRecords:
    """Arrivals as columns, one row per record, in arrival order.

    Why one type: an ``evb replay`` input, a synthetic run and the service's arrival log are the
    same record stream (the arrival log exports to, and recovers as, a replay), so they share one
    set of columns and one :class:`ArrivalKind`. ``value`` is a fragment's timestamp or the
    watermark; payloads are one byte buffer with ``n + 1`` offsets from 0.
    """

    kind: npt.NDArray[np.uint8]
    t: npt.NDArray[np.float64] | None
    """Arrival time of each record (seconds); None until the arrival log stamps the records:
    the service takes in what arrived together at one time (:meth:`at`)."""
    source: npt.NDArray[np.uint32]
    value: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    payload_offsets: npt.NDArray[np.uint64]
    payload: npt.NDArray[np.uint8]
    sequence: npt.NDArray[np.uint64] | None = None
    """Per-source sequence numbers the sources gave (deduplication of resends); None: none."""
    sequenced: npt.NDArray[np.bool_] | None = None
    """With a ``sequence``: which rows carry one; None: all of them."""

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def times(self) -> npt.NDArray[np.float64]:
        """The arrival times; an error for records that have none yet."""
        if self.t is None:
            raise InterfaceError("arrival records without arrival times (t)")
        return self.t

    def at(self, t: float) -> ArrivalRecords:
        """The records, all arrived at ``t``."""
        return replace(self, t=np.full(len(self), t, dtype=np.float64))

    def payload_of(self, i: int) -> bytes:
        start, stop = int(self.payload_offsets[i]), int(self.payload_offsets[i + 1])
        return self.payload[start:stop].tobytes()

    def slice(self, start: int, stop: int) -> ArrivalRecords:
        """Rows ``start:stop`` as views, payload offsets rebased to 0."""
        offsets = self.payload_offsets[start : stop + 1]
        base = int(offsets[0])
        return ArrivalRecords(
            self.kind[start:stop],
            None if self.t is None else self.t[start:stop],
            self.source[start:stop],
            self.value[start:stop],
            self.barrier[start:stop],
            offsets - np.uint64(base),
            self.payload[base : int(offsets[-1])],
            None if self.sequence is None else self.sequence[start:stop],
            None if self.sequenced is None else self.sequenced[start:stop],
        )

    def fragment_batch(self, start: int, stop: int) -> FragmentBatch:
        """Rows ``start:stop``, all fragments, as the batch a source would submit (views)."""
        whole = FragmentBatch(
            self.source, self.value, self.barrier, self.payload_offsets, self.payload
        )
        return whole.slice(start, stop)

    @classmethod
    def fragments(
        cls,
        batch: FragmentBatch,
        sequence: npt.NDArray[np.uint64] | None = None,
        sequenced: npt.NDArray[np.bool_] | None = None,
    ) -> ArrivalRecords:
        n = len(batch)
        return cls(
            np.zeros(n, dtype=np.uint8),
            None,
            batch.source,
            batch.timestamp,
            batch.barrier,
            batch.payload_offsets,
            batch.payload,
            sequence,
            sequenced,
        )

    @classmethod
    def marker(
        cls, kind: ArrivalKind, source: int = 0, value: int = 0, payload: bytes = b""
    ) -> ArrivalRecords:
        """One record that is not a fragment (watermark, end of source, configure, end of run)."""
        return cls(
            np.array([kind], dtype=np.uint8),
            None,
            np.array([source], dtype=np.uint32),
            np.array([value], dtype=np.uint64),
            np.zeros(1, dtype=np.uint32),
            np.array([0, len(payload)], dtype=np.uint64),
            np.frombuffer(payload, dtype=np.uint8),
        )

    @classmethod
    def source_state(cls, source: int, dead: bool) -> ArrivalRecords:
        """A source marked dead or revived: logged like an arrival so that recovery and
        ``evb replay`` apply it at the same time as the live orderer did."""
        return cls.marker(ArrivalKind.SOURCE_STATE, source, 1 if dead else 0)

    @classmethod
    def configure(cls, changes: Mapping[str, Any]) -> ArrivalRecords:
        """A live change of parameters; recovery reads the JSON back."""
        return cls.marker(ArrivalKind.CONFIGURE, payload=json.dumps(dict(changes)).encode())

    @classmethod
    def concat(cls, pieces: Sequence[ArrivalRecords]) -> ArrivalRecords:
        """One set of records from several, in order; one is returned as is."""
        if len(pieces) == 1:
            return pieces[0]
        offsets, payload = concat_payloads([(p.payload_offsets, p.payload) for p in pieces])
        times = [p.t for p in pieces if p.t is not None]
        if times and len(times) < len(pieces):
            raise InterfaceError("records with and without arrival times in one concat")
        sequence = sequenced = None
        if any(p.sequence is not None for p in pieces):
            sequence = np.concatenate(
                [np.zeros(len(p), np.uint64) if p.sequence is None else p.sequence for p in pieces]
            )
            if any(p.sequence is None or p.sequenced is not None for p in pieces):
                sequenced = np.concatenate([p.carries_sequence() for p in pieces])
        return cls(
            np.concatenate([p.kind for p in pieces]),
            np.concatenate(times) if times else None,
            np.concatenate([p.source for p in pieces]),
            np.concatenate([p.value for p in pieces]),
            np.concatenate([p.barrier for p in pieces]),
            offsets,
            payload,
            sequence,
            sequenced,
        )

    def carries_sequence(self) -> npt.NDArray[np.bool_]:
        """Which rows carry a sequence number."""
        if self.sequenced is not None:
            return self.sequenced
        return np.full(len(self), self.sequence is not None, dtype=np.bool_)
