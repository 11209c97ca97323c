"""The asyncio source client: data sources in, each fragment durable on the orderer exactly once.

Why more than the generated stub: a data source must not lose or duplicate fragments when the
orderer restarts, and must not send one message per fragment (gRPC costs a fixed ~200 us per
message). :class:`AsyncSourceClient` therefore

- batches fragments per source (``batch_size``, or after ``linger`` seconds, or on ``flush``);
- numbers them per source (the server deduplicates by ``(source, sequence)``);
- keeps every batch until the server acknowledges it as durable, and resends all of them after a
  reconnect (exponential backoff with jitter), so a crash of the server loses nothing that was
  not acknowledged and duplicates nothing;
- honours flow control: while the server asks a source to pause, shipping its batches waits;
- bounds memory: sending blocks once ``max_unacked`` fragments of a source await their ack.

A new client asks the server where each of its sources stands (an empty batch, answered with an
``Ack``), so a second ``evb send`` for the same source continues its sequence. Closing the client
waits until the server ended the stream OK, which it does only once everything sent on it
(watermarks and ends included) is durable. The blocking flavour is
:class:`orderer.client.blocking.SourceClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import FragmentBatch
from orderer.client.batching import (
    Buffer,
    Sent,
    check_timestamp,
    message_end,
    single_source,
    source_batch,
)
from orderer.client.connect import (
    FATAL_CODES,
    channel_options,
    check_connect_timeout,
    check_source,
    connect_async,
    error_of,
)
from orderer.client.reconnect import Reconnects
from orderer.errors import EvbError, InterfaceError, ServiceUnavailable
from orderer.wire import convert
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity, aio_channel

__all__ = ["AsyncSourceClient"]

log = logging.getLogger("evb.client")


_STREAM_ENDED = (grpc.aio.AioRpcError, asyncio.InvalidStateError)
"""How a Submit stream ends under the client: the server's status, or a write into a call the
server (or a dead connection) already finished ("RPC already finished"). Either one reconnects;
anything else is a fault of the client's own code, and fails it."""

_WRITE_RACE = (grpc.StatusCode.INTERNAL, "Internal error from Core")
"""What grpcio's asyncio client reports instead of the server's status when one of its writes
races with the server ending the stream (grpc/grpc#36066: the failed write overwrites the
status the server sent). The server's reason is lost; the client keeps the last status the
server did give (a full log volume's "refuses writes") for its decisions and its message."""


class AsyncSourceClient:
    """One connection (one ``Submit`` stream) for one or more data sources, asyncio flavour.

    ``async with AsyncSourceClient("host:50051", sources=[1]) as client: await client.send(1, ts)``.
    Every call raises the error that stopped the client, if any: ``InterfaceError`` when the
    server refused the input (``INVALID_ARGUMENT``; the batches it acknowledged before stay
    accepted), ``ServiceUnavailable`` when ``reconnect_timeout`` passed without a connection,
    ``AuthenticationError`` when the server refused the token. :meth:`start` raises
    ``ServiceUnavailable`` when no connection is made within ``connect_timeout`` (None: wait
    as ``reconnect_timeout`` allows); a connection lost later is retried and everything not
    acknowledged resent.
    """

    def __init__(
        self,
        target: str,
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
        self.target = target
        self._batch_size = batch_size
        self._linger = linger
        self._max_unacked = max_unacked
        self._first_sequence = dict(first_sequence or {})
        self._warned: set[int] = set()
        self._backoff = (backoff_initial, backoff_max)
        self._reconnect_timeout = reconnect_timeout
        self._connect_timeout = connect_timeout
        self._max_message_bytes = max_message_bytes
        self._max_batch_bytes = max_batch_bytes
        self._security = security
        self._lock = threading.Lock()  # guards the buffers: SourceClient fills them from its thread
        self._buffers: dict[int, Buffer] = {}
        self._ship_locks: dict[int, asyncio.Lock] = {}
        self._next_seq: dict[int, int | None] = {}
        self._unacked: dict[int, deque[Sent]] = {}
        self._unacked_count: dict[int, int] = {}
        self._acked: dict[int, int] = {}
        self._paused: dict[int, bool] = {}
        self._watermarks: dict[int, int] = {}
        self._ended: dict[int, bool] = {}
        self._order = 0
        self._outbox: deque[pb.SubmitRequest] = deque()
        self._writer_wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._lingering: dict[int, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._error: BaseException | None = None
        self._closing = False
        self._finished = False
        self._connected = False
        self._had_reply = False
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reconnects = 0
        """How often the stream was re-established (for tests and monitoring)."""
        for source in sources:
            self._register(source)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> AsyncSourceClient:
        """Connect (at most ``connect_timeout`` seconds, else ``ServiceUnavailable`` naming the
        address and the cause) and start the stream."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            channel = aio_channel(
                self.target, self._security, channel_options(self._max_message_bytes)
            )
            try:
                await connect_async(channel, self.target, self._connect_timeout, self._security)
            except BaseException:
                await channel.close()
                raise
            self._channel = channel
            self._task = self._loop.create_task(self._run())
        return self

    async def __aenter__(self) -> AsyncSourceClient:
        return await self.start()

    async def __aexit__(self, kind: object, error: object, traceback: object) -> None:
        if error is None:
            await self.close()
        else:
            await self.abort()

    async def close(self, timeout: float | None = None) -> None:
        """Ship what is buffered, then wait until the server has made everything sent durable
        (it ends the stream OK), and disconnect. Raises the error that stopped the client.

        Without ``timeout`` it waits as long as the server takes (a server down is waited for
        up to ``reconnect_timeout``), like a Kafka producer's close. With it, it gives up after
        ``timeout`` seconds with ``TimeoutError`` naming what was never acknowledged, which is
        then lost with this client as after :meth:`abort`."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._close(), timeout)
        except TimeoutError:
            outstanding = self.unacked() + sum(b.count for b in self._buffers.values())
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
            self._writer_wake.set()
        await self._wait(lambda: self._finished)

    async def abort(self) -> None:
        """Disconnect now; whatever was not acknowledged is lost with this client."""
        self._closing = True
        for handle in self._lingering.values():
            handle.cancel()
        self._lingering.clear()
        for task in [*self._background, *([self._task] if self._task else [])]:
            task.cancel()
        for task in [*self._background, *([self._task] if self._task else [])]:
            with contextlib.suppress(BaseException):
                await task
        self._task = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    # ------------------------------------------------------------------ state

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise InterfaceError("the client is closed")

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def _wait(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            if self._error is not None:
                raise self._error
            if self._task is None or self._task.done():
                raise InterfaceError("the client is not running (call start() first)")
            await self._changed.wait()

    def _register(self, source: int) -> None:
        if source in self._next_seq:
            return
        check_source(source)
        self._buffers[source] = Buffer(source)
        self._ship_locks[source] = asyncio.Lock()
        self._next_seq[source] = self._first_sequence.get(source)
        self._unacked[source] = deque()
        self._unacked_count[source] = 0
        self._acked[source] = 0
        self._paused[source] = False
        self._ended[source] = False
        if self._connected:
            self._enqueue(self._hello(source))

    def _hello(self, source: int) -> pb.SubmitRequest:
        """An empty batch: the server answers with the source's durable sequence."""
        return pb.SubmitRequest(batch=pb.FragmentBatch(source=source))

    def _enqueue(self, request: pb.SubmitRequest) -> None:
        self._outbox.append(request)
        self._writer_wake.set()

    def number_from(self, source: int, first_sequence: int) -> None:
        """Number ``source``'s fragments from ``first_sequence`` instead of continuing the
        server's sequence (call before its first fragment): a sender that replays its input
        from a known point (``evb forward``) numbers it the same way every time, and the server
        drops what it already holds."""
        self._first_sequence[source] = first_sequence
        self._register(source)

    def acked(self, source: int) -> int:
        """Fragments of ``source`` below this sequence number are durable on the server."""
        return self._acked.get(source, 0)

    def next_sequence(self, source: int) -> int | None:
        """Sequence number the next shipped fragment of ``source`` gets (None: not known yet)."""
        return self._next_seq.get(source)

    def paused(self, source: int) -> bool:
        return self._paused.get(source, False)

    def unacked(self, source: int | None = None) -> int:
        """Fragments shipped and not acknowledged yet (of one source, or all)."""
        if source is not None:
            return self._unacked_count.get(source, 0)
        return sum(self._unacked_count.values())

    @property
    def connected(self) -> bool:
        return self._connected

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
        self._spawn(self._ship(source))

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        async def guarded() -> None:
            with contextlib.suppress(EvbError):  # recorded in self._error, raised by the next call
                await coroutine

        task = asyncio.get_running_loop().create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _may_ship(self, source: int) -> bool:
        return (
            self._next_seq[source] is not None
            and not self._paused[source]
            and self._unacked_count[source] + self._batch_size <= self._max_unacked
        )

    async def _ship(self, source: int) -> None:
        """Number the source's buffered fragments and put them on the wire, in messages of at
        most ``batch_size`` fragments and ``max_batch_bytes`` of payload, each once the source
        may send (sequence known, not paused, not too much unacknowledged)."""
        async with self._ship_locks[source]:
            with self._lock:
                if not self._buffers[source].count:
                    return
            await self._wait(lambda: self._may_ship(source))
            with self._lock:
                batch = self._buffers[source].take()
            handle = self._lingering.pop(source, None)
            if handle is not None:
                handle.cancel()
            if batch is None:
                return
            start = 0
            while start < len(batch):
                stop = message_end(batch, start, self._batch_size, self._max_batch_bytes)
                whole = start == 0 and stop == len(batch)
                part = batch if whole else batch.slice(start, stop)
                await self._wait(lambda: self._may_ship(source))
                first = self._next_seq[source]
                assert first is not None
                request = pb.SubmitRequest(batch=convert.batch_to_pb(part, first))
                n = len(part)
                self._next_seq[source] = first + n
                self._unacked[source].append(Sent(first, n, request, self._order))
                self._order += 1
                self._unacked_count[source] += n
                self._ended[source] = False
                self._enqueue(request)
                start = stop

    async def flush(self, source: int | None = None) -> None:
        """Ship everything buffered now (of one source, or all)."""
        self._check()
        for s in [source] if source is not None else list(self._buffers):
            await self._ship(s)

    async def watermark(self, source: int, watermark: int) -> None:
        """``source`` promises nothing older than ``watermark`` will come (after what it sent)."""
        self._check()
        self._register(source)
        if not 0 <= watermark < 2**64:
            raise InterfaceError(f"watermark: {watermark} does not fit in uint64")
        await self._ship(source)
        self._watermarks[source] = max(watermark, self._watermarks.get(source, 0))
        self._enqueue(pb.SubmitRequest(watermark=pb.Watermark(source=source, watermark=watermark)))

    async def end_source(self, source: int) -> None:
        """``source`` says end of stream (a later fragment re-opens it)."""
        self._check()
        self._register(source)
        await self._ship(source)
        self._ended[source] = True
        self._enqueue(pb.SubmitRequest(end_of_source=pb.EndOfSource(source=source)))

    async def wait_acked(self, timeout: float | None = None) -> None:
        """Ship everything buffered and wait until every batch is durable on the server."""
        await self.flush()
        await asyncio.wait_for(self._wait(lambda: not any(self._unacked_count.values())), timeout)

    # ------------------------------------------------------------------ connection

    def _resend(self) -> list[pb.SubmitRequest]:
        """What a new stream starts with: a hello per source, every unacknowledged batch in the
        original order, then the latest watermark and the end of each source."""
        requests = [self._hello(source) for source in self._next_seq]
        pending = sorted((s for q in self._unacked.values() for s in q), key=lambda s: s.order)
        requests += [sent.request for sent in pending]
        requests += [
            pb.SubmitRequest(watermark=pb.Watermark(source=source, watermark=watermark))
            for source, watermark in self._watermarks.items()
        ]
        requests += [
            pb.SubmitRequest(end_of_source=pb.EndOfSource(source=source))
            for source, ended in self._ended.items()
            if ended
        ]
        return requests

    async def _run(self) -> None:
        assert self._channel is not None
        stub = pb_grpc.OrdererStub(self._channel)
        reconnects = Reconnects(self._backoff, self._reconnect_timeout)
        told: tuple[grpc.StatusCode, str | None] | None = None
        """The last status the server itself gave since the last reply (see _WRITE_RACE)."""
        while True:
            call = stub.Submit()
            code, details = await self._connection(call)
            if (code, details) != _WRITE_RACE:
                told = (code, details)
            elif told is not None:
                code, details = told
            if self._error is not None:
                self._notify()
                return
            if code == grpc.StatusCode.OK and self._closing:
                self._finished = True
                self._notify()
                return
            if code in FATAL_CODES:
                self._error = error_of(code, details, self.target, self._security)
                log.info("the orderer refused this client: %s", self._error)  # raised next call
                self._notify()
                return
            if self._had_reply:
                reconnects.answered()
                told = None
            delay = reconnects.next_delay()
            if delay is None:
                self._error = ServiceUnavailable(
                    f"no connection to the orderer at {self.target} for "
                    f"{self._reconnect_timeout} s ({code.name}: {details})"
                )
                self._notify()
                return
            log.info("Submit stream ended (%s: %s); reconnecting in %.2f s", code, details, delay)
            self.reconnects += 1
            await asyncio.sleep(delay)

    async def _connection(
        self, call: grpc.aio.StreamStreamCall
    ) -> tuple[grpc.StatusCode, str | None]:
        """One stream, until it ends; returns its status."""
        self._had_reply = False
        for source in self._paused:  # a new server says XOFF again if it still means it
            self._paused[source] = False
        self._notify()
        self._outbox = deque(self._resend())
        self._connected = True
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
            self._error = error
        finally:
            self._connected = False
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(BaseException):
                    await task
            if not call.done():
                call.cancel()
        return await call.code(), await call.details()

    async def _write(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            while self._outbox:
                await call.write(self._outbox[0])
                self._outbox.popleft()
            if self._closing:
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
                self._paused[reply.flow_control.source] = reply.flow_control.paused
                self._notify()

    def _on_ack(self, source: int, durable: int) -> None:
        if source not in self._next_seq:
            return
        known = self._next_seq[source]
        if known is None:
            self._next_seq[source] = durable  # a new client continues the source's sequence
        elif durable > known and not (
            source in self._first_sequence or source in self._warned
        ):
            # a sender numbering from a known point (resume, forward) expects this: no warning;
            # otherwise once per source
            self._warned.add(source)
            log.warning(
                "source %d: the server has sequence %d, beyond this client's %d; fragments "
                "numbered below it will be taken for resends and dropped",
                source,
                durable,
                known,
            )
        self._acked[source] = max(self._acked[source], durable)
        queue = self._unacked[source]
        while queue and queue[0].first + queue[0].count <= durable:
            self._unacked_count[source] -= queue.popleft().count
        self._notify()
