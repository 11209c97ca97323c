"""Columnar batches: how fragments travel into and out of the orderer.

A batch is a handful of arrays, never one Python object per fragment: timestamps ``uint64``,
source ids and barrier types ``uint32``, and payloads as one byte buffer with ``n + 1`` offsets.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer.errors import InterfaceError

__all__ = ["EmittedBatch", "FragmentBatch", "concat_payloads"]

_EMPTY_BYTES = np.zeros(0, dtype=np.uint8)


def concat_payloads(
    parts: Sequence[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
    """One (offsets from 0, blob) from several; a part's offsets need not start at 0 (a slice
    of a bigger batch), only its used bytes are kept."""
    offsets = [np.zeros(1, dtype=np.uint64)]
    blobs = []
    base = 0
    for part_offsets, blob in parts:
        start, stop = int(part_offsets[0]), int(part_offsets[-1])
        blobs.append(blob[start:stop])
        tail = part_offsets[1:]
        offsets.append(tail if start == base else (tail - np.uint64(start)) + np.uint64(base))
        base += stop - start
    return np.concatenate(offsets), np.concatenate(blobs) if blobs else _EMPTY_BYTES


def _array(name: str, values: object, dtype: type[np.generic]) -> npt.NDArray:
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
            src = np.full(n, source, dtype=np.uint32) if 0 <= int(source) < 2**32 else None  # type: ignore[call-overload]
            if src is None:
                raise InterfaceError(f"source: {source} does not fit in uint32")
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
        return cls(
            batches[0].first_seq,
            np.concatenate([b.t for b in batches]),
            np.concatenate([b.source for b in batches]),
            np.concatenate([b.timestamp for b in batches]),
            np.concatenate([b.barrier for b in batches]),
            np.concatenate([b.late for b in batches]),
            offsets,
            payload,
        )
