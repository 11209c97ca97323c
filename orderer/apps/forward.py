"""``evb forward``: the ordered output of one orderer (A) as sources of another (B), for building
in levels as NSCLDAQ's multi-level event builders do.

Why it is exactly once across a kill -9 of A, of B or of the forwarder itself, without a state
file of its own (its state travels with its commits to A):

- **Numbering.** Each fragment goes to B with a per-source sequence number that is a function of
  A's ordered log alone: by default (each upstream source keeps its id) the number of fragments
  of that source in A's output before it; with ``as_source`` (the whole upstream is one source)
  its offset in A's output, which counts from 0 without gaps. B drops every fragment below a
  source's durable sequence (and refuses gaps), so a replay of A's output from any earlier
  offset brings nothing twice. When B is a run over several orderers (docs/scale-out.md), each
  of them numbers its own share of a source, so the number is counted per orderer: of the
  fragments before it forwarded as its source, those routed to its orderer by the source
  client's own rule (:mod:`orderer.apps.forward_numbering`), barriers counting at every
  orderer; the routing reads only timestamps and barrier types, so it is a function of A's
  log too.
- **Acknowledgements chain.** An offset X is committed to A (consumer ``forward-to-<B>`` unless
  named; over several orderers B is named by orderer 0's address) only once B acknowledged
  durable every fragment A emitted below X (every orderer its share), and the commit carries
  the counts below X as its metadata (JSON: per source, :func:`_metadata`; over several
  orderers per source and orderer, :func:`_sliced_metadata`). A restarted forwarder reads its
  committed offset and those counts (``GetCommitted``) and resumes there with the same
  sequences, reading nothing of A's log below it, so it restarts as well when A's retention
  deleted the start of the log (A keeps what a known consumer has not committed). Only a
  commit without usable counts (written by an older forwarder, with another ``as_source``, or
  for a B of other N or T) makes it count A's log below the offset again, payloads left out,
  which needs that log from offset 0. Everything after the offset is sent again, and B drops
  what it already holds. A restarted A serves the same durable log; a restarted B (or one of
  its orderers) is resent what it had not acknowledged, by the client.
- **Watermarks.** A's output is in timestamp order above its high-water mark: every ordinary
  fragment A emits later that is not late has a timestamp at least the high-water mark. So,
  once a batch of A's output is sent, the high-water mark is sent to B (every orderer of it) as
  the watermark of every source this forwarder speaks for (docs/ordering.md, Frontiers), and B
  need not wait a build window for an upstream that is slow or quiet. A's late fragments and
  its barriers may be older; B takes them as it takes any fragment older than its source's
  watermark (late, or sorted into the queue).
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

from orderer.apps.forward_numbering import Checkpoint, Numbering
from orderer.batch import EmittedBatch
from orderer.client import (
    DEFAULT_CONNECT_TIMEOUT,
    AsyncSourceClient,
    ChannelSecurity,
    commit_async,
    get_committed_async,
    get_stats_async,
    parse_targets,
    subscribe,
)
from orderer.errors import InterfaceError, ServiceUnavailable
from orderer.replay.slicing import Slicing
from orderer.wire.limits import MAX_COMMIT_METADATA

__all__ = ["forward", "forward_async"]

log = logging.getLogger("evb.forward")

_POLL = 0.2
"""Seconds between two commits to A, and between two looks at whether A's run ended."""


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


def _sliced_metadata(checkpoint: Checkpoint, as_source: int | None, slicing: Slicing) -> bytes:
    """The commit metadata of a checkpoint when B is a run over several orderers: per source,
    the fragments forwarded as it below the checkpoint and each orderer's share of them, with
    B's N and T (a count per orderer means nothing under another slicing). A version of its own,
    so that a forwarder into one orderer, of this version or an older one, never takes it for
    its per-source counts."""
    state = {
        "evb_forward": 2,
        "as_source": as_source,
        "orderers": slicing.orderers,
        "slice_ticks": slicing.slice_ticks,
        "fragments": {str(s): n for s, n in checkpoint.fragments.items()},
        "shares": {str(s): list(c) for s, c in checkpoint.shares.items()},
    }
    return json.dumps(state, sort_keys=True, separators=(",", ":")).encode()


def _checkpoint_from(
    metadata: bytes, offset: int, as_source: int | None, slicing: Slicing
) -> Checkpoint | None:
    """The checkpoint a commit at ``offset`` stands for, or None when its metadata says nothing
    this forwarder can use. Into one orderer: the per-source counts of :func:`_counts_from` (with
    ``as_source``, the offset itself); into several: :func:`_sliced_metadata`'s, of the same
    ``as_source``, N and T, adding up to the offset, each source's shares its fragments with
    every barrier counted at every orderer."""
    n = slicing.orderers
    if n == 1:
        counts = (
            {as_source: offset}  # the offset is the sequence
            if as_source is not None
            else _counts_from(metadata, offset, as_source)
        )
        if counts is None:
            return None
        return Checkpoint(offset, counts, {s: (c,) for s, c in counts.items()})
    if not metadata:
        return None
    try:
        state = json.loads(metadata)
        if (
            state.get("evb_forward") != 2
            or state.get("as_source") != as_source
            or state.get("orderers") != n
            or state.get("slice_ticks") != slicing.slice_ticks
        ):
            return None
        fragments = {int(s): int(c) for s, c in state["fragments"].items()}
        shares = {int(s): tuple(int(c) for c in cs) for s, cs in state["shares"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if sum(fragments.values()) != offset or fragments.keys() != shares.keys():
        return None
    for source, count in fragments.items():
        share = shares[source]
        copies, rest = divmod(sum(share) - count, n - 1)  # each barrier: n - 1 more
        if len(share) != n or min(share) < 0 or rest or not 0 <= copies <= count:
            return None
    return Checkpoint(offset, fragments, shares)


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
        self.numbering = Numbering(client.slicing, as_source)
        self.position = 0
        """A's offset after the last fragment handed to the client."""
        self.committed = 0
        self.forwarded = 0
        self.high_water = -1
        self.recounted = False
        """Whether the start counted A's log (no usable commit metadata)."""
        self._checkpoints: deque[Checkpoint] = deque()
        self._unsent: Checkpoint | None = None
        """An acknowledged checkpoint not committed yet (A was down)."""
        self._stopping = asyncio.Event()
        """Set at the end: the committer finishes the commit it is making and returns (cancelling
        a unary call in flight could leave its channel's close waiting)."""

    @property
    def counts(self) -> dict[int, int]:
        """Per source at B: the fragments of A forwarded as it."""
        return self.numbering.fragments

    async def start_at(self, offset: int, metadata: bytes = b"") -> None:
        """Start at the committed ``offset``, with the counts its ``metadata`` carried (else
        counted again from A's log)."""
        self.position = self.committed = offset
        numbering = self.numbering
        checkpoint = _checkpoint_from(metadata, offset, self.as_source, numbering.slicing)
        if checkpoint is None:
            if offset:
                log.info(
                    "no counts committed with offset %d: counting %s's log", offset, self.upstream
                )
            self.recounted = offset > 0
            await self._count_below(offset)
        else:
            numbering.restore(checkpoint)
        if self.as_source is not None and self.as_source not in numbering.fragments:
            numbering.restore(  # nothing forwarded yet: the source is known (watermarks, end)
                Checkpoint(offset, {self.as_source: 0}, {self.as_source: (0,) * self.orderers})
            )
        for source, share in numbering.shares.items():
            for orderer, count in enumerate(share.tolist()):
                self.client.number_from(source, count, orderer=orderer)

    @property
    def orderers(self) -> int:
        return self.numbering.slicing.orderers

    async def _count_below(self, offset: int) -> None:
        """Number A's output below ``offset`` as it was forwarded (payloads left out)."""
        if offset == 0:
            return
        async for batch in subscribe(
            self.upstream, 0, until=offset, payload=False, **self.connection
        ):
            self.numbering.parts(batch)

    async def read(self) -> None:
        """Forward A's output from the position, forever (until cancelled)."""
        async for batch in subscribe(self.upstream, self.position, **self.connection):
            if batch.first_seq != self.position:
                raise InterfaceError(
                    f"offset: {self.upstream} sent {batch.first_seq}, expected {self.position}"
                )
            await self._send(batch)

    async def _send(self, batch: EmittedBatch) -> None:
        for part in self.numbering.parts(batch):
            source = int(part.source[0])
            if not self.client.registered(source):  # a new source: from 0 at every orderer
                self.client.number_from(source, 0)
            await self.client.send_fragments(part)
        self.position += len(batch)
        self.forwarded += len(batch)
        if not self.numbering.open:
            self._checkpoints.append(self.numbering.checkpoint(self.position))
        ordinary = batch.timestamp[(batch.barrier == 0) & ~batch.late]
        if len(ordinary) and int(ordinary.max()) > self.high_water:
            self.high_water = int(ordinary.max())
            for source in self.counts:
                await self.client.watermark(source, self.high_water)

    def _acknowledged(self) -> Checkpoint | None:
        """The highest checkpoint below which B acknowledged everything (each orderer its
        share); None when no checkpoint was passed since the last look."""
        passed = None
        while self._checkpoints and all(
            self.client.acked(source, orderer) >= count
            for source, share in self._checkpoints[0].shares.items()
            for orderer, count in enumerate(share)
        ):
            passed = self._checkpoints.popleft()
        return passed

    async def commit(self, checkpoint: Checkpoint) -> None:
        """Commit ``checkpoint`` to A, with the counts below it as its metadata."""
        if checkpoint.offset > self.committed:
            slicing = self.numbering.slicing
            metadata: bytes | None = (
                _metadata(dict(checkpoint.fragments), self.as_source)
                if slicing.orderers == 1
                else _sliced_metadata(checkpoint, self.as_source, slicing)
            )
            if len(metadata or b"") > MAX_COMMIT_METADATA:  # thousands of sources: recount
                log.warning(
                    "the counts of %d sources exceed a commit's metadata: a restart recounts",
                    len(checkpoint.fragments),
                )
                metadata = None
            await commit_async(
                self.upstream,
                self.consumer,
                checkpoint.offset,
                metadata=metadata,
                **self.connection,
            )
            self.committed = checkpoint.offset

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
                    await self.commit(self._unsent)
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


def _not_the_upstream(upstream: str, downstream: str, targets: list[str] | tuple[str, ...]) -> None:
    """Refuse a downstream that is, or holds, the upstream: its output would come back as its
    input, for ever."""
    if upstream in targets:
        held = "is" if len(targets) == 1 else f"holds {upstream},"
        raise InterfaceError(
            f"downstream: {downstream} {held} the upstream itself",
            hint="forward one orderer's output into another one",
        )


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
    the sources at B and the reconnects to B. ``downstream``: one orderer, or the orderers of a
    run over several in their order (``"b0,b1,b2"``), or one of them started with ``--peers``;
    a list that is not a run's orderers in order is refused (``InterfaceError``) before
    anything is committed to ``upstream``."""
    if as_source is not None and not 0 <= as_source < 2**32:
        raise InterfaceError(f"as_source: {as_source} does not fit in uint32")
    _not_the_upstream(upstream, downstream, parse_targets(downstream))
    connection: dict[str, Any] = {"security": security, "connect_timeout": connect_timeout}
    client = AsyncSourceClient(
        downstream,
        batch_size=batch_size,
        linger=linger,
        security=security,
        connect_timeout=connect_timeout,
    )
    async with client:  # learns B's orderers, in order, and refuses a list that is not theirs
        _not_the_upstream(upstream, downstream, client.targets)
        # one orderer: named as given, as always; several: by orderer 0, however they were given
        name = consumer or f"forward-to-{downstream if client.orderers == 1 else client.targets[0]}"
        committed = await get_committed_async(upstream, name, **connection)
        start = committed.offset
        if not committed.known:  # from now on A's retention keeps its log for this forwarder
            await commit_async(upstream, name, 0, **connection)
        forwarder = _Forwarder(client, upstream, name, as_source, connection)
        await forwarder.start_at(start, committed.metadata)
        log.info("forwarding %s from offset %d to %s", upstream, start, client.target)
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
                 client.target)
        await client.wait_acked()
        if end_sources:
            for source in forwarder.counts:
                await client.end_source(source)
        await client.close()
        await forwarder.commit(forwarder.numbering.checkpoint(forwarder.position))
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
