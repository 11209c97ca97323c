"""``evb forward``: the ordered output of one orderer (A) as sources of another (B), for building
in levels as NSCLDAQ's multi-level event builders do.

Why it is exactly once across a kill -9 of A, of B or of the forwarder itself, without a state
file of its own (its state travels with its commits to A):

- **Numbering.** Each fragment goes to B with a per-source sequence number that is a function of
  A's ordered log alone: by default (each upstream source keeps its id) the number of fragments
  of that source in A's output before it; with ``as_source`` (the whole upstream is one source)
  its offset in A's output, which counts from 0 without gaps. B drops every fragment below a
  source's durable sequence (and refuses gaps), so a replay of A's output from any earlier
  offset brings nothing twice.
- **Acknowledgements chain.** An offset X is committed to A (consumer ``forward-to-<B>`` unless
  named) only once B acknowledged durable every fragment A emitted below X, and the commit
  carries the per-source counts below X as its metadata (JSON, :func:`_metadata`). A restarted
  forwarder reads its committed offset and those counts (``GetCommitted``) and resumes there
  with the same sequences, reading nothing of A's log below it, so it restarts as well when A's
  retention deleted the start of the log (A keeps what a known consumer has not committed).
  Only a commit without usable counts (written by an older forwarder, or with another
  ``as_source``) makes it count the sources of A's log below the offset again, payloads left
  out, which needs that log from offset 0. Everything after the offset is sent again, and B
  drops what it already holds. A restarted A serves the same durable log; a restarted B is
  resent what it had not acknowledged, by the client.
- **Watermarks.** A's output is in timestamp order above its high-water mark: every ordinary
  fragment A emits later that is not late has a timestamp at least the high-water mark. So,
  once a batch of A's output is sent, the high-water mark is sent to B as the watermark of every
  source this forwarder speaks for (docs/ordering.md, Frontiers), and B need not wait a build
  window for an upstream that is slow or quiet. A's late fragments and its barriers may be older;
  B takes them as it takes any fragment older than its source's watermark (late, or sorted into
  the queue).
- **Barriers with ``as_source``.** A resolves the barriers of its sources together and emits
  them one after another. Sent as they are, B would see several barriers of one source in a row
  and resolve each on its own (all but the first waiting ``barrier_timeout``). So each group of
  barriers A resolved at once (consecutive barrier fragments emitted by the same flush, from
  different sources) becomes one barrier at B: its first fragment (the lowest source id) keeps
  its barrier type; the others of the group go as ordinary fragments (type 0) with their
  timestamps and payloads, right after it, so nothing is lost. An offset inside a group is never
  committed, so a restart never cuts a group differently. Two groups resolved by one flush with
  no data between them and no source in common are taken for one.
- **End.** Once A's run ended (``GetStats.run_ended``) and everything up to its end is sent and
  acknowledged, the sources are ended at B (unless ``end_sources`` is false), the last offset
  is committed, and the forwarder returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer.batch import EmittedBatch, FragmentBatch
from orderer.client import (
    DEFAULT_CONNECT_TIMEOUT,
    AsyncSourceClient,
    ChannelSecurity,
    commit_async,
    get_committed_async,
    get_stats_async,
    subscribe,
)
from orderer.errors import InterfaceError, ServiceUnavailable
from orderer.wire.limits import MAX_COMMIT_METADATA

__all__ = ["forward", "forward_async"]

log = logging.getLogger("evb.forward")

_POLL = 0.2
"""Seconds between two commits to A, and between two looks at whether A's run ended."""


def _rows(batch: EmittedBatch, rows: npt.NDArray[np.intp], source: int) -> FragmentBatch:
    """Rows ``rows`` of ``batch`` (in their order) as one batch of ``source``, payloads kept."""
    offsets = batch.payload_offsets.astype(np.int64)
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    gather = np.repeat(starts - new_offsets[:-1].astype(np.int64), lengths) + np.arange(total)
    return FragmentBatch(
        np.full(len(rows), source, dtype=np.uint32),
        batch.timestamp[rows],
        batch.barrier[rows],
        new_offsets,
        batch.payload[gather],
    )


class _Groups:
    """With ``as_source``: which barrier fragments continue a group A resolved at once (they
    travel as ordinary fragments). The state carries over from one batch to the next."""

    def __init__(self) -> None:
        self._t: float | None = None  # the open group's flush time (None: no group open)
        self._sources: set[int] = set()

    def barriers(self, batch: EmittedBatch) -> npt.NDArray[np.uint32]:
        """The barrier types to send for ``batch``."""
        barrier = batch.barrier.copy()
        source, t = batch.source.tolist(), batch.t.tolist()
        kinds = batch.barrier.tolist()
        for i, kind in enumerate(kinds):
            if kind == 0:
                self._t = None
                continue
            if self._t == t[i] and source[i] not in self._sources:
                barrier[i] = 0
                self._sources.add(source[i])
            else:
                self._t, self._sources = t[i], {source[i]}
        return barrier

    @property
    def open(self) -> bool:
        """Whether the last fragment seen was a barrier (a group may go on)."""
        return self._t is not None


def _metadata(counts: dict[int, int], as_source: int | None) -> bytes:
    """The commit metadata of a checkpoint: the fragments sent of each source below it."""
    state = {
        "evb_forward": 1,
        "as_source": as_source,
        "counts": {str(s): n for s, n in counts.items()},
    }
    return json.dumps(state, sort_keys=True, separators=(",", ":")).encode()


def _counts_from(metadata: bytes, offset: int, as_source: int | None) -> dict[int, int] | None:
    """The counts a commit at ``offset`` carried, or None when it carried none this forwarder
    can use: none at all, not a forwarder's, another ``as_source``, or counts that do not add up
    to the offset (every fragment of A is one source's)."""
    if not metadata:
        return None
    try:
        state = json.loads(metadata)
        if state.get("evb_forward") != 1 or state.get("as_source") != as_source:
            return None
        counts = {int(s): int(n) for s, n in state["counts"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if sum(counts.values()) != offset or any(n < 0 for n in counts.values()):
        return None
    return counts


async def _counts_below(target: str, offset: int, connection: dict[str, Any]) -> dict[int, int]:
    """How many fragments of each source A emitted below ``offset`` (payloads left out)."""
    counts: dict[int, int] = {}
    if offset == 0:
        return counts
    async for batch in subscribe(target, 0, until=offset, payload=False, **connection):
        sources, n = np.unique(batch.source, return_counts=True)
        for source, count in zip(sources.tolist(), n.tolist(), strict=True):
            counts[source] = counts.get(source, 0) + count
    return counts


class _Forwarder:
    """One forwarding run from A to B (see the module's docstring)."""

    def __init__(
        self,
        client: AsyncSourceClient,
        upstream: str,
        consumer: str,
        as_source: int | None,
        connection: dict[str, Any],
    ) -> None:
        self.client = client
        self.upstream = upstream
        self.consumer = consumer
        self.as_source = as_source
        self.connection = connection
        self.position = 0
        """A's offset after the last fragment handed to the client."""
        self.committed = 0
        self.counts: dict[int, int] = {}
        self.forwarded = 0
        self.high_water = -1
        self.recounted = False
        """Whether the start counted A's log (no usable commit metadata)."""
        self._groups = _Groups()
        self._checkpoints: deque[tuple[int, dict[int, int]]] = deque()
        self._unsent: tuple[int, dict[int, int]] | None = None
        """An acknowledged checkpoint not committed yet (A was down)."""
        self._stopping = asyncio.Event()
        """Set at the end: the committer finishes the commit it is making and returns (cancelling
        a unary call in flight could leave its channel's close waiting)."""

    async def start_at(self, offset: int, metadata: bytes = b"") -> None:
        """Start at the committed ``offset``, with the counts its ``metadata`` carried."""
        self.position = self.committed = offset
        counts = _counts_from(metadata, offset, self.as_source)
        if self.as_source is not None:
            counts = {self.as_source: offset}  # the offset is the sequence
        elif counts is None:
            if offset:
                log.info(
                    "no counts committed with offset %d: counting %s's log", offset, self.upstream
                )
            self.recounted = offset > 0
            counts = await _counts_below(self.upstream, offset, self.connection)
        self.counts = counts
        for source, count in self.counts.items():
            self.client.number_from(source, count)

    async def read(self) -> None:
        """Forward A's output from the position, forever (until cancelled)."""
        async for batch in subscribe(self.upstream, self.position, **self.connection):
            if batch.first_seq != self.position:
                raise InterfaceError(
                    f"offset: {self.upstream} sent {batch.first_seq}, expected {self.position}"
                )
            await self._send(batch)

    async def _send(self, batch: EmittedBatch) -> None:
        n = len(batch)
        if self.as_source is not None:
            whole = np.arange(n, dtype=np.intp)
            part = _rows(batch, whole, self.as_source)
            part = FragmentBatch(
                part.source,
                part.timestamp,
                self._groups.barriers(batch),
                part.payload_offsets,
                part.payload,
            )
            await self.client.send_fragments(part)
            self.counts[self.as_source] += n
        else:
            for source in np.unique(batch.source).tolist():
                rows = np.flatnonzero(batch.source == source)
                if source not in self.counts:
                    self.counts[source] = 0
                    self.client.number_from(source, 0)
                await self.client.send_fragments(_rows(batch, rows, source))
                self.counts[source] += len(rows)
        self.position += n
        self.forwarded += n
        if not self._groups.open:
            self._checkpoints.append((self.position, dict(self.counts)))
        ordinary = batch.timestamp[(batch.barrier == 0) & ~batch.late]
        if len(ordinary) and int(ordinary.max()) > self.high_water:
            self.high_water = int(ordinary.max())
            for source in self.counts:
                await self.client.watermark(source, self.high_water)

    def _acknowledged(self) -> tuple[int, dict[int, int]] | None:
        """The highest checkpoint below which B acknowledged everything, with its counts; None
        when no checkpoint was passed since the last look."""
        passed = None
        while self._checkpoints and all(
            self.client.acked(s) >= c for s, c in self._checkpoints[0][1].items()
        ):
            passed = self._checkpoints.popleft()
        return passed

    async def commit(self, offset: int, counts: dict[int, int]) -> None:
        """Commit ``offset`` to A with ``counts`` (the counts below it) as its metadata."""
        if offset > self.committed:
            metadata: bytes | None = _metadata(counts, self.as_source)
            if len(metadata or b"") > MAX_COMMIT_METADATA:  # thousands of sources: recount
                log.warning(
                    "the counts of %d sources exceed a commit's metadata: a restart recounts",
                    len(counts),
                )
                metadata = None
            await commit_async(
                self.upstream, self.consumer, offset, metadata=metadata, **self.connection
            )
            self.committed = offset

    def stop(self) -> None:
        """The committer returns once its commit in flight is made."""
        self._stopping.set()

    async def committing(self) -> None:
        """Commit to A what B acknowledged, every :data:`_POLL` seconds (A down: later)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), _POLL)
            passed = self._acknowledged()
            if passed is not None:
                self._unsent = passed
            if self._unsent is not None:
                with contextlib.suppress(ServiceUnavailable):
                    await self.commit(*self._unsent)
                    self._unsent = None

    async def watching(self) -> None:
        """Return once A's run ended and everything up to its end was handed to the client."""
        while True:
            try:
                stats = await get_stats_async(self.upstream, barrier_log_limit=1, **self.connection)
            except ServiceUnavailable as error:
                log.info("no stats from %s (%s): asking again", self.upstream, error)
            else:
                if stats.run_ended and self.position >= stats.next_offset:
                    return
            await asyncio.sleep(_POLL)


async def forward_async(
    upstream: str,
    downstream: str,
    *,
    as_source: int | None = None,
    consumer: str | None = None,
    end_sources: bool = True,
    batch_size: int = 4096,
    linger: float | None = 0.05,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> dict[str, Any]:
    """Forward ``upstream``'s ordered output to ``downstream`` until ``upstream``'s run ended
    (see the module's docstring); returns a summary: the offsets forwarded, the fragments sent,
    the sources at B and the reconnects to B."""
    if as_source is not None and not 0 <= as_source < 2**32:
        raise InterfaceError(f"as_source: {as_source} does not fit in uint32")
    if upstream == downstream:  # its output would come back as its input, for ever
        raise InterfaceError(
            f"downstream: {downstream} is the upstream itself",
            hint="forward one orderer's output into another one",
        )
    name = consumer or f"forward-to-{downstream}"
    connection: dict[str, Any] = {"security": security, "connect_timeout": connect_timeout}
    committed = await get_committed_async(upstream, name, **connection)
    start = committed.offset
    if not committed.known:  # from now on A's retention keeps its log for this forwarder
        await commit_async(upstream, name, 0, **connection)
    client = AsyncSourceClient(
        downstream,
        batch_size=batch_size,
        linger=linger,
        security=security,
        connect_timeout=connect_timeout,
    )
    async with client:
        if client.orderers > 1:  # its numbering is per source; over N it would be per share
            raise InterfaceError(
                f"downstream: {downstream} is a run over {client.orderers} orderers, which "
                "evb forward does not feed yet",
                hint="forward into a run of one orderer",
            )
        forwarder = _Forwarder(client, upstream, name, as_source, connection)
        await forwarder.start_at(start, committed.metadata)
        log.info("forwarding %s from offset %d to %s", upstream, start, downstream)
        reading = [
            asyncio.create_task(forwarder.read()),
            asyncio.create_task(forwarder.watching()),
        ]
        committer = asyncio.create_task(forwarder.committing())
        try:
            done, _ = await asyncio.wait(
                [*reading, committer], return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()  # an error of the reader or the committer ends the forwarder
        finally:
            forwarder.stop()
            for task in reading:
                task.cancel()
            for task in [*reading, committer]:
                with contextlib.suppress(BaseException):
                    await task
        log.info("%s's run ended at offset %d: waiting for %s", upstream, forwarder.position,
                 downstream)
        await client.wait_acked()
        if end_sources:
            for source in forwarder.counts:
                await client.end_source(source)
        await client.close()
        await forwarder.commit(forwarder.position, forwarder.counts)
        log.info("all forwarded and acknowledged; committed %d", forwarder.position)
        reconnects = client.reconnects
    return {
        "from_offset": start,
        "recounted": forwarder.recounted,
        "next_offset": forwarder.position,
        "fragments": forwarder.forwarded,
        "sources": sorted(forwarder.counts),
        "reconnects": reconnects,
    }


def forward(upstream: str, downstream: str, **options: Any) -> dict[str, Any]:
    """:func:`forward_async`, blocking."""
    return asyncio.run(forward_async(upstream, downstream, **options))
