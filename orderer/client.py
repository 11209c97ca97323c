"""Client library of the orderer service: data sources in, ordered output out, control calls.

Why a library and not just the generated stubs: a data source must not lose or duplicate
fragments when the orderer restarts, and must not send one message per fragment (gRPC costs a
fixed ~200 us per message). :class:`AsyncSourceClient` (asyncio) and :class:`SourceClient`
(blocking, for readout loops) therefore

- batch fragments per source (``batch_size``, or after ``linger`` seconds, or on ``flush``);
- number them per source (the server deduplicates by ``(source, sequence)``);
- keep every batch until the server acknowledges it as durable, and resend all of them after a
  reconnect (exponential backoff with jitter), so a crash of the server loses nothing that was
  not acknowledged and duplicates nothing;
- honour flow control: while the server asks a source to pause, shipping its batches waits;
- bound memory: sending blocks once ``max_unacked`` fragments of a source await their ack.

A new client asks the server where each of its sources stands (an empty batch, answered with an
``Ack``), so a second ``evb send`` for the same source continues its sequence. Closing the client
waits until the server ended the stream OK, which it does only once everything sent on it
(watermarks and ends included) is durable.

Readers: :func:`subscribe` (asyncio) and :class:`OrderedStreamReader` (blocking) iterate the
ordered output from an offset and resume after reconnects. Control: :func:`get_stats`,
:func:`configure`, :func:`end_run` and their ``*_async`` twins.

The first connection is bounded: every entry point takes ``connect_timeout`` (seconds,
:data:`DEFAULT_CONNECT_TIMEOUT`; None waits as the call's other limits allow). gRPC itself
would retry an unreachable address forever (``wait_for_ready``) or fail with a bare
``UNAVAILABLE``; the client instead raises :class:`~orderer.errors.ServiceUnavailable` naming the
address and the cause in plain words (connection refused, name not resolved, TLS handshake
failed, timed out), gRPC's own detail kept at the end. A refused bearer token raises
:class:`~orderer.errors.AuthenticationError` naming the address. Only the first connection is
bounded so: a source or reader that loses an established one reconnects as before
(``reconnect_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.errors import AuthenticationError, EvbError, InterfaceError, ServiceUnavailable
from orderer.wire import convert
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity, aio_channel, sync_channel

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "AsyncSourceClient",
    "ChannelSecurity",
    "OrderedStreamReader",
    "SourceClient",
    "channel_options",
    "commit",
    "commit_async",
    "configure",
    "configure_async",
    "end_run",
    "end_run_async",
    "get_stats",
    "get_stats_async",
    "subscribe",
]

log = logging.getLogger("evb.client")

_T = TypeVar("_T")

FATAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)
"""Status codes a retry cannot cure; every other one means reconnect and resend."""


def channel_options(max_message_bytes: int = 64 << 20) -> list[tuple[str, int]]:
    """Channel settings: large messages (columnar batches), quick reconnects, keepalive."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
    ]


def _error_of(
    code: grpc.StatusCode,
    details: str | None,
    target: str,
    security: ChannelSecurity | None = None,
) -> EvbError:
    """A gRPC status as the one error hierarchy of evb, naming the orderer's address."""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InterfaceError(details or "invalid argument")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        if code == grpc.StatusCode.PERMISSION_DENIED:
            what = "refused this client"
        elif security is None or security.token is None:
            what = "requires a bearer token and this client sent none"
        else:
            what = "refused the token"
        return AuthenticationError(f"the orderer at {target} {what} ({code.name}: {details})")
    if code in FATAL_CODES:
        return EvbError(f"the orderer at {target}: {code.name}: {details}")
    return ServiceUnavailable(f"the orderer at {target}: {code.name}: {details}")


# ---------------------------------------------------------------------------------- connecting

_PROBE_METHOD = "/grpc.health.v1.Health/Check"
"""Asked once, without waiting for a connection, to read gRPC's reason for having none; open
without a token (:data:`orderer.wire.security.OPEN_METHODS`), and an empty request is valid."""

_PROBE_TIMEOUT = 1.0
"""Seconds the probe may take: a connection attempt still under way when the connect timeout
ran out (an address that does not answer at all) is then reported as timed out."""

_NOT_CONNECTED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

_SSL_REASON = re.compile(r"OPENSSL_internal:([A-Z0-9_]+)(?::\s*([^:]+))?")
_OS_REASON = re.compile(r"Failed to connect to remote host: ([^:;]+)")


def _check_connect_timeout(connect_timeout: float | None) -> None:
    if connect_timeout is not None and not connect_timeout > 0:
        raise InterfaceError(f"connect_timeout: {connect_timeout!r} must be > 0 seconds or None")


def _host(target: str) -> str:
    address = target.split("://", 1)[-1].lstrip("/")
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]") or target


def _cause(details: str, target: str, security: ChannelSecurity | None) -> str:
    """gRPC's reason for having no connection, in plain words."""
    text = details.lower()
    tls = security is not None and security.tls
    if "resolv" in text or "domain name not found" in text or "lookup" in text:
        return f"name not resolved ({_host(target)})"
    if "handshake failed" in text:
        match = _SSL_REASON.search(details)
        if match is None:
            return "TLS handshake failed"
        name, more = match.group(1), (match.group(2) or "").strip()
        if name == "WRONG_VERSION_NUMBER":
            return "TLS handshake failed (the server does not serve TLS)"
        reason = name.lower().replace("_", " ")
        if name == "CERTIFICATE_VERIFY_FAILED":
            reason += f": {more}" if more else ""
            reason += "; the server's certificate is not signed by the CA this client trusts"
        return f"TLS handshake failed ({reason})"
    if "failed parsing http/2" in text:
        return "the server does not speak gRPC (HTTP/2)"
    if "socket closed" in text or "connection reset" in text or "end of tcp stream" in text:
        if not tls:
            return "the server closed the connection (does it serve TLS? then connect with TLS)"
        if security is not None and security.certificate_chain is None:
            return (
                "TLS handshake failed (the server closed the connection; does it require a"
                " client certificate?)"
            )
        return "TLS handshake failed (the server closed the connection)"
    if "connection refused" in text:
        return "connection refused"
    match = _OS_REASON.search(details)
    if match is not None:
        return match.group(1).strip().lower()
    if "deadline" in text or "timed out" in text or "timeout" in text:
        return "timed out (no gRPC answer from this address)"
    return "no connection"


def _unreachable(
    target: str, connect_timeout: float, details: str, security: ChannelSecurity | None
) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"cannot reach {target} within {connect_timeout:g} s: "
        f"{_cause(details, target, security)} [gRPC: {details}]"
    )


def _connect_sync(
    channel: grpc.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """Wait until ``channel`` is connected, at most ``connect_timeout`` seconds; then raise
    ``ServiceUnavailable`` with gRPC's reason, read from one call that does not wait."""
    if connect_timeout is None:
        return
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=connect_timeout)
        return
    except grpc.FutureTimeoutError:
        ready.cancel()
    try:
        channel.unary_unary(_PROBE_METHOD)(b"", timeout=_PROBE_TIMEOUT)
    except grpc.RpcError as error:
        code, details = error.code(), error.details()  # type: ignore[attr-defined]
        if code in _NOT_CONNECTED:
            raise _unreachable(target, connect_timeout, details or code.name, security) from None
    # any other answer: it connected at the last moment


async def _connect_async(
    channel: grpc.aio.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """:func:`_connect_sync` for an asyncio channel."""
    if connect_timeout is None:
        return
    try:
        await asyncio.wait_for(channel.channel_ready(), connect_timeout)
        return
    except TimeoutError:
        pass
    try:
        await channel.unary_unary(_PROBE_METHOD)(b"", timeout=_PROBE_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        code, details = error.code(), error.details()
        if code in _NOT_CONNECTED:
            raise _unreachable(target, connect_timeout, details or code.name, security) from None


def _backoff(attempt: int, initial: float, ceiling: float) -> float:
    return min(ceiling, initial * 2.0 ** min(attempt, 30)) * random.uniform(0.5, 1.0)


# ---------------------------------------------------------------------------------- batching


class _Buffer:
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
class _Sent:
    """A batch on the wire, kept until acknowledged."""

    first: int
    count: int
    request: pb.SubmitRequest
    order: int  # global send order, so that a resend keeps the original interleaving


def _source_batch(
    source: int,
    timestamps: object,
    barriers: object | None,
    payloads: Iterable[bytes] | None,
) -> FragmentBatch:
    payload_list = list(payloads) if payloads is not None else None
    batch = FragmentBatch.from_arrays(
        source=source, timestamp=timestamps, barrier=barriers, payloads=payload_list
    )
    if len(batch.barrier) != len(batch):
        raise InterfaceError(f"barriers: {len(batch.barrier)} values for {len(batch)} fragments")
    if payload_list is not None and len(payload_list) != len(batch):
        raise InterfaceError(f"payloads: {len(payload_list)} values for {len(batch)} fragments")
    if len(batch) and int(batch.timestamp.max()) == convert.RESERVED_TIMESTAMP:
        raise InterfaceError("timestamps: 2**64-1 is reserved")
    return batch


def _single_source(batch: FragmentBatch) -> int:
    if not len(batch):
        raise InterfaceError("batch: no fragments")
    source = int(batch.source[0])
    if not (batch.source == batch.source[0]).all():
        raise InterfaceError("source: a client batch must hold one source")
    if len(batch.barrier) != len(batch) or len(batch.payload_offsets) != len(batch) + 1:
        raise InterfaceError("batch: arrays of different lengths")
    if int(batch.timestamp.max()) == convert.RESERVED_TIMESTAMP:
        raise InterfaceError("timestamps: 2**64-1 is reserved")
    return source


# ---------------------------------------------------------------------------------- sources


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
        _check_connect_timeout(connect_timeout)
        if max_unacked < batch_size:
            raise InterfaceError(f"max_unacked: {max_unacked} must be >= batch_size")
        self.target = target
        self._batch_size = batch_size
        self._linger = linger
        self._max_unacked = max_unacked
        self._first_sequence = dict(first_sequence or {})
        self._backoff = (backoff_initial, backoff_max)
        self._reconnect_timeout = reconnect_timeout
        self._connect_timeout = connect_timeout
        self._max_message_bytes = max_message_bytes
        self._max_batch_bytes = max_batch_bytes
        self._security = security
        self._lock = threading.Lock()  # guards the buffers: SourceClient fills them from its thread
        self._buffers: dict[int, _Buffer] = {}
        self._ship_locks: dict[int, asyncio.Lock] = {}
        self._next_seq: dict[int, int | None] = {}
        self._unacked: dict[int, deque[_Sent]] = {}
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
                await _connect_async(channel, self.target, self._connect_timeout, self._security)
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
        if isinstance(source, bool) or not isinstance(source, int) or not 0 <= source < 2**32:
            raise InterfaceError(f"source: {source!r} is not an integer in 0..2**32-1")
        self._buffers[source] = _Buffer(source)
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
        if not 0 <= timestamp < convert.RESERVED_TIMESTAMP:
            raise InterfaceError(f"timestamp: {timestamp} is outside 0..2**64-2")
        with self._lock:
            count = self._buffers[source].add_one(timestamp, barrier, payload)
        self._after_add(source, count)
        if count >= self._batch_size:
            await self._ship(source)

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
        batch = _source_batch(source, timestamps, barriers, payloads)
        with self._lock:
            count = self._buffers[source].add_batch(batch)
        self._after_add(source, count)
        if count >= self._batch_size:
            await self._ship(source)

    async def send_fragments(self, batch: FragmentBatch) -> None:
        """A :class:`~orderer.batch.FragmentBatch` of one source (e.g. from
        :func:`orderer.synthetic.iter_batches`), payloads included."""
        self._check()
        source = _single_source(batch)
        self._register(source)
        with self._lock:
            count = self._buffers[source].add_batch(batch)
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
                stop = self._message_end(batch, start)
                whole = start == 0 and stop == len(batch)
                part = batch if whole else batch.slice(start, stop)
                await self._wait(lambda: self._may_ship(source))
                first = self._next_seq[source]
                assert first is not None
                request = pb.SubmitRequest(batch=convert.batch_to_pb(part, first))
                n = len(part)
                self._next_seq[source] = first + n
                self._unacked[source].append(_Sent(first, n, request, self._order))
                self._order += 1
                self._unacked_count[source] += n
                self._ended[source] = False
                self._enqueue(request)
                start = stop

    def _message_end(self, batch: FragmentBatch, start: int) -> int:
        """End of the message that starts at ``start``: ``batch_size`` fragments at most, and
        ``max_batch_bytes`` of payload unless one fragment alone is larger."""
        stop = min(len(batch), start + self._batch_size)
        offsets = batch.payload_offsets
        if int(offsets[stop]) - int(offsets[start]) > self._max_batch_bytes:
            limit = offsets[start] + np.uint64(self._max_batch_bytes)
            fits = int(np.searchsorted(offsets[start : stop + 1], limit, "right")) - 1
            stop = start + max(1, fits)
        return stop

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
        attempt = 0
        down_since: float | None = None
        while True:
            call = stub.Submit()
            code, details = await self._connection(call)
            if code == grpc.StatusCode.OK and self._closing:
                self._finished = True
                self._notify()
                return
            if code in FATAL_CODES:
                self._error = _error_of(code, details, self.target, self._security)
                log.info("the orderer refused this client: %s", self._error)  # raised next call
                self._notify()
                return
            if self._had_reply:
                attempt, down_since = 0, None
            if down_since is None:
                down_since = time.monotonic()
            if (
                self._reconnect_timeout is not None
                and time.monotonic() - down_since > self._reconnect_timeout
            ):
                self._error = ServiceUnavailable(
                    f"no connection to the orderer at {self.target} for "
                    f"{self._reconnect_timeout} s ({code.name}: {details})"
                )
                self._notify()
                return
            delay = _backoff(attempt, *self._backoff)
            log.info("Submit stream ended (%s: %s); reconnecting in %.2f s", code, details, delay)
            attempt += 1
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
            if writer in done and not writer.cancelled() and writer.exception() is None:
                await reader
        except grpc.aio.AioRpcError:
            pass
        except Exception:
            log.exception("Submit stream failed")
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
        elif durable > known:
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


class SourceClient:
    """The blocking flavour of :class:`AsyncSourceClient`, for readout loops and scripts.

    It runs an asyncio loop in a background thread; ``send`` only appends to the source's buffer
    (no thread hop) until a batch is full. Use as a context manager or call :meth:`close`. The
    options are :class:`AsyncSourceClient`'s; like its ``start``, the constructor raises
    ``ServiceUnavailable`` when no connection is made within ``connect_timeout``.
    """

    def __init__(self, target: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="evb-source-client", daemon=True
        )
        self._thread.start()

        async def make() -> AsyncSourceClient:
            return await AsyncSourceClient(target, **options).start()

        try:
            self._client = self._call(make())
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coroutine: Awaitable[_T], timeout: float | None = None) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)  # type: ignore[arg-type]

    def _registered(self, source: int) -> None:
        if source not in self._client._next_seq:

            async def register() -> None:
                self._client._register(source)

            self._call(register())

    def send(self, source: int, timestamp: int, barrier: int = 0, payload: bytes = b"") -> None:
        client = self._client
        client._check()
        if not 0 <= timestamp < convert.RESERVED_TIMESTAMP:
            raise InterfaceError(f"timestamp: {timestamp} is outside 0..2**64-2")
        self._registered(source)
        with client._lock:
            count = client._buffers[source].add_one(timestamp, barrier, payload)
        self._added(source, count)

    def send_batch(
        self,
        source: int,
        timestamps: object,
        barriers: object | None = None,
        payloads: Iterable[bytes] | None = None,
    ) -> None:
        client = self._client
        client._check()
        self._registered(source)
        batch = _source_batch(source, timestamps, barriers, payloads)
        with client._lock:
            count = client._buffers[source].add_batch(batch)
        self._added(source, count)

    def send_fragments(self, batch: FragmentBatch) -> None:
        client = self._client
        client._check()
        source = _single_source(batch)
        self._registered(source)
        with client._lock:
            count = client._buffers[source].add_batch(batch)
        self._added(source, count)

    def _added(self, source: int, count: int) -> None:
        client = self._client
        if count >= client._batch_size:
            self._call(client._ship(source))
        elif source not in client._lingering:
            self._loop.call_soon_threadsafe(client._after_add, source, count)

    def watermark(self, source: int, watermark: int) -> None:
        self._call(self._client.watermark(source, watermark))

    def end_source(self, source: int) -> None:
        self._call(self._client.end_source(source))

    def flush(self, source: int | None = None) -> None:
        self._call(self._client.flush(source))

    def wait_acked(self, timeout: float | None = None) -> None:
        self._call(self._client.wait_acked(timeout))

    def check(self) -> None:
        """Raise the error that stopped the client, if any (e.g. the server refused the token):
        for loops that only wait on the client's state."""
        self._client._check()

    def acked(self, source: int) -> int:
        return self._client.acked(source)

    def next_sequence(self, source: int) -> int | None:
        return self._client.next_sequence(source)

    def paused(self, source: int) -> bool:
        return self._client.paused(source)

    def unacked(self, source: int | None = None) -> int:
        return self._client.unacked(source)

    @property
    def reconnects(self) -> int:
        return self._client.reconnects

    def close(self, timeout: float | None = None) -> None:
        """Ship, wait until everything is durable (at most ``timeout`` seconds, see
        :meth:`AsyncSourceClient.close`), disconnect."""
        if self._loop.is_closed():
            return
        try:
            self._call(self._client.close(timeout))
        finally:
            self._stop_loop()

    def abort(self) -> None:
        """Disconnect now; whatever was not acknowledged is lost with this client."""
        if self._loop.is_closed():
            return
        try:
            self._call(self._client.abort())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        if not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> SourceClient:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if error is None:
            self.close()
        else:
            self.abort()


# ---------------------------------------------------------------------------------- output


def _cut(batch: EmittedBatch, until: int | None) -> EmittedBatch:
    if until is None or batch.first_seq + len(batch) <= until:
        return batch
    return batch.slice(0, max(0, until - batch.first_seq))


async def subscribe(
    target: str,
    from_offset: int = 0,
    *,
    until: int | None = None,
    max_fragments: int = 0,
    reconnect_timeout: float | None = None,
    backoff: tuple[float, float] = (0.05, 2.0),
    security: ChannelSecurity | None = None,
    payload: bool = True,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> AsyncIterator[EmittedBatch]:
    """The ordered output from ``from_offset`` (up to ``until``, else forever), as batches with
    consecutive offsets; resumes where it stopped after a reconnect. ``payload=False`` leaves
    the payloads out. ``ServiceUnavailable`` when the first connection is not made within
    ``connect_timeout`` seconds, or a lost one not again within ``reconnect_timeout``."""
    _check_connect_timeout(connect_timeout)
    offset = from_offset
    attempt = 0
    down_since: float | None = None
    async with aio_channel(target, security, channel_options()) as channel:
        await _connect_async(channel, target, connect_timeout, security)
        stub = pb_grpc.OrdererStub(channel)
        while until is None or offset < until:
            call = stub.Subscribe(
                pb.SubscribeRequest(
                    from_offset=offset, max_fragments=max_fragments, omit_payload=not payload
                ),
                wait_for_ready=True,
            )
            try:
                async for message in call:
                    attempt, down_since = 0, None
                    batch = _cut(convert.emitted_from_pb(message), until)
                    offset += len(batch)
                    if len(batch):
                        yield batch
                    if until is not None and offset >= until:
                        call.cancel()
                        return
            except grpc.aio.AioRpcError as error:
                if error.code() in FATAL_CODES:
                    raise _error_of(error.code(), error.details(), target, security) from None
                down_since = down_since or time.monotonic()
                if reconnect_timeout is not None and (
                    time.monotonic() - down_since > reconnect_timeout
                ):
                    raise _error_of(error.code(), error.details(), target, security) from None
                await asyncio.sleep(_backoff(attempt, *backoff))
                attempt += 1


class OrderedStreamReader:
    """The ordered output from an offset, blocking: ``for batch in OrderedStreamReader(...)``.
    ``payload=False`` leaves the payloads out (a consumer planning its reads).

    ``offset`` is where the next batch starts; ``next_offset`` is the server's durable end as of
    the last batch. Resumes after reconnects; stops at ``until`` when given. Iterating raises
    ``ServiceUnavailable`` when the first connection is not made within ``connect_timeout``.
    """

    def __init__(
        self,
        target: str,
        from_offset: int = 0,
        *,
        until: int | None = None,
        max_fragments: int = 0,
        reconnect_timeout: float | None = None,
        backoff: tuple[float, float] = (0.05, 2.0),
        security: ChannelSecurity | None = None,
        payload: bool = True,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        _check_connect_timeout(connect_timeout)
        self.target = target
        self._connect_timeout = connect_timeout
        self._security = security
        self._payload = payload
        self.offset = from_offset
        self.next_offset = from_offset
        self.until = until
        self._max_fragments = max_fragments
        self._reconnect_timeout = reconnect_timeout
        self._backoff = backoff

    def __iter__(self) -> Iterator[EmittedBatch]:
        attempt = 0
        down_since: float | None = None
        with sync_channel(self.target, self._security, channel_options()) as channel:
            _connect_sync(channel, self.target, self._connect_timeout, self._security)
            stub = pb_grpc.OrdererStub(channel)
            while self.until is None or self.offset < self.until:
                request = pb.SubscribeRequest(
                    from_offset=self.offset,
                    max_fragments=self._max_fragments,
                    omit_payload=not self._payload,
                )
                call = stub.Subscribe(request, wait_for_ready=True)
                try:
                    for message in call:
                        attempt, down_since = 0, None
                        batch = _cut(convert.emitted_from_pb(message), self.until)
                        self.offset += len(batch)
                        self.next_offset = max(self.next_offset, message.next_offset)
                        if len(batch):
                            yield batch
                        if self.until is not None and self.offset >= self.until:
                            call.cancel()
                            return
                except grpc.RpcError as error:
                    code = error.code()  # type: ignore[attr-defined]
                    details = error.details()  # type: ignore[attr-defined]
                    if code in FATAL_CODES:
                        raise _error_of(code, details, self.target, self._security) from None
                    down_since = down_since or time.monotonic()
                    if self._reconnect_timeout is not None and (
                        time.monotonic() - down_since > self._reconnect_timeout
                    ):
                        raise _error_of(code, details, self.target, self._security) from None
                    time.sleep(_backoff(attempt, *self._backoff))
                    attempt += 1
                finally:
                    call.cancel()


# ---------------------------------------------------------------------------------- control


def _call_error(
    error: grpc.RpcError,
    target: str,
    method: str,
    timeout: float,
    security: ChannelSecurity | None,
) -> EvbError:
    code, details = error.code(), error.details()  # type: ignore[attr-defined]
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ServiceUnavailable(
            f"the orderer at {target} did not answer {method} within {timeout:g} s"
        )
    return _error_of(code, details, target, security)


def _unary_sync(
    target: str,
    method: str,
    request: Any,
    timeout: float,
    security: ChannelSecurity | None,
    connect_timeout: float | None,
) -> Any:
    _check_connect_timeout(connect_timeout)
    with sync_channel(target, security, channel_options()) as channel:
        _connect_sync(channel, target, connect_timeout, security)
        stub = pb_grpc.OrdererStub(channel)
        try:
            return getattr(stub, method)(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as error:
            raise _call_error(error, target, method, timeout, security) from None


async def _unary_async(
    target: str,
    method: str,
    request: Any,
    timeout: float,
    security: ChannelSecurity | None,
    connect_timeout: float | None,
) -> Any:
    _check_connect_timeout(connect_timeout)
    async with aio_channel(target, security, channel_options()) as channel:
        await _connect_async(channel, target, connect_timeout, security)
        stub = pb_grpc.OrdererStub(channel)
        try:
            return await getattr(stub, method)(request, timeout=timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as error:
            raise _call_error(error, target, method, timeout, security) from None


# Each call below: ``connect_timeout`` bounds the connection (``ServiceUnavailable`` naming the
# address and the cause), then ``timeout`` the call itself.


def get_stats(
    target: str,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> dict[str, Any]:
    """The counters (``evb replay --stats`` layout) and the live state of the service."""
    request = pb.GetStatsRequest()
    stats = _unary_sync(target, "GetStats", request, timeout, security, connect_timeout)
    return convert.stats_to_mapping(stats)


async def get_stats_async(
    target: str,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> dict[str, Any]:
    request = pb.GetStatsRequest()
    stats = await _unary_async(target, "GetStats", request, timeout, security, connect_timeout)
    return convert.stats_to_mapping(stats)


def configure(
    target: str,
    changes: Mapping[str, Any] | None = None,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    **more: Any,
) -> dict[str, Any]:
    """Change parameters live (``build_window=5``, ``sourceTimeout="off"``); returns the
    configuration now in force."""
    request = convert.configure_request({**(changes or {}), **more})
    reply = _unary_sync(target, "Configure", request, timeout, security, connect_timeout)
    return convert.config_to_mapping(reply)


async def configure_async(
    target: str,
    changes: Mapping[str, Any] | None = None,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    **more: Any,
) -> dict[str, Any]:
    request = convert.configure_request({**(changes or {}), **more})
    reply = await _unary_async(target, "Configure", request, timeout, security, connect_timeout)
    return convert.config_to_mapping(reply)


def end_run(
    target: str,
    *,
    timeout: float = 60.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> int:
    """End of run: drain every queue; returns the offset after the run's last fragment."""
    request = pb.EndRunRequest()
    reply = _unary_sync(target, "EndRun", request, timeout, security, connect_timeout)
    return int(reply.next_offset)


async def end_run_async(
    target: str,
    *,
    timeout: float = 60.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> int:
    request = pb.EndRunRequest()
    reply = await _unary_async(target, "EndRun", request, timeout, security, connect_timeout)
    return int(reply.next_offset)


def commit(
    target: str,
    consumer: str,
    offset: int,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> tuple[int, int]:
    """``consumer`` processed every offset below ``offset``: the orderer's retention keeps the
    rest for it. Returns (the consumer's committed offset now, the lowest over all consumers)."""
    request = pb.CommitRequest(consumer=consumer, offset=offset)
    reply = _unary_sync(target, "Commit", request, timeout, security, connect_timeout)
    return int(reply.offset), int(reply.lowest)


async def commit_async(
    target: str,
    consumer: str,
    offset: int,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> tuple[int, int]:
    request = pb.CommitRequest(consumer=consumer, offset=offset)
    reply = await _unary_async(target, "Commit", request, timeout, security, connect_timeout)
    return int(reply.offset), int(reply.lowest)
