"""What readers of the ordered output get: the durable part of the ordered log from any offset,
in replies that fit a reader's message limit; their committed offsets; and the retention that
deletes old segments of the log without taking what a known consumer has not processed.

Why apart from the service's input side: readers see only what :mod:`~orderer.service.group_commit`
made durable, and never touch the orderer; a slow reader costs one reply of memory, since the
log is read on demand, and the payloads of a reply are gathered from the arrival log once it is
cut to size (the ordered log keeps where they lie, not the payloads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from orderer.batch import EmittedBatch
from orderer.errors import InterfaceError, ServiceUnavailable
from orderer.service.consumers import ConsumerOffsets
from orderer.service.diagnostics import EmitTimes
from orderer.service.group_commit import GroupCommit
from orderer.stats import ConsumerState
from orderer.wire.limits import REPLY_MAX_BYTES, ordered_batch_bytes

__all__ = ["Retention", "Subscriptions"]

log = logging.getLogger("evb.service")


class Retention:
    """Ordered-log retention by size and age: applied when a segment was sealed, and at most
    once a second otherwise (age). None for both keeps everything."""

    __slots__ = ("_next", "_sealed_seen", "max_age_seconds", "max_bytes")

    def __init__(self, max_bytes: int | None = None, max_age_seconds: float | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self._next = 0.0
        self._sealed_seen = 0

    def due(self, sealed_segments: int) -> bool:
        """Whether to look at the log now (``sealed_segments``: how many it sealed so far)."""
        if self.max_bytes is None and self.max_age_seconds is None:
            return False
        now = time.monotonic()
        if now < self._next and sealed_segments == self._sealed_seen:
            return False
        self._next = now + 1.0
        self._sealed_seen = sealed_segments
        return True

    def rush(self) -> None:
        """What retention may delete changed (a consumer was deleted): look at the log at the
        next chance rather than after the once-a-second pause."""
        self._next = 0.0


class Subscriptions:
    """The readers of one service's ordered log: subscribers, consumers, retention."""

    def __init__(
        self,
        commit: GroupCommit,
        *,
        max_fragments: int = 65536,
        max_bytes: int = REPLY_MAX_BYTES,
        consumers: ConsumerOffsets | None = None,
        retention: Retention | None = None,
    ) -> None:
        self._commit = commit
        self._max_fragments = max_fragments
        self._max_bytes = max_bytes
        self._consumers = consumers
        self._retention = retention if retention is not None else Retention()
        self._emit_times = EmitTimes(commit.ordered)
        self.subscribers = 0
        """Subscriptions open now."""
        self._changed = asyncio.Event()
        self._closed = False
        self._failed = False

    def notify(self) -> None:
        """The durable output grew, or the service stops: wake every subscriber."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def close(self) -> None:
        """The service shuts down: subscriptions end (UNAVAILABLE: resubscribe elsewhere)."""
        self._closed = True
        self.notify()

    def fail(self) -> None:
        """The storage failed: subscriptions end once they have read what is durable."""
        self._failed = True
        self.notify()

    async def subscribe(
        self, from_offset: int, max_fragments: int = 0, *, payload: bool = True
    ) -> AsyncIterator[tuple[EmittedBatch, int]]:
        """``(batch, durable offset)`` from ``from_offset``: what is in the log, then live. Reads
        the log on demand, so a slow subscriber costs one batch of memory. Each batch encodes
        (with its payloads, or without when ``payload`` is false) to at most
        ``subscribe_max_bytes``."""
        limit = self._max_fragments
        if max_fragments:
            limit = min(limit, max_fragments)
        offset = from_offset
        per_fragment = 0.0  # bytes a fragment of the last reply took
        self.subscribers += 1
        try:
            while True:
                if self._closed:
                    raise ServiceUnavailable("the orderer is shutting down; resubscribe")
                durable = self._commit.durable_offset
                if offset < durable:
                    wanted = min(limit, durable - offset)
                    if per_fragment:  # what a reply can hold, with room: no more is read
                        wanted = min(wanted, max(1024, int(1.5 * self._max_bytes / per_fragment)))
                    batch = self._commit.ordered.read(offset, wanted)
                    if not len(batch):
                        raise ServiceUnavailable(f"offset {offset} is not readable yet")
                    # A read is a view into a whole record batch (up to 65,536 fragments); a
                    # subscriber that stops reading holds its reply while it waits for flow
                    # control, and must pin only that reply
                    # (tests/e2e/test_stalled_subscriber.py). The payloads are gathered from
                    # the arrival log once the reply is cut: only what it sends is copied.
                    located = None
                    sizes: npt.NDArray[np.uint64] | None
                    if payload and batch.payload_row is not None:
                        located = self._commit.arrivals.payloads.locate(batch.payload_row)
                        sizes = located.gather(fill=False)[0]
                    else:
                        sizes = batch.payload_offsets if payload else None
                    batch = self._cut_bytes(batch, sizes).copy()
                    if located is not None:
                        offsets, data = located.gather(len(batch))
                        assert data is not None
                        batch = replace(batch, payload_offsets=offsets, payload=data)
                        per_fragment = ordered_batch_bytes(len(batch), data.shape[0]) / len(batch)
                    offset += len(batch)
                    yield batch, durable
                else:
                    if self._failed:
                        raise ServiceUnavailable("the orderer's storage failed")
                    await self._changed.wait()
        finally:
            self.subscribers -= 1

    def _cut_bytes(
        self, batch: EmittedBatch, sizes: npt.NDArray[np.uint64] | None
    ) -> EmittedBatch:
        """The longest head of ``batch`` whose reply encodes to at most ``subscribe_max_bytes``
        (at least one fragment), whatever the payload sizes (``sizes``: the payloads' n + 1
        offsets; None: the reply has none). Why the encoded size and not the payload alone:
        the per-fragment columns add 25-33 bytes a fragment, and a reply of 4 MiB of payload
        plus those went past the 4 MiB a default gRPC reader accepts."""
        n = len(batch)
        payload = sizes is not None
        total = np.zeros(n + 1, np.int64)  # payload bytes of the first k fragments
        if sizes is not None:
            total = sizes.astype(np.int64) - np.int64(sizes[0])
        if ordered_batch_bytes(n, int(total[-1]), payload=payload) <= self._max_bytes:
            return batch
        # reply size of the first k fragments, for k = 0..n (increasing in k)
        bound = ordered_batch_bytes(0, 0, payload=payload)
        per_fragment = ordered_batch_bytes(1, 0, payload=payload) - bound
        total = total + per_fragment * np.arange(n + 1, dtype=np.int64) + bound
        fits = int(np.searchsorted(total, self._max_bytes, "right")) - 1
        return batch.slice(0, max(fits, 1))

    def commit(
        self, consumer: str, offset: int, metadata: bytes | None = None
    ) -> tuple[int, int, bytes]:
        """A consumer processed every offset below ``offset``: ``(its offset now, lowest over
        every consumer, the metadata kept with its offset)``. Retention keeps everything from the
        lowest; an offset beyond the durable output is refused (the consumer cannot have
        processed it). ``metadata``: see :meth:`.ConsumerOffsets.commit`."""
        consumers = self._offsets()
        durable = self._commit.durable_offset
        if offset > durable:
            raise InterfaceError(
                f"offset: {offset} is beyond the durable output (next offset {durable})"
            )
        now = consumers.commit(consumer, offset, metadata=metadata)
        lowest = consumers.lowest()
        return now, now if lowest is None else lowest, consumers.metadata(consumer)

    def get_committed(self, consumer: str) -> tuple[bool, int, int, bytes]:
        """``(known, committed offset, lowest over every consumer, metadata)`` of ``consumer``,
        changing nothing: an unknown name is ``(False, 0, lowest, b"")`` (lowest 0 when no
        consumer is known)."""
        consumers = self._offsets()
        lowest = consumers.lowest() or 0
        if consumer not in consumers.as_dict():
            return False, 0, lowest, b""
        return True, consumers[consumer], lowest, consumers.metadata(consumer)

    def _offsets(self) -> ConsumerOffsets:
        if self._consumers is None:
            raise ServiceUnavailable("this orderer keeps no consumer offsets")
        return self._consumers

    def delete_consumer(self, consumer: str) -> tuple[bool, int | None]:
        """Forget ``consumer``: ``(whether it was known, lowest offset over the consumers left)``.
        Why: a consumer gone for good would hold the ordered log forever. Retention runs at
        once, so the segments it alone held go now, not at the next seal."""
        consumers = self._offsets()
        existed = consumers.delete(consumer)
        if existed:
            self._retention.rush()
            self.apply_retention()
        return existed, consumers.lowest()

    def committed(self) -> dict[str, int]:
        """Committed offset per known consumer (the ``evb_consumer_committed_offset`` metric)."""
        return self._consumers.as_dict() if self._consumers is not None else {}

    def consumer_states(self, now: float) -> dict[str, ConsumerState]:
        """Every known consumer, by name: the offset it committed, its lag in fragments of
        durable output, the time of its last commit, and its lag in seconds: ``now`` (orderer
        time) minus the emit time of the oldest durable fragment it has not committed, 0 when it
        has committed everything."""
        if self._consumers is None:
            return {}
        durable = self._commit.durable_offset
        states = {}
        for name, offset in sorted(self._consumers.as_dict().items()):
            emitted = self._emit_times.at(offset) if offset < durable else None
            states[name] = ConsumerState(
                name=name,
                committed=offset,
                lag=max(0, durable - offset),
                lag_seconds=0.0 if emitted is None else max(0.0, now - emitted),
                last_commit=self._consumers.last_commit(name),
            )
        return states

    def apply_retention(self) -> None:
        """Drop old sealed segments of the ordered log (size, age), keeping what is not durable
        yet and what a known consumer has not committed."""
        ordered = self._commit.ordered
        if not self._retention.due(ordered.sealed_segments):
            return
        keep_from = self._commit.durable_offset
        lowest = self._consumers.lowest() if self._consumers is not None else None
        if lowest is not None:  # output a known consumer has not committed stays
            keep_from = min(keep_from, lowest)
        deleted = ordered.apply_retention(
            keep_from_offset=keep_from,
            max_bytes=self._retention.max_bytes,
            max_age_seconds=self._retention.max_age_seconds,
        )
        for path in deleted:
            log.info("retention removed %s", path.name)
