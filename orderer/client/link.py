"""One orderer's ``Submit`` stream for a source client: numbering, acknowledgements, resends and
flow control towards that orderer alone.

Why apart from the client's batching: a run spread over several orderers gives a source one
stream per orderer, each with its own sequence numbers (the orderer deduplicates by
``(source, sequence)`` among what it got), its own batches awaiting acknowledgement, its own
reconnects and its own flow control. An orderer that asks a source to pause stops only what
goes to it: the client hands each link its share (:meth:`OrdererLink.offer`), the link keeps it
in the source's queue and puts it on the wire once it may (sequence known, not paused, not too
much unacknowledged), in the source's order, watermarks and ends included. The client blocks a
source only when a link holds ``max_unacked`` fragments of it, queued or unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import FragmentBatch
from orderer.client.batching import Sent, message_end
from orderer.client.connect import FATAL_CODES, channel_options, connect_async, error_of
from orderer.client.reconnect import Reconnects
from orderer.errors import EvbError, InterfaceError, ServiceUnavailable
from orderer.wire import convert
from orderer.wire.refusal import refusal_from
from orderer.wire.security import ChannelSecurity, aio_channel

__all__ = ["Changes", "LinkOptions", "OrdererLink"]

log = logging.getLogger("evb.client")

_STREAM_ENDED = (grpc.aio.AioRpcError, asyncio.InvalidStateError)
"""How a Submit stream ends under the client: the server's status, or a write into a call the
server (or a dead connection) already finished ("RPC already finished"). Either one reconnects;
anything else is a fault of the client's own code, and fails it."""

_WRITE_RACE = (grpc.StatusCode.INTERNAL, "Internal error from Core")
"""What grpcio's asyncio client reports instead of the server's status when one of its writes
races with the server ending the stream (grpc/grpc#36066: the failed write overwrites the
status the server sent). A stream refused at its opening says why in its initial metadata too
(:mod:`orderer.wire.refusal`); otherwise the client keeps the last status the server did give
(a full log volume's "refuses writes") for its decisions and its message."""


class Changes:
    """What the client and its links wait on: any ack, pause, resume, error or end wakes every
    waiter, which looks again at what it waits for."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def until(self, predicate: Callable[[], bool], check: Callable[[], None]) -> None:
        """Return once ``predicate()`` holds; ``check()`` raises what stops the wait."""
        while not predicate():
            check()
            await self._event.wait()


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """The client's options a link uses (see :class:`~orderer.client.AsyncSourceClient`)."""

    batch_size: int
    max_unacked: int
    max_batch_bytes: int
    max_message_bytes: int
    backoff: tuple[float, float]
    reconnect_timeout: float | None
    connect_timeout: float | None
    security: ChannelSecurity | None


class _Source:
    """One source at one orderer."""

    __slots__ = (
        "acked",
        "cut",
        "draining",
        "ended",
        "next_seq",
        "paused",
        "pending",
        "pending_count",
        "unacked",
        "unacked_count",
        "watermark",
    )

    def __init__(self, first_sequence: int | None) -> None:
        self.next_seq = first_sequence
        self.unacked: deque[Sent] = deque()
        self.unacked_count = 0
        self.acked = 0
        self.paused = False
        self.watermark: int | None = None  # the highest sent, resent after a reconnect
        self.ended = False
        self.pending: deque[FragmentBatch | pb.SubmitRequest] = deque()
        """What waits to go on the wire, in the source's order: fragments and watermarks/ends."""
        self.pending_count = 0
        self.cut = 0  # rows of pending[0] already on the wire
        self.draining = False


class OrdererLink:
    """The stream to one orderer for every source of the client (see the module)."""

    def __init__(
        self,
        target: str,
        options: LinkOptions,
        changes: Changes,
        first_sequence: Mapping[int, int] | None = None,
    ) -> None:
        self.target = target
        self._options = options
        self._changes = changes
        self._first_sequence = dict(first_sequence or {})
        self._warned: set[int] = set()
        self._sources: dict[int, _Source] = {}
        self._order = 0
        self._outbox: deque[pb.SubmitRequest] = deque()
        self._writer_wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self.error: BaseException | None = None
        self._closing = False
        self.finished = False
        self.connected = False
        self._had_reply = False
        self._task: asyncio.Task[None] | None = None
        self.channel: grpc.aio.Channel | None = None
        self.reconnects = 0
        """How often the stream was re-established (for tests and monitoring)."""

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Open the channel, waiting at most ``connect_timeout`` for the orderer to answer."""
        if self.channel is None:
            options = self._options
            channel = aio_channel(
                self.target, options.security, channel_options(options.max_message_bytes)
            )
            try:
                await connect_async(channel, self.target, options.connect_timeout, options.security)
            except BaseException:
                await channel.close()
                raise
            self.channel = channel

    def start(self) -> None:
        """Start the stream (after :meth:`connect`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def close_when_drained(self) -> None:
        """Once every queue is on the wire, end the stream; the server ends it OK once all of
        it is durable (``finished``)."""
        self._closing = True
        self._writer_wake.set()

    def drained(self) -> bool:
        return not any(s.pending for s in self._sources.values())

    async def abort(self) -> None:
        self._closing = True
        tasks = [*self._background, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._task = None
        if self.channel is not None:
            await self.channel.close()
            self.channel = None

    # ------------------------------------------------------------------ state

    def register(self, source: int) -> None:
        if source in self._sources:
            return
        self._sources[source] = _Source(self._first_sequence.get(source))
        if self.connected:
            self._enqueue(self._hello(source))

    def number_from(self, source: int, first_sequence: int) -> None:
        self._first_sequence[source] = first_sequence
        if source in self._sources:
            self._sources[source].next_seq = first_sequence
        else:
            self.register(source)

    def acked(self, source: int) -> int:
        state = self._sources.get(source)
        return state.acked if state else 0

    def next_sequence(self, source: int) -> int | None:
        state = self._sources.get(source)
        return state.next_seq if state else None

    def paused(self, source: int) -> bool:
        state = self._sources.get(source)
        return state.paused if state else False

    def unacked(self, source: int | None = None) -> int:
        if source is not None:
            state = self._sources.get(source)
            return state.unacked_count if state else 0
        return sum(s.unacked_count for s in self._sources.values())

    def held(self, source: int) -> int:
        """Fragments of ``source`` this link holds: queued or awaiting their ack."""
        state = self._sources.get(source)
        return state.pending_count + state.unacked_count if state else 0

    def settled(self, source: int) -> bool:
        """Whether everything given for ``source`` is on the wire, or the orderer asks it to
        pause: what a source waits for before it goes on (so that with one orderer, sending
        waits for the wire as it always did, and an XOFF holds only what goes to its orderer)."""
        state = self._sources.get(source)
        return state is None or not state.pending or state.paused

    def queued(self) -> int:
        return sum(s.pending_count for s in self._sources.values())

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    # ------------------------------------------------------------------ sending

    def offer(self, source: int, item: FragmentBatch | pb.SubmitRequest) -> None:
        """Queue fragments (a batch of ``source``) or a watermark/end of it, after what it
        queued before; they go on the wire as soon as the source may send to this orderer."""
        self.register(source)
        state = self._sources[source]
        state.pending.append(item)
        if isinstance(item, FragmentBatch):
            state.pending_count += len(item)
        if not state.draining:
            state.draining = True
            self._spawn(self._drain, source, state)

    def _may_ship(self, state: _Source) -> bool:
        return (
            state.next_seq is not None
            and not state.paused
            and state.unacked_count + self._options.batch_size <= self._options.max_unacked
        )

    async def _drain(self, source: int, state: _Source) -> None:
        """Put the source's queue on the wire in order, each message once the source may send:
        fragments in messages of at most ``batch_size`` and ``max_batch_bytes`` of payload."""
        options = self._options
        try:
            while state.pending:
                item = state.pending[0]
                if not isinstance(item, FragmentBatch):
                    self._control(source, state, item)
                    state.pending.popleft()
                    continue
                await self._changes.until(lambda: self._may_ship(state), self._check_running)
                start = state.cut
                stop = message_end(item, start, options.batch_size, options.max_batch_bytes)
                part = item if start == 0 and stop == len(item) else item.slice(start, stop)
                first = state.next_seq
                assert first is not None
                request = pb.SubmitRequest(batch=convert.batch_to_pb(part, first))
                n = len(part)
                state.next_seq = first + n
                state.unacked.append(Sent(first, n, request, self._order))
                self._order += 1
                state.unacked_count += n
                state.pending_count -= n
                state.ended = False
                self._enqueue(request)
                if stop == len(item):
                    state.pending.popleft()
                    state.cut = 0
                else:
                    state.cut = stop
        finally:
            state.draining = False
            self._changes.notify()

    def _control(self, source: int, state: _Source, request: pb.SubmitRequest) -> None:
        kind = request.WhichOneof("item")
        if kind == "watermark":
            value = request.watermark.watermark
            state.watermark = value if state.watermark is None else max(state.watermark, value)
        elif kind == "end_of_source":
            state.ended = True
        self._enqueue(request)

    def _check_running(self) -> None:
        self.check()
        if self._task is None or self._task.done():
            raise InterfaceError("the client is not running (call start() first)")

    def _spawn(
        self, work: Callable[[int, _Source], Awaitable[None]], source: int, state: _Source
    ) -> None:
        async def guarded() -> None:
            try:
                await work(source, state)
            except Exception as error:  # the client's next call raises it
                if self.error is None and not isinstance(error, EvbError):
                    log.exception("sending source %d to %s failed", source, self.target)
                    self.error = error
                    self._changes.notify()

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _hello(self, source: int) -> pb.SubmitRequest:
        """An empty batch: the server answers with the source's durable sequence."""
        return pb.SubmitRequest(batch=pb.FragmentBatch(source=source))

    def _enqueue(self, request: pb.SubmitRequest) -> None:
        self._outbox.append(request)
        self._writer_wake.set()

    # ------------------------------------------------------------------ connection

    def _resend(self) -> list[pb.SubmitRequest]:
        """What a new stream starts with: a hello per source, every unacknowledged batch in the
        original order, then the latest watermark and the end of each source."""
        requests = [self._hello(source) for source in self._sources]
        pending = sorted(
            (s for state in self._sources.values() for s in state.unacked), key=lambda s: s.order
        )
        requests += [sent.request for sent in pending]
        requests += [
            pb.SubmitRequest(watermark=pb.Watermark(source=source, watermark=state.watermark))
            for source, state in self._sources.items()
            if state.watermark is not None
        ]
        requests += [
            pb.SubmitRequest(end_of_source=pb.EndOfSource(source=source))
            for source, state in self._sources.items()
            if state.ended
        ]
        return requests

    async def _run(self) -> None:
        assert self.channel is not None
        stub = pb_grpc.OrdererStub(self.channel)
        options = self._options
        reconnects = Reconnects(options.backoff, options.reconnect_timeout)
        told: tuple[grpc.StatusCode, str | None] | None = None
        """The last status the server itself gave since the last reply (see _WRITE_RACE)."""
        while True:
            call = stub.Submit()
            code, details = await self._connection(call)
            if (code, details) != _WRITE_RACE:
                told = (code, details)
            elif told is not None:
                code, details = told
            if self.error is not None:
                self._changes.notify()
                return
            if code == grpc.StatusCode.OK and self._closing:
                self.finished = True
                self._changes.notify()
                return
            if code in FATAL_CODES:
                self.error = error_of(code, details, self.target, options.security)
                log.info("the orderer refused this client: %s", self.error)  # raised next call
                self._changes.notify()
                return
            if self._had_reply:
                reconnects.answered()
                told = None
            delay = reconnects.next_delay()
            if delay is None:
                self.error = ServiceUnavailable(
                    f"no connection to the orderer at {self.target} for "
                    f"{options.reconnect_timeout} s ({code.name}: {details})"
                )
                self._changes.notify()
                return
            log.info(
                "Submit stream to %s ended (%s: %s); reconnecting in %.2f s",
                self.target,
                code,
                details,
                delay,
            )
            self.reconnects += 1
            await asyncio.sleep(delay)

    async def _connection(
        self, call: grpc.aio.StreamStreamCall
    ) -> tuple[grpc.StatusCode, str | None]:
        """One stream, until it ends; returns its status."""
        self._had_reply = False
        for state in self._sources.values():  # a new server says XOFF again if it still means it
            state.paused = False
        self._changes.notify()
        self._outbox = deque(self._resend())
        self.connected = True
        self._writer_wake.set()
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(call))
        writer = loop.create_task(self._write(call))
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:  # a failure of this code, not of the stream: raised below
                failure = None if task.cancelled() else task.exception()
                if failure is not None and not isinstance(failure, _STREAM_ENDED):
                    raise failure
            if writer in done and writer.exception() is None:
                await reader
        except _STREAM_ENDED:
            pass
        except Exception as error:
            # reconnecting would only meet the same failure again, for ever: the client fails
            # and the next call raises it, instead of hanging
            log.exception("Submit stream failed")
            self.error = error
        finally:
            self.connected = False
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(BaseException):
                    await task
            if not call.done():
                call.cancel()
        code, details = await call.code(), await call.details()
        if (code, details) == _WRITE_RACE:  # the status lost: a refusal at the opening says why
            return refusal_from(await call.initial_metadata()) or (code, details)
        return code, details

    async def _write(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            while self._outbox:
                await call.write(self._outbox[0])
                self._outbox.popleft()
            if self._closing and self.drained():
                await call.done_writing()
                return
            self._writer_wake.clear()
            if not self._outbox:
                await self._writer_wake.wait()

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        async for reply in call:
            self._had_reply = True
            item = reply.WhichOneof("item")
            if item == "ack":
                self._on_ack(reply.ack.source, reply.ack.durable_sequence)
            elif item == "flow_control":
                state = self._sources.get(reply.flow_control.source)
                if state is not None:
                    state.paused = reply.flow_control.paused
                self._changes.notify()

    def _on_ack(self, source: int, durable: int) -> None:
        state = self._sources.get(source)
        if state is None:
            return
        known = state.next_seq
        if known is None:
            state.next_seq = durable  # a new client continues the source's sequence
        elif durable > known and not (source in self._first_sequence or source in self._warned):
            # a sender numbering from a known point (resume, forward) expects this: no warning;
            # otherwise once per source
            self._warned.add(source)
            log.warning(
                "source %d at %s: the server has sequence %d, beyond this client's %d; "
                "fragments numbered below it will be taken for resends and dropped",
                source,
                self.target,
                durable,
                known,
            )
        state.acked = max(state.acked, durable)
        queue = state.unacked
        while queue and queue[0].first + queue[0].count <= durable:
            state.unacked_count -= queue.popleft().count
        self._changes.notify()
