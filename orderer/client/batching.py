"""What a source client ships in one message: the fragments of a source buffered in order, the
checks a batch passes before it is buffered, and where a large batch is cut into messages.

Why apart from the client's connection handling: gRPC costs a fixed ~200 us per message, so
fragments are gathered per source and sent as columns; what goes into one message is a matter
of the fragments alone, whatever the state of the stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.batch import FragmentBatch
from orderer.errors import InterfaceError
from orderer.wire import convert
from orderer.wire.limits import RESERVED_TIMESTAMP

__all__ = [
    "Buffer",
    "Sent",
    "check_timestamp",
    "message_end",
    "single_source",
    "source_batch",
]


class Buffer:
    """Fragments of one source waiting to be shipped, in order: sealed chunks (whole arrays from
    ``send_batch``) and single fragments from ``send`` not sealed yet."""

    __slots__ = ("barriers", "chunks", "count", "payloads", "source", "timestamps")

    def __init__(self, source: int) -> None:
        self.source = source
        self.chunks: list[FragmentBatch] = []
        self.timestamps: list[int] = []
        self.barriers: list[int] = []
        self.payloads: list[bytes] = []
        self.count = 0

    def add_one(self, timestamp: int, barrier: int, payload: bytes) -> int:
        self.timestamps.append(timestamp)
        self.barriers.append(barrier)
        self.payloads.append(payload)
        self.count += 1
        return self.count

    def _seal(self) -> None:
        if self.timestamps:
            has_payload = any(self.payloads)
            self.chunks.append(
                FragmentBatch.from_arrays(
                    source=self.source,
                    timestamp=self.timestamps,
                    barrier=self.barriers,
                    payloads=self.payloads if has_payload else None,
                )
            )
            self.timestamps, self.barriers, self.payloads = [], [], []

    def add_batch(self, batch: FragmentBatch) -> int:
        self._seal()
        self.chunks.append(batch)
        self.count += len(batch)
        return self.count

    def take(self) -> FragmentBatch | None:
        self._seal()
        chunks, self.chunks, self.count = self.chunks, [], 0
        if not chunks:
            return None
        return FragmentBatch.concat(chunks)


@dataclass(frozen=True, slots=True)
class Sent:
    """A batch on the wire, kept until acknowledged."""

    first: int
    count: int
    request: pb.SubmitRequest
    order: int  # global send order, so that a resend keeps the original interleaving


def check_timestamp(timestamp: int) -> None:
    """The timestamp of one fragment given to ``send``: a uint64, not the reserved one."""
    if 0 <= timestamp < RESERVED_TIMESTAMP:  # the common case, without an array
        return
    if timestamp != RESERVED_TIMESTAMP:
        raise InterfaceError(f"timestamp: {timestamp} does not fit in uint64")
    convert.check_timestamps(np.array([timestamp], dtype=np.uint64))


def source_batch(
    source: int,
    timestamps: object,
    barriers: object | None = None,
    payloads: Iterable[bytes] | None = None,
) -> FragmentBatch:
    """The arrays of ``send_batch`` (its parameters) as a checked batch of ``source``."""
    payload_list = list(payloads) if payloads is not None else None
    batch = FragmentBatch.from_arrays(
        source=source, timestamp=timestamps, barrier=barriers, payloads=payload_list
    )
    if len(batch.barrier) != len(batch):
        raise InterfaceError(f"barriers: {len(batch.barrier)} values for {len(batch)} fragments")
    if payload_list is not None and len(payload_list) != len(batch):
        raise InterfaceError(f"payloads: {len(payload_list)} values for {len(batch)} fragments")
    convert.check_timestamps(batch.timestamp)
    return batch


def single_source(batch: FragmentBatch) -> int:
    """The one source of a batch given to ``send_fragments``, once the batch is checked."""
    if not len(batch):
        raise InterfaceError("batch: no fragments")
    source = int(batch.source[0])
    if not (batch.source == batch.source[0]).all():
        raise InterfaceError("source: a client batch must hold one source")
    if len(batch.barrier) != len(batch) or len(batch.payload_offsets) != len(batch) + 1:
        raise InterfaceError("batch: arrays of different lengths")
    convert.check_timestamps(batch.timestamp)
    return source


def message_end(batch: FragmentBatch, start: int, batch_size: int, max_batch_bytes: int) -> int:
    """End of the message that starts at ``start``: ``batch_size`` fragments at most, and
    ``max_batch_bytes`` of payload unless one fragment alone is larger."""
    stop = min(len(batch), start + batch_size)
    offsets = batch.payload_offsets
    if int(offsets[stop]) - int(offsets[start]) > max_batch_bytes:
        limit = offsets[start] + np.uint64(max_batch_bytes)
        fits = int(np.searchsorted(offsets[start : stop + 1], limit, "right")) - 1
        stop = start + max(1, fits)
    return stop
