"""The asyncio source client: data sources in, each fragment durable on its orderer exactly once.

Why more than the generated stub: a data source must not lose or duplicate fragments when the
orderer restarts, and must not send one message per fragment (gRPC costs a fixed ~200 us per
message). :class:`AsyncSourceClient` therefore

- batches fragments per source (``batch_size``, or after ``linger`` seconds, or on ``flush``);
- numbers them per source and orderer (the server deduplicates by ``(source, sequence)``);
- keeps every batch until the server acknowledges it as durable, and resends all of them after a
  reconnect (exponential backoff with jitter), so a crash of the server loses nothing that was
  not acknowledged and duplicates nothing;
- honours flow control: while an orderer asks a source to pause, what goes to that orderer
  waits in the client;
- bounds memory: sending blocks once ``max_unacked`` fragments of a source are held for one
  orderer, waiting to go or awaiting their ack.

A run spread over several orderers (docs/scale-out.md) is one client over all of them: given
their addresses in order (or one address whose ``GetStats`` names the others), it routes every
batch in one pass (:mod:`~orderer.client.routing`: each fragment to the owner of its slice,
barriers and crossing watermarks to the others) and keeps one stream per orderer
(:mod:`~orderer.client.link`); watermarks and ends of source go to every orderer. With one
orderer it sends every batch unchanged, as it always did.

A new client asks the server where each of its sources stands (an empty batch, answered with an
``Ack``), so a second ``evb send`` for the same source continues its sequence. Closing the client
waits until every orderer ended its stream OK, which each does only once everything sent on it
(watermarks and ends included) is durable. The blocking flavour is
:class:`orderer.client.blocking.SourceClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import FragmentBatch
from orderer.client.batching import Buffer, check_timestamp, single_source, source_batch
from orderer.client.connect import check_connect_timeout, check_source, error_of
from orderer.client.link import Changes, LinkOptions, OrdererLink
from orderer.client.roles import check_roles, peers_of
from orderer.client.routing import SourceRouting
from orderer.errors import EvbError, InterfaceError
from orderer.replay.slicing import Slicing
from orderer.wire.convert import slice_role_from_pb
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity

__all__ = ["AsyncSourceClient", "parse_targets"]


def parse_targets(target: str | Sequence[str]) -> list[str]:
    """The orderers' addresses: a list, or one string of addresses separated by commas."""
    targets = [t.strip() for t in target.split(",")] if isinstance(target, str) else list(target)
    if not targets or not all(targets):
        raise InterfaceError(f"target: {target!r} names no orderer address (HOST:PORT[,...])")
    if len(set(targets)) != len(targets):
        raise InterfaceError(f"target: {target!r} names an orderer twice")
    return targets


class AsyncSourceClient:
    """One ``Submit`` stream per orderer of the run, for one or more data sources, asyncio.

    ``async with AsyncSourceClient("host:50051", sources=[1]) as client: await client.send(1, ts)``;
    a run over several orderers: ``AsyncSourceClient("a:50051,b:50051,c:50051")`` (orderers 0, 1
    and 2, in that order) or the address of any one of them that was started with ``--peers``.
    Every call raises the error that stopped the client, if any: ``InterfaceError`` when a
    server refused the input (``INVALID_ARGUMENT``; the batches it acknowledged before stay
    accepted) or the orderers are not the run's in that order, ``ServiceUnavailable`` when
    ``reconnect_timeout`` passed without a connection, ``AuthenticationError`` when the server
    refused the token. :meth:`start` raises ``ServiceUnavailable`` when an orderer does not
    answer within ``connect_timeout`` (None: wait as ``reconnect_timeout`` allows, and take a
    single address for a run of one orderer without asking); a connection lost later is
    retried and everything not acknowledged resent.
    """

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        sources: Iterable[int] = (),
        batch_size: int = 4096,
        linger: float | None = 0.05,
        max_unacked: int = 1 << 20,
        first_sequence: Mapping[int, int] | None = None,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        reconnect_timeout: float | None = None,
        max_batch_bytes: int = 8 << 20,
        max_message_bytes: int = 64 << 20,
        security: ChannelSecurity | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if batch_size < 1:
            raise InterfaceError(f"batch_size: {batch_size} must be >= 1")
        check_connect_timeout(connect_timeout)
        if max_unacked < batch_size:
            raise InterfaceError(f"max_unacked: {max_unacked} must be >= batch_size")
        self._targets = parse_targets(target)
        self.target = ",".join(self._targets)
        self._batch_size = batch_size
        self._linger = linger
        self._max_unacked = max_unacked
        self._first_sequence = dict(first_sequence or {})
        self._options = LinkOptions(
            batch_size=batch_size,
            max_unacked=max_unacked,
            max_batch_bytes=max_batch_bytes,
            max_message_bytes=max_message_bytes,
            backoff=(backoff_initial, backoff_max),
            reconnect_timeout=reconnect_timeout,
            connect_timeout=connect_timeout,
            security=security,
        )
        self._lock = threading.Lock()  # guards the buffers: SourceClient fills them from its thread
        self._buffers: dict[int, Buffer] = {}
        self._ship_locks: dict[int, asyncio.Lock] = {}
        self._changes = Changes()
        self._links = [self._link(t) for t in self._targets]
        self._routing = SourceRouting(Slicing(1, 1))
        self._lingering: dict[int, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._error: BaseException | None = None
        self._closing = False
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        for source in sources:
            self._register(source)

    def _link(self, target: str) -> OrdererLink:
        return OrdererLink(target, self._options, self._changes, self._first_sequence)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> AsyncSourceClient:
        """Connect to every orderer (each within ``connect_timeout`` seconds, else
        ``ServiceUnavailable`` naming the address and the cause), learn how the run is sliced
        and start the streams."""
        if not self._started:
            self._loop = asyncio.get_running_loop()
            try:
                for link in self._links:
                    await link.connect()
                if self._options.connect_timeout is not None or len(self._links) > 1:
                    await self._learn_slicing()
            except BaseException:
                for link in self._links:
                    await link.abort()
                raise
            self._started = True
            for link in self._links:
                link.start()
        return self

    async def _learn_slicing(self) -> None:
        """N and T from the orderers' ``GetStats``; one address of a run over several stands
        for all of them (its ``peers``). Refused with one line: orderers that are not one run's
        in the order given."""
        roles = [slice_role_from_pb(await self._role(link)) for link in self._links]
        if len(self._links) == 1:
            peers = peers_of(self._targets[0], roles[0])
            if peers is not None:
                # every orderer at its own address, the one asked included: the address given
                # may be a Service, which could route a reconnect to another orderer
                await self._links[0].abort()
                self._targets = peers
                self._links = [self._link(t) for t in self._targets]
                for link in self._links:
                    await link.connect()
                roles = [slice_role_from_pb(await self._role(link)) for link in self._links]
                self.target = ",".join(self._targets)
        n = len(self._links)
        check_roles(self._targets, roles)
        if n > 1:
            assert roles[0].slice_ticks is not None  # an orderer of several has its T
            self._routing = SourceRouting(Slicing(n, roles[0].slice_ticks))
        for link in self._links:  # the sources known already go to the new links too
            for source in self._buffers:
                link.register(source)

    async def _role(self, link: OrdererLink) -> pb.Slicing:
        assert link.channel is not None
        stub = pb_grpc.OrdererStub(link.channel)
        try:
            stats = await stub.GetStats(
                pb.GetStatsRequest(), timeout=self._options.connect_timeout or 30.0
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                return pb.Slicing(orderers=1, index=0)
            raise error_of(
                error.code(), error.details(), link.target, self._options.security
            ) from None
        if not stats.HasField("slicing") or stats.slicing.orderers == 0:
            return pb.Slicing(orderers=1, index=0)  # a server from before slicing
        return stats.slicing

    async def __aenter__(self) -> AsyncSourceClient:
        return await self.start()

    async def __aexit__(self, kind: object, error: object, traceback: object) -> None:
        if error is None:
            await self.close()
        else:
            await self.abort()

    async def close(self, timeout: float | None = None) -> None:
        """Ship what is buffered, then wait until every orderer has made everything sent
        durable (it ends the stream OK), and disconnect. Raises the error that stopped the
        client.

        Without ``timeout`` it waits as long as the servers take (a server down is waited for
        up to ``reconnect_timeout``), like a Kafka producer's close. With it, it gives up after
        ``timeout`` seconds with ``TimeoutError`` naming what was never acknowledged, which is
        then lost with this client as after :meth:`abort`."""
        if not self._started:
            return
        try:
            await asyncio.wait_for(self._close(), timeout)
        except TimeoutError:
            outstanding = (
                self.unacked()
                + sum(link.queued() for link in self._links)
                + sum(b.count for b in self._buffers.values())
            )
            raise TimeoutError(
                f"close: {outstanding} fragments not acknowledged within {timeout} s; they are"
                " lost with this client unless sent again"
            ) from None
        finally:
            await self.abort()

    async def _close(self) -> None:
        if not self._closing:
            await self.flush()
            self._closing = True
            for link in self._links:
                link.close_when_drained()
        await self._wait(lambda: all(link.finished for link in self._links))

    async def abort(self) -> None:
        """Disconnect now; whatever was not acknowledged is lost with this client."""
        self._closing = True
        for handle in self._lingering.values():
            handle.cancel()
        self._lingering.clear()
        for task in self._background:
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task
        for link in self._links:
            await link.abort()
        self._started = False

    # ------------------------------------------------------------------ state

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        for link in self._links:
            link.check()
        if self._closing:
            raise InterfaceError("the client is closed")

    def _check_running(self) -> None:
        if self._error is not None:
            raise self._error
        for link in self._links:
            link.check()
        if not self._started or not all(link.running or link.finished for link in self._links):
            raise InterfaceError("the client is not running (call start() first)")

    async def _wait(self, predicate: Callable[[], bool]) -> None:
        await self._changes.until(predicate, self._check_running)

    def _register(self, source: int) -> None:
        if source in self._buffers:
            return
        check_source(source)
        self._buffers[source] = Buffer(source)
        self._ship_locks[source] = asyncio.Lock()
        for link in self._links:
            link.register(source)

    def registered(self, source: int) -> bool:
        return source in self._buffers

    def number_from(self, source: int, first_sequence: int, orderer: int | None = None) -> None:
        """Number ``source``'s fragments from ``first_sequence`` instead of continuing the
        server's sequence (call before its first fragment): a sender that replays its input
        from a known point (``evb forward``) numbers it the same way every time, and the server
        drops what it already holds. Over several orderers each numbers its own share of the
        source, so only ``0`` is taken there for all of them: the same input is routed the same
        way every time, so each orderer's share is numbered the same way again. ``orderer``:
        number only that orderer's share (after :meth:`start`), for a sender that knows how
        many fragments of the source it routed to each (``evb forward``, from its commits)."""
        if orderer is not None:
            if not self._started or not 0 <= orderer < len(self._links):
                raise InterfaceError(
                    f"number_from: orderer {orderer} is not one of the run's"
                    f" {len(self._links)} (known once started)"
                )
            self._register(source)
            self._links[orderer].number_from(source, first_sequence)
            return
        if len(self._links) > 1 and first_sequence != 0:
            raise InterfaceError(
                f"number_from: {first_sequence}: over several orderers each numbers its share"
                " of a source apart, from 0"
            )
        self._first_sequence[source] = first_sequence
        self._register(source)
        for link in self._links:
            link.number_from(source, first_sequence)

    @property
    def orderers(self) -> int:
        """The orderers of the run (known once started)."""
        return len(self._links)

    @property
    def targets(self) -> tuple[str, ...]:
        """The run's orderers' addresses, in their order (known once started)."""
        return tuple(self._targets)

    @property
    def slicing(self) -> Slicing:
        """How the run is sliced, N and T (known once started; one orderer: ``Slicing(1, 1)``)."""
        return self._routing.slicing

    def acked(self, source: int, orderer: int | None = None) -> int:
        """Fragments of ``source`` below this sequence number are durable on the server (one
        orderer; over several, the fragments acknowledged by all of them together, or by
        ``orderer`` alone, in its own numbering of its share)."""
        if orderer is not None:
            return self._links[orderer].acked(source)
        if len(self._links) == 1:
            return self._links[0].acked(source)
        return sum(link.acked(source) for link in self._links)

    def next_sequence(self, source: int) -> int | None:
        """Sequence number the next shipped fragment of ``source`` gets (None: not known yet);
        over several orderers, the fragments numbered in all (None until every orderer told)."""
        numbers = [link.next_sequence(source) for link in self._links]
        if any(n is None for n in numbers):
            return None
        return sum(n for n in numbers if n is not None)

    def paused(self, source: int) -> bool:
        """Whether an orderer asks ``source`` to pause."""
        return any(link.paused(source) for link in self._links)

    def unacked(self, source: int | None = None) -> int:
        """Fragments shipped and not acknowledged yet (of one source, or all)."""
        return sum(link.unacked(source) for link in self._links)

    @property
    def connected(self) -> bool:
        return all(link.connected for link in self._links)

    @property
    def reconnects(self) -> int:
        """How often a stream was re-established (for tests and monitoring)."""
        return sum(link.reconnects for link in self._links)

    # ------------------------------------------------------------------ sending

    async def send(
        self, source: int, timestamp: int, barrier: int = 0, payload: bytes = b""
    ) -> None:
        """One fragment; shipped with others of its source."""
        self._check()
        self._register(source)
        check_timestamp(timestamp)
        await self._buffered(source, self._buffer_one(source, timestamp, barrier, payload))

    async def send_batch(
        self,
        source: int,
        timestamps: object,
        barriers: object | None = None,
        payloads: Iterable[bytes] | None = None,
    ) -> None:
        """Many fragments of one source at once (arrays), in their order."""
        self._check()
        self._register(source)
        batch = source_batch(source, timestamps, barriers, payloads)
        await self._buffered(source, self._buffer_batch(source, batch))

    async def send_fragments(self, batch: FragmentBatch) -> None:
        """A :class:`~orderer.batch.FragmentBatch` of one source (e.g. from
        :func:`orderer.replay.synthetic.iter_batches`), payloads included."""
        self._check()
        source = single_source(batch)
        self._register(source)
        await self._buffered(source, self._buffer_batch(source, batch))

    def _buffer_one(self, source: int, timestamp: int, barrier: int, payload: bytes) -> int:
        """Append one fragment to the buffer of its registered source (from any thread: the
        blocking client calls this from its caller's); the fragments the buffer now holds."""
        with self._lock:
            return self._buffers[source].add_one(timestamp, barrier, payload)

    def _buffer_batch(self, source: int, batch: FragmentBatch) -> int:
        """:meth:`_buffer_one` for a checked batch."""
        with self._lock:
            return self._buffers[source].add_batch(batch)

    async def _buffered(self, source: int, count: int) -> None:
        """``count`` fragments of ``source`` wait: ship them once they fill a batch, else
        after ``linger``."""
        self._after_add(source, count)
        if count >= self._batch_size:
            await self._ship(source)

    def _after_add(self, source: int, count: int) -> None:
        if count < self._batch_size and self._linger is not None and source not in self._lingering:
            loop = self._loop or asyncio.get_running_loop()
            self._lingering[source] = loop.call_later(self._linger, self._linger_fire, source)

    def _linger_fire(self, source: int) -> None:
        self._lingering.pop(source, None)
        self._spawn(source)

    def _spawn(self, source: int) -> None:
        async def guarded() -> None:
            with contextlib.suppress(EvbError):  # recorded by its link, raised by the next call
                await self._ship(source)

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _has_room(self, source: int) -> bool:
        limit = self._max_unacked - self._batch_size
        return all(link.held(source) <= limit for link in self._links)

    async def _ship(self, source: int) -> None:
        """Route the source's buffered fragments to their orderers' queues, once every orderer's
        share of the source has room (``max_unacked``); each link puts its share on the wire
        as soon as the source may send to it."""
        async with self._ship_locks[source]:
            with self._lock:
                if not self._buffers[source].count:
                    return
            await self._wait(lambda: self._has_room(source))
            with self._lock:
                batch = self._buffers[source].take()
            handle = self._lingering.pop(source, None)
            if handle is not None:
                handle.cancel()
            if batch is None:
                return
            for routed in self._routing.route(source, batch):
                link = self._links[routed.orderer]
                if routed.part is not None:
                    link.offer(source, routed.part)
                if routed.watermark is not None:
                    link.offer(source, _watermark(source, routed.watermark))
            await self._wait(lambda: all(link.settled(source) for link in self._links))

    async def flush(self, source: int | None = None) -> None:
        """Ship everything buffered now (of one source, or all)."""
        self._check()
        for s in [source] if source is not None else list(self._buffers):
            await self._ship(s)

    async def watermark(self, source: int, watermark: int) -> None:
        """``source`` promises nothing older than ``watermark`` will come (after what it sent);
        every orderer of the run hears it."""
        self._check()
        self._register(source)
        if not 0 <= watermark < 2**64:
            raise InterfaceError(f"watermark: {watermark} does not fit in uint64")
        await self._ship(source)
        for link in self._links:
            link.offer(source, _watermark(source, watermark))

    async def end_source(self, source: int) -> None:
        """``source`` says end of stream (a later fragment re-opens it), to every orderer."""
        self._check()
        self._register(source)
        await self._ship(source)
        for link in self._links:
            link.offer(source, pb.SubmitRequest(end_of_source=pb.EndOfSource(source=source)))

    async def wait_acked(self, timeout: float | None = None) -> None:
        """Ship everything buffered and wait until every batch is durable on its orderer."""
        await self.flush()
        await asyncio.wait_for(
            self._wait(lambda: all(link.drained() and not link.unacked() for link in self._links)),
            timeout,
        )


def _watermark(source: int, watermark: int) -> pb.SubmitRequest:
    return pb.SubmitRequest(watermark=pb.Watermark(source=source, watermark=watermark))
