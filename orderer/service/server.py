"""The gRPC orderer service: ``OrdererService`` (domain), ``OrdererServicer`` (edge), ``serve()``.

Why split this way (STYLE "For evb" 4, 6, 10): the servicer methods only convert between pb2
messages and API types (:mod:`orderer.wire.convert`) and translate errors into status codes,
once, here. Everything else lives in :class:`OrdererService`, a plain asyncio class that owns
the :class:`~orderer.api.Orderer`, the arrival log and the ordered log
(:mod:`orderer.service.storage`), the per-source sequence table that deduplicates resends, and
the one deadline timer.

How a batch travels: ``Submit`` checks and converts it, the service drops what it already has
(sequence numbers per source), takes the new part in at time ``now`` (strictly after every
earlier time, so that the arrival log replays to the same output), appends it to the arrival
log, appends what the orderer emitted to the ordered log, and owes the stream an ``Ack``. One
background task makes the logs durable (group commit: one fsync covers everything written before
it, in a worker thread) and then releases the acks and the new output to subscribers, which only
ever see durable output. Deadlines are served by one ``loop.call_later`` on
``Orderer.next_deadline()``, re-armed after every call: no polling.

Callers: ``evb serve`` (:func:`serve`), the end-to-end tests (:func:`start_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.api import Orderer
from orderer.batch import EmittedBatch
from orderer.clock import MonotonicClock
from orderer.config import OrdererConfig, snake_case
from orderer.errors import (
    ConfigError,
    EvbError,
    InterfaceError,
    InternalOrdererError,
    ServiceUnavailable,
)
from orderer.service import binding
from orderer.service.intake import Intake
from orderer.service.metrics import MetricsSnapshot, RateMeter, ServiceMetrics
from orderer.service.security import ServerSecurity
from orderer.service.storage import (
    ArrivalKind,
    ArrivalLog,
    ArrivalRows,
    ConsumerOffsets,
    FsyncPolicy,
    OrderedLog,
    Recovered,
    recover,
)
from orderer.wire import convert

__all__ = [
    "SERVICE_NAME",
    "OrdererService",
    "OrdererServicer",
    "RunningServer",
    "ServiceConfig",
    "configs_from_mapping",
    "serve",
    "start_server",
]

log = logging.getLogger("evb.service")

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Orderer"].full_name

MAX_UNWRITTEN = 1_000_000
"""Records taken in but not yet written (the disk behind the network). Past this the service
stops reading Submit streams until a write round catches up: HTTP/2 flow control then holds
the clients back, instead of the server's memory growing with the length of the run."""

LIVENESS_SERVICE = "liveness"
"""Health service name for liveness probes: NOT_SERVING only once the service failed. The
overall status ("") is for readiness: NOT_SERVING also while the log volume is full, which a
restart would not cure."""

STORAGE_RETRY = 1.0
"""Seconds between attempts to write to a log volume that refused a write (full, quota)."""

_RETRYABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _retryable(error: OSError) -> bool:
    """Errors that more space cures; anything else (EIO, a failed fsync) is not retried, since
    after it the kernel no longer says what reached the disk."""
    return error.errno in _RETRYABLE


@dataclass(frozen=True)
class ServiceConfig:
    """How the service runs (the orderer's own parameters are an ``OrdererConfig``)."""

    listen: str = "[::]:50051"
    """Address the gRPC server binds, ``host:port``; port 0 picks a free port."""
    data_dir: Path = Path("evb-data")
    """Directory of the arrival log and the ordered log; a restart on it resumes the run."""
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    """When logs are forced to disk: ``always``, ``batch`` (group commit before acks), ``never``."""
    metrics_port: int | None = None
    """Port of the Prometheus ``/metrics`` endpoint; None: no endpoint; 0: any free port."""
    metrics_address: str = "0.0.0.0"
    """Address the metrics endpoint binds."""
    max_payload_bytes: int = 1 << 20
    """Largest payload of one fragment; a larger one is refused (INVALID_ARGUMENT). At most
    :data:`~orderer.wire.convert.MAX_PAYLOAD_BYTES` (4 MiB less 116 bytes), so that a reply
    holding one such fragment still fits a reader with gRPC's default 4 MiB limit."""
    strict_sources: bool = False
    """Refuse fragments, watermarks and ends of sources not declared in ``sources``."""
    stop_grace: float = 10.0
    """Seconds calls get to finish on shutdown; keep it below terminationGracePeriodSeconds."""
    max_message_bytes: int = 64 << 20
    """Largest gRPC message received or sent."""
    subscribe_max_fragments: int = 65536
    """Most fragments per ``OrderedBatch``."""
    subscribe_max_bytes: int = convert.REPLY_MAX_BYTES
    """Most bytes of one encoded ``OrderedBatch``: payloads, per-fragment columns and framing
    (at least one fragment is always sent). The default, 3.5 MiB, leaves headroom under gRPC's
    default 4 MiB receive limit, so a reader with a plain generated stub can subscribe; above
    4 MiB only readers that raise their limit can."""
    segment_bytes: int = 64 << 20
    """Size at which a log segment file is closed and a new one started."""
    retention_bytes: int | None = None
    """Ordered-log retention: delete the oldest sealed segments while the log is larger.
    None keeps everything. Until consumers commit offsets (the Spark source), retention only
    spares the segment being written, so size it well above what a consumer lags."""
    retention_seconds: float | None = None
    """Ordered-log retention: delete sealed segments older than this; None keeps everything."""
    tls_cert: Path | None = None
    """PEM certificate chain of the server; with ``tls_key`` the service speaks TLS only
    (:mod:`orderer.service.security`)."""
    tls_key: Path | None = None
    """PEM private key of ``tls_cert``."""
    tls_client_ca: Path | None = None
    """PEM CA bundle: mutual TLS, every client must present a certificate it signed."""
    token: str | None = field(default=None, repr=False)
    """Bearer token every call but health checking must carry (needs TLS)."""
    token_file: Path | None = None
    """File holding the bearer token (a mounted Secret), instead of ``token``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        for name in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        try:
            object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        except ValueError:
            raise ConfigError("fsync", self.fsync, "must be always, batch or never") from None
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics_port", self.metrics_port, "must be a port number")
        for name in (
            "max_payload_bytes",
            "max_message_bytes",
            "subscribe_max_fragments",
            "subscribe_max_bytes",
            "segment_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, value, "must be a positive integer")
        if self.max_payload_bytes > convert.MAX_PAYLOAD_BYTES:
            raise ConfigError(
                "max_payload_bytes",
                self.max_payload_bytes,
                f"must be at most {convert.MAX_PAYLOAD_BYTES} (4 MiB less a reply's framing), so"
                " that a reply holding one such fragment fits gRPC's default 4 MiB limit of"
                " the readers",
            )
        if not math.isfinite(self.stop_grace) or self.stop_grace < 0:
            raise ConfigError("stop_grace", self.stop_grace, "must be >= 0 seconds")
        if self.retention_bytes is not None and (
            isinstance(self.retention_bytes, bool)
            or not isinstance(self.retention_bytes, int)
            or self.retention_bytes <= 0
        ):
            raise ConfigError("retention_bytes", self.retention_bytes, "must be a positive integer")
        if self.retention_seconds is not None and not (
            isinstance(self.retention_seconds, int | float) and self.retention_seconds > 0
        ):
            raise ConfigError("retention_seconds", self.retention_seconds, "must be > 0 seconds")



def configs_from_mapping(mapping: Mapping[str, Any]) -> tuple[OrdererConfig, ServiceConfig]:
    """Split a YAML/CR-style mapping (camelCase or snake_case keys) into the orderer's parameters
    and the service's settings; unknown keys are an error naming the key."""
    service_names = {f.name for f in fields(ServiceConfig)}
    service: dict[str, Any] = {}
    ordering: dict[str, Any] = {}
    for key, value in mapping.items():
        if snake_case(key) in service_names:
            service[snake_case(key)] = value
        else:
            ordering[key] = value
    return OrdererConfig.from_mapping(ordering), ServiceConfig(**service)


DATA_DIR_FLAG = "--data-dir"


def _lock_directory(directory: Path) -> int:
    """An exclusive ``flock`` on ``directory/LOCK``, held while the service runs (the kernel
    drops it when the process dies, so a killed server never leaves it behind). Two servers on
    one directory would both append to its logs: the second is refused."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise _unusable(directory, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            DATA_DIR_FLAG, str(directory), "is in use by another evb serve (its LOCK is held)"
        ) from None
    return fd


def _unusable(directory: Path, error: OSError) -> ConfigError:
    """A data directory that cannot hold the logs: a file, not writable, under a file."""
    if isinstance(error, FileExistsError | NotADirectoryError):
        existing = next(path for path in (directory, *directory.parents) if path.exists())
        why = "is not a directory" if existing == directory else (
            f"cannot be created: {existing} is not a directory"
        )
    else:
        why = f"cannot hold the logs: {error.strerror} ({error.filename})"
    return ConfigError(DATA_DIR_FLAG, str(directory), why)


# ---------------------------------------------------------------------------------- domain


ACK, FLOW = 0, 1
_END_OF_STREAM = -1  # an owed "everything this stream sent is durable" (no ack message)


class SubmitStream:
    """One ``Submit`` call as the service sees it: the sources it speaks for, the acks it is owed
    once the arrival log is durable, and the replies waiting to go out (bounded: one ack per
    source, flow signals only on transitions)."""

    __slots__ = ("_acks", "_flow", "_unsynced", "_wake", "error", "reading", "sources")

    def __init__(self) -> None:
        self.sources: set[int] = set()
        self.reading = True
        self.error: BaseException | None = None
        self._unsynced: deque[tuple[int, int, int]] = deque()  # (generation, source, sequence)
        self._acks: dict[int, int] = {}
        self._flow: dict[int, bool] = {}  # latest pause state per source not sent yet
        self._wake = asyncio.Event()

    def owe_ack(self, generation: int, source: int, sequence: int) -> None:
        self._unsynced.append((generation, source, sequence))

    def release(self, synced_generation: int) -> None:
        """Everything written up to ``synced_generation`` is durable: its acks may go out."""
        released = False
        while self._unsynced and self._unsynced[0][0] <= synced_generation:
            _, source, sequence = self._unsynced.popleft()
            if source != _END_OF_STREAM:
                self._acks[source] = max(sequence, self._acks.get(source, 0))
            released = True
        if released:
            self._wake.set()

    def signal(self, source: int, paused: bool) -> None:
        self._flow.pop(source, None)  # keeps the latest, at the end
        self._flow[source] = paused
        self._wake.set()

    def finish(self, error: BaseException | None = None) -> None:
        """No more input on this stream (the client closed it, it sent bad input, or the service
        is shutting down); owed acks still go out once durable."""
        self.reading = False
        if error is not None and self.error is None:
            self.error = error
        self._wake.set()

    def abandon(self) -> None:
        """The storage failed: owed acks will never be durable."""
        self._unsynced.clear()
        self.finish(ServiceUnavailable("the orderer's storage failed; reconnect later"))

    async def replies(self) -> AsyncIterator[tuple[int, int, Any]]:
        """``(ACK, source, durable_sequence)`` and ``(FLOW, source, paused)`` until the stream is
        finished and owes nothing."""
        while True:
            if self._flow:
                source = next(iter(self._flow))
                yield FLOW, source, self._flow.pop(source)
            elif self._acks:
                source, sequence = self._acks.popitem()
                yield ACK, source, sequence
            elif not self.reading and not self._unsynced:
                return
            else:
                self._wake.clear()
                await self._wake.wait()


class OrdererService:
    """The orderer as a service: input, durability, output, deadlines. All methods run on one
    asyncio loop; only the fsyncs leave it (worker thread)."""

    def __init__(
        self,
        *,
        recovered: Recovered,
        arrivals: ArrivalLog,
        ordered: OrderedLog,
        limits: convert.BatchLimits | None = None,
        subscribe_max_fragments: int = 65536,
        subscribe_max_bytes: int = convert.REPLY_MAX_BYTES,
        lock: int | None = None,
        retention_bytes: int | None = None,
        retention_seconds: float | None = None,
        consumers: ConsumerOffsets | None = None,
    ) -> None:
        self.limits = limits if limits is not None else convert.BatchLimits()
        self._consumers = consumers
        self._lock = lock
        self._retention_bytes = retention_bytes
        self._retention_seconds = retention_seconds
        self._next_retention = 0.0
        self._sealed_seen = 0
        self._orderer: Orderer = recovered.orderer
        self._arrivals = arrivals
        self._ordered = ordered
        self._clock = MonotonicClock(start=recovered.resume_time)
        self._last_time = recovered.resume_time
        self._next_sequence = dict(recovered.next_sequence)
        self._run_ended = recovered.run_ended
        self._subscribe_max_fragments = subscribe_max_fragments
        self._subscribe_max_bytes = subscribe_max_bytes
        self._streams: set[SubmitStream] = set()
        self._paused: dict[int, bool] = {}
        self._subscribers = 0
        self._written_generation = 0
        self._synced_generation = 0
        self._written_offset = ordered.next_offset
        self._durable_offset = ordered.next_offset
        self._durable_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._sync_task: asyncio.Task[None] | None = None
        self._output_changed = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._closed = False
        self.failed: BaseException | None = None
        """A storage error the service cannot get over: it takes no more input (exit, restart)."""
        self.failure = asyncio.Event()
        self.degraded: OSError | None = None
        """The log volume refuses writes (full): input is refused until a retry succeeds."""
        self.health_changed = asyncio.Event()
        self._unwritten_arrivals: deque[tuple[float, ArrivalRows]] = deque()
        self._unwritten_output: deque[EmittedBatch] = deque()
        self._unwritten_records = 0
        self._writes_caught_up = asyncio.Event()
        self._writes_caught_up.set()
        self.max_unwritten = MAX_UNWRITTEN
        self._ingest = RateMeter()
        self._intake = Intake()
        self._intake_scheduled = False
        for flow in self._orderer.take_flow_signals():
            self._paused[flow.source] = flow.paused
        self._orderer.take_barrier_log()
        self._rearm()

    @classmethod
    def open(cls, config: OrdererConfig, service: ServiceConfig) -> OrdererService:
        """Open (or create) the logs in ``service.data_dir`` and recover the run they hold.
        The directory is locked: a second server on it (two pods on one volume) is refused."""
        lock = _lock_directory(service.data_dir)
        arrivals: ArrivalLog | None = None
        ordered: OrderedLog | None = None
        try:
            try:
                arrivals = ArrivalLog.open(
                    service.data_dir / "arrivals",
                    fsync=service.fsync,
                    segment_bytes=service.segment_bytes,
                )
                ordered = OrderedLog.open(
                    service.data_dir / "ordered",
                    fsync=service.fsync,
                    segment_bytes=service.segment_bytes,
                )
            except OSError as error:  # a path in the way, no permission, no space
                raise _unusable(service.data_dir, error) from None
            recovered = recover(config, arrivals, ordered)
        except BaseException:
            for opened in (arrivals, ordered):
                if opened is not None:
                    opened.close()
            os.close(lock)
            raise
        log.info(
            "recovered %d arrivals, %d ordered fragments, time %.6f",
            arrivals.records,
            ordered.next_offset,
            recovered.resume_time,
        )
        return cls(
            recovered=recovered,
            arrivals=arrivals,
            ordered=ordered,
            lock=lock,
            limits=convert.BatchLimits(
                max_payload_bytes=service.max_payload_bytes,
                sources=frozenset(config.sources) if service.strict_sources else None,
            ),
            subscribe_max_fragments=service.subscribe_max_fragments,
            subscribe_max_bytes=service.subscribe_max_bytes,
            retention_bytes=service.retention_bytes,
            retention_seconds=service.retention_seconds,
            consumers=ConsumerOffsets(service.data_dir / "consumers.json"),
        )

    # ------------------------------------------------------------------ properties

    @property
    def orderer(self) -> Orderer:
        return self._orderer

    @property
    def arrivals(self) -> ArrivalLog:
        return self._arrivals

    @property
    def ordered(self) -> OrderedLog:
        return self._ordered

    @property
    def durable_offset(self) -> int:
        """Offset of the next ordered fragment that is not durable yet; subscribers see below."""
        return self._durable_offset

    # ------------------------------------------------------------------ time

    def _tick(self, at_least: float = -math.inf) -> float:
        """The time of the next input or flush: the clock, but strictly after every time used
        before (a record at a flush's time would replay before that flush, not after)."""
        now = max(self._clock.now(), math.nextafter(self._last_time, math.inf), at_least)
        self._last_time = now
        return now

    def _peek(self) -> float:
        return max(self._clock.now(), self._last_time)

    def _rearm(self) -> None:
        """One timer, on the orderer's next deadline."""
        deadline = None if self._closed or self.failed else self._orderer.next_deadline()
        if deadline is not None and deadline == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, deadline - self._clock.now()), self._on_deadline)
        self._timer_at = deadline

    def _on_deadline(self) -> None:
        deadline = self._timer_at if self._timer_at is not None else -math.inf
        self._timer = self._timer_at = None
        if self._closed or self.failed:
            return
        self.take_intake()
        try:
            self._orderer.advance(self._tick(at_least=deadline))
            self._after_call()
        except Exception as error:
            self._fail(error)

    # ------------------------------------------------------------------ input

    def _check_open(self) -> None:
        if self.failed is not None or self.degraded is not None or self._closed:
            raise self._unavailable()

    def open_stream(self) -> SubmitStream:
        stream = SubmitStream()
        self._streams.add(stream)
        if self._closed or self.failed or self.degraded:
            stream.finish(self._unavailable())
        return stream

    def finish_stream(self, stream: SubmitStream) -> None:
        """The client closed its side: the call ends OK once everything it sent is durable, so
        a client knows its watermarks and ends (which get no ack) are safe too."""
        self.take_intake()
        stream.owe_ack(self._written_generation, _END_OF_STREAM, 0)
        stream.finish()
        stream.release(self._synced_generation)

    def close_stream(self, stream: SubmitStream) -> None:
        self._streams.discard(stream)

    async def room_for_input(self) -> None:
        """Returns at once unless the writes are ``max_unwritten`` records behind; then when a
        write round has caught up (or the service stops taking input)."""
        if not self._writes_caught_up.is_set():
            await self._writes_caught_up.wait()

    def _speaks_for(self, stream: SubmitStream, source: int) -> None:
        if source not in stream.sources:
            stream.sources.add(source)
            if self._paused.get(source):
                stream.signal(source, True)

    def submit(self, stream: SubmitStream, incoming: convert.IncomingBatch) -> None:
        """A checked batch from ``stream``: deduplicated, then into the intake, ack owed."""
        self._check_open()
        batch = incoming.batch
        n = len(batch)
        if incoming.source is None or incoming.first_sequence is None:
            for source in np.unique(batch.source).tolist():
                self._speaks_for(stream, source)
            self._intake.add_batch(batch, None)
            self._intake_soon()
            return
        source, first = incoming.source, incoming.first_sequence
        self._speaks_for(stream, source)
        expected = self._next_sequence.get(source, 0)
        if n and first > expected:
            raise InterfaceError(
                f"first_sequence: {first} leaves a gap; source {source} continues at {expected}",
                hint="resend from the last acknowledged sequence",
            )
        if n and first + n > expected:  # something new
            new = batch if first == expected else batch.slice(expected - first)
            self._intake.add_batch(new, expected)
            self._next_sequence[source] = first + n
        self._intake.owe_ack(stream, source, self._next_sequence.get(source, 0))
        self._intake_soon()

    def watermark(self, stream: SubmitStream, source: int, watermark: int) -> None:
        self._check_open()
        self._speaks_for(stream, source)
        self._intake.add_watermark(source, watermark)
        self._intake_soon()

    def end_source(self, stream: SubmitStream, source: int) -> None:
        self._check_open()
        self._speaks_for(stream, source)
        self._intake.add_end_of_source(source)
        self._intake_soon()

    def _intake_soon(self) -> None:
        """Take the intake in once the loop has read what is ready now (see intake.py)."""
        if not self._intake_scheduled:
            self._intake_scheduled = True
            asyncio.get_running_loop().call_soon(self.take_intake)

    def take_intake(self) -> None:
        """One intake pass: everything waiting goes in at one arrival time, is staged for the
        arrival log as one record batch, and its acks are owed to the generation that stages
        it. Every other input (configure, end of run, a deadline, a stream's end) takes the
        intake first, so the orderer sees input in arrival order."""
        self._intake_scheduled = False
        if not self._intake or self.failed is not None:
            return
        taken = self._intake.take()
        now = self._tick()
        if taken.batches or taken.markers:
            # convert checked every batch as the core does: the core cannot refuse one here
            taken.run(self._orderer, now)
            rows = taken.arrival_rows()
            self._unwritten_arrivals.append((now, rows))
            self._unwritten_records += len(rows)
            if self._unwritten_records >= self.max_unwritten:
                self._writes_caught_up.clear()
        if taken.fragments:
            self._ingest.add(now, taken.fragments)
            self._run_ended = False
        self._after_call()
        for stream, source, sequence in taken.acks:
            stream.owe_ack(self._written_generation, source, sequence)
            stream.release(self._synced_generation)

    async def configure(self, changes: Mapping[str, Any]) -> OrdererConfig:
        """A live change of parameters (checked first: ``ConfigError`` names the parameter),
        recorded in the arrival log; returns once durable."""
        self._check_open()
        new = self._orderer.config.with_changes(**changes)
        self.take_intake()
        now = self._tick()
        self._orderer.configure(new, now=now)
        self._unwritten_arrivals.append((now, ArrivalRows.configure(changes)))
        self._after_call()
        await self._durable(self._written_generation)
        log.info("configured %s", dict(changes))
        return new

    async def end_run(self) -> int:
        """The spec's end of run: drain every queue now; returns the offset after the run's last
        fragment once everything is durable."""
        self._check_open()
        self.take_intake()
        now = self._tick()
        self._orderer.end_run(now=now)
        self._unwritten_arrivals.append((now, ArrivalRows.marker(ArrivalKind.END_RUN)))
        self._run_ended = True
        self._after_call()
        await self._durable(self._written_generation)
        return self._durable_offset

    def _after_call(self) -> None:
        """After every orderer call: note what it emitted (the output stays in the core until
        the next write round takes it all at once), relay flow control, re-arm the timer, and
        have the new state written and made durable."""
        self._written_offset = self._orderer.emitted_seq
        self._orderer.take_barrier_log()  # the counters keep the totals; don't let it grow
        self._written_generation += 1
        for flow in self._orderer.take_flow_signals():
            self._paused[flow.source] = flow.paused
            for stream in self._streams:
                if flow.source in stream.sources:
                    stream.signal(flow.source, flow.paused)
        self._rearm()
        if self._sync_task is None and self.failed is None:
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    # ------------------------------------------------------------------ durability

    def _stage_output(self) -> None:
        """Take the output the core holds for the ordered log: once per write round, one copy
        of everything emitted since the last, instead of a copy per intake pass and another to
        join them."""
        emitted = self._orderer.take_emitted()
        if len(emitted):
            self._unwritten_output.append(emitted)

    def _write_out(self) -> None:
        """Write what is staged, in order, then force both logs to disk (worker thread).

        An entry leaves its queue only once written, and a failed append leaves its log as it
        was (storage.py cuts what it half wrote), so after an error such as a full volume the
        next round simply tries again from the same entry."""
        arrivals, output = self._unwritten_arrivals, self._unwritten_output
        while arrivals:
            t, rows = arrivals[0]
            self._arrivals.append_rows(t, rows)
            arrivals.popleft()
        while output:
            self._ordered.append(output[0])  # after a failed try: appends only what it lacks
            output.popleft()
        try:
            self._arrivals.sync()
            self._ordered.sync()
        except OSError as error:  # never retried: after a failed fsync nothing is known
            raise InternalOrdererError(f"fsync of a log failed: {error}") from error

    async def _sync_loop(self) -> None:
        """Group commit: each round writes everything staged before it and makes it durable
        with one fsync per log, then releases acks, waiters and output. A write the volume
        refuses (full, quota) degrades the service: input is refused, acks stop, and the round
        is retried every ``STORAGE_RETRY`` seconds until it succeeds; any other storage error is
        fatal (the process exits and the restarted one recovers from the logs)."""
        try:
            while self._synced_generation < self._written_generation and not self.failed:
                generation, offset = self._written_generation, self._written_offset
                self._stage_output()
                try:
                    await asyncio.to_thread(self._write_out)
                except OSError as error:
                    if not _retryable(error):
                        raise
                    self._degrade(error)
                    if self._closed:
                        log.error(
                            "stopping with the log volume full: what is not written was never"
                            " acknowledged, and its senders resend it to the next server"
                        )
                        return
                    await asyncio.sleep(STORAGE_RETRY)
                    continue
                if self.degraded is not None:
                    self._recovered_from(self.degraded)
                self._unwritten_records = sum(len(rows) for _, rows in self._unwritten_arrivals)
                if self._unwritten_records < self.max_unwritten:
                    self._writes_caught_up.set()
                self._synced_generation = generation
                if offset > self._durable_offset:
                    self._durable_offset = offset
                    self._notify_output()
                for stream in self._streams:
                    stream.release(generation)
                self._apply_retention()
                still = []
                for wanted, future in self._durable_waiters:
                    if wanted <= generation:
                        if not future.done():
                            future.set_result(None)
                    else:
                        still.append((wanted, future))
                self._durable_waiters = still
        except Exception as error:
            self._fail(error)
        finally:
            self._sync_task = None

    def _degrade(self, error: OSError) -> None:
        """The log volume refused a write: stop taking input until it takes writes again. Open
        streams end UNAVAILABLE (clients back off and resend what was not acknowledged; what
        the service already holds is deduplicated, then acknowledged once written)."""
        if self.degraded is None:
            log.error(
                "the log volume of %s refuses writes (%s): input refused, retrying",
                self._arrivals.directory.parent,
                error,
            )
            self.health_changed.set()
        self.degraded = error
        self._writes_caught_up.set()  # readers wake up to find their streams finished
        for stream in self._streams:
            stream.finish(self._unavailable())

    def _recovered_from(self, error: OSError) -> None:
        log.warning("the log volume takes writes again (after %s): input accepted", error)
        self.degraded = None
        self.health_changed.set()

    def _unavailable(self) -> ServiceUnavailable:
        if self.failed is not None:
            return ServiceUnavailable(f"the orderer's storage failed ({self.failed}); retry later")
        if self.degraded is not None:
            return ServiceUnavailable(
                f"the log volume of {self._arrivals.directory.parent} refuses writes"
                f" ({self.degraded}); nothing more is acknowledged"
                " until it has space again; retry later"
            )
        return ServiceUnavailable("the orderer is shutting down; reconnect and resend")

    def _apply_retention(self) -> None:
        """Drop old sealed segments of the ordered log (size, age): when a segment was sealed,
        and at most once a second otherwise (age)."""
        if self._retention_bytes is None and self._retention_seconds is None:
            return
        now = time.monotonic()
        sealed = self._ordered.sealed_segments
        if now < self._next_retention and sealed == self._sealed_seen:
            return
        self._next_retention = now + 1.0
        self._sealed_seen = sealed
        keep_from = self._durable_offset
        lowest = self._consumers.lowest() if self._consumers is not None else None
        if lowest is not None:  # output a known consumer has not committed stays
            keep_from = min(keep_from, lowest)
        deleted = self._ordered.apply_retention(
            keep_from_offset=keep_from,
            max_bytes=self._retention_bytes,
            max_age_seconds=self._retention_seconds,
        )
        for path in deleted:
            log.info("retention removed %s", path.name)

    async def _durable(self, generation: int) -> None:
        if self._synced_generation >= generation:
            return
        self._check_open()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._durable_waiters.append((generation, future))
        await future

    def _fail(self, error: BaseException) -> None:
        """The storage failed for good: stop taking input (what was acked is safe; the rest
        will be resent to a restarted service)."""
        if self.failed is not None:
            return
        log.error("storage failed, no more input is taken: %r", error)
        self.failed = error
        self.failure.set()
        self._writes_caught_up.set()
        self.health_changed.set()
        self._rearm()
        for stream in self._streams:
            stream.abandon()
        for _, future in self._durable_waiters:
            if not future.done():
                future.set_exception(ServiceUnavailable(f"the orderer's storage failed: {error}"))
        self._durable_waiters = []
        self._notify_output()

    # ------------------------------------------------------------------ output

    def _notify_output(self) -> None:
        event, self._output_changed = self._output_changed, asyncio.Event()
        event.set()

    async def subscribe(
        self, from_offset: int, max_fragments: int = 0, *, payload: bool = True
    ) -> AsyncIterator[tuple[EmittedBatch, int]]:
        """``(batch, durable offset)`` from ``from_offset``: what is in the log, then live. Reads
        the log on demand, so a slow subscriber costs one batch of memory. Each batch encodes
        (with its payloads, or without when ``payload`` is false) to at most
        ``subscribe_max_bytes``."""
        limit = self._subscribe_max_fragments
        if max_fragments:
            limit = min(limit, max_fragments)
        offset = from_offset
        self._subscribers += 1
        try:
            while True:
                if self._closed:
                    raise ServiceUnavailable("the orderer is shutting down; resubscribe")
                durable = self._durable_offset
                if offset < durable:
                    batch = self._ordered.read(offset, min(limit, durable - offset))
                    if not len(batch):
                        raise ServiceUnavailable(f"offset {offset} is not readable yet")
                    # A read is a view into a whole record batch (up to 65,536 fragments with
                    # their payloads); a subscriber that stops reading holds its reply while it
                    # waits for flow control, and must pin only that reply
                    # (tests/e2e/test_stalled_subscriber.py).
                    batch = self._cut_bytes(batch, payload).copy()
                    offset += len(batch)
                    yield batch, durable
                else:
                    if self.failed is not None:
                        raise ServiceUnavailable("the orderer's storage failed")
                    await self._output_changed.wait()
        finally:
            self._subscribers -= 1

    def _cut_bytes(self, batch: EmittedBatch, payload: bool) -> EmittedBatch:
        """The longest head of ``batch`` whose reply encodes to at most ``subscribe_max_bytes``
        (at least one fragment), whatever the payload sizes. Why the encoded size and not the
        payload alone: the per-fragment columns add 25-33 bytes a fragment, and a reply of
        4 MiB of payload plus those went past the 4 MiB a default gRPC reader accepts."""
        n = len(batch)
        sizes = np.zeros(n + 1, np.int64)  # payload bytes of the first k fragments
        if payload:
            sizes = batch.payload_offsets.astype(np.int64) - np.int64(batch.payload_offsets[0])
        if convert.ordered_batch_bytes(n, int(sizes[-1]), payload=payload) <= (
            self._subscribe_max_bytes
        ):
            return batch
        # reply size of the first k fragments, for k = 0..n (increasing in k)
        bound = convert.ordered_batch_bytes(0, 0, payload=payload)
        per_fragment = convert.ordered_batch_bytes(1, 0, payload=payload) - bound
        sizes = sizes + per_fragment * np.arange(n + 1, dtype=np.int64) + bound
        fits = int(np.searchsorted(sizes, self._subscribe_max_bytes, "right")) - 1
        return batch.slice(0, max(fits, 1))

    def commit(self, consumer: str, offset: int) -> tuple[int, int]:
        """A consumer processed every offset below ``offset``: ``(its offset now, lowest over
        every consumer)``. Retention keeps everything from the lowest; an offset beyond the
        durable output is refused (the consumer cannot have processed it)."""
        if self._consumers is None:
            raise ServiceUnavailable("this orderer keeps no consumer offsets")
        if offset > self._durable_offset:
            raise InterfaceError(
                f"offset: {offset} is beyond the durable output (next offset "
                f"{self._durable_offset})"
            )
        now = self._consumers.commit(consumer, offset)
        lowest = self._consumers.lowest()
        return now, now if lowest is None else lowest

    # ------------------------------------------------------------------ inspection

    def stats(self) -> pb.Stats:
        now = self._peek()
        return convert.stats_to_pb(
            counters=self._orderer.counters(),
            states=self._orderer.source_states(now=now),
            next_offset=self._durable_offset,
            high_water_mark=self._orderer.high_water_mark,
            queued=self._orderer.queued,
            now=now,
            # ended only once the run's last output is durable: a consumer that sees run_ended
            # and next_offset has the whole run (the Spark source closes its last event there)
            run_ended=self._run_ended and self._durable_offset == self._written_offset,
            config=self._orderer.config,
        )

    def metrics_snapshot(self) -> MetricsSnapshot:
        now = self._peek()
        return MetricsSnapshot(
            counters=self._orderer.counters(),
            states=self._orderer.source_states(now=now),
            output_offset=self._durable_offset,
            high_water_mark=self._orderer.high_water_mark,
            ingest_rate=self._ingest.rate(now),
            submit_streams=len(self._streams),
            subscribers=self._subscribers,
        )

    def next_sequence(self, source: int) -> int:
        return self._next_sequence.get(source, 0)

    # ------------------------------------------------------------------ shutdown

    def begin_shutdown(self) -> None:
        """Stop taking input: Submit streams finish (their owed acks still go out once durable,
        then they end UNAVAILABLE so clients reconnect elsewhere or later); subscribers end."""
        if not self._closed:
            self.take_intake()
        self._closed = True
        self._writes_caught_up.set()
        for stream in self._streams:
            stream.finish(ServiceUnavailable("the orderer is shutting down; reconnect and resend"))
        self._rearm()
        self._notify_output()

    async def close(self) -> None:
        """Make everything durable and close the logs."""
        self.begin_shutdown()
        while self._sync_task is not None:
            await asyncio.shield(self._sync_task)
        try:
            if self.failed is None and self.degraded is None:
                self._stage_output()
                await asyncio.to_thread(self._write_out)
            self._arrivals.close()
            self._ordered.close()
        except Exception:
            log.exception("closing the logs failed; the next start recovers from what is on disk")
        finally:
            if self._lock is not None:
                os.close(self._lock)  # releases the directory lock
                self._lock = None


# ---------------------------------------------------------------------------------- gRPC edge


def _status(error: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(error, InterfaceError | ConfigError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error)
    if isinstance(error, ServiceUnavailable):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    return grpc.StatusCode.INTERNAL, f"internal error: {error!r}"


class OrdererServicer(pb_grpc.OrdererServicer):
    """The gRPC edge: converts messages, calls :class:`OrdererService`, maps errors to codes."""

    def __init__(self, service: OrdererService) -> None:
        self._service = service

    async def _read_submissions(
        self, requests: AsyncIterator[pb.SubmitRequest], stream: SubmitStream
    ) -> None:
        service = self._service
        try:
            async for request in requests:
                await service.room_for_input()
                if not stream.reading:
                    return
                item = request.WhichOneof("item")
                if item == "batch":
                    service.submit(stream, convert.batch_from_pb(request.batch, service.limits))
                elif item == "watermark":
                    source, watermark = convert.watermark_from_pb(request.watermark, service.limits)
                    service.watermark(stream, source, watermark)
                elif item == "end_of_source":
                    source = convert.end_of_source_from_pb(request.end_of_source, service.limits)
                    service.end_source(stream, source)
                else:
                    raise InterfaceError("item: an empty SubmitRequest")
            service.finish_stream(stream)
        except asyncio.CancelledError:
            stream.finish()
            raise
        except EvbError as error:
            log.warning("Submit stream refused: %s", error)
            stream.finish(error)
        except Exception as error:
            log.exception("Submit stream failed")
            stream.finish(error)

    async def Submit(
        self,
        request_iterator: AsyncIterator[pb.SubmitRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.SubmitReply]:
        stream = self._service.open_stream()
        reader = asyncio.create_task(self._read_submissions(request_iterator, stream))
        try:
            async for kind, source, value in stream.replies():
                if kind == ACK:
                    yield pb.SubmitReply(ack=pb.Ack(source=source, durable_sequence=value))
                else:
                    yield pb.SubmitReply(flow_control=pb.FlowControl(source=source, paused=value))
        finally:
            reader.cancel()
            self._service.close_stream(stream)
        if stream.error is not None:
            code, details = _status(stream.error)
            await context.abort(code, details)

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.OrderedBatch]:
        service = self._service
        try:
            async for batch, durable in service.subscribe(
                request.from_offset, request.max_fragments, payload=not request.omit_payload
            ):
                yield convert.emitted_to_pb(
                    batch,
                    next_offset=durable,
                    high_water_mark=service.orderer.high_water_mark,
                    payload=not request.omit_payload,
                )
        except EvbError as error:
            code, details = _status(error)
            await context.abort(code, details)

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.Stats:
        return self._service.stats()

    async def Configure(
        self, request: pb.ConfigureRequest, context: grpc.aio.ServicerContext
    ) -> pb.OrdererConfig:
        try:
            config = await self._service.configure(convert.configure_changes_from_pb(request))
        except EvbError as error:
            code, details = _status(error)
            await context.abort(code, details)
        return convert.config_to_pb(config)

    async def Commit(
        self, request: pb.CommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitReply:
        try:
            offset, lowest = self._service.commit(request.consumer, request.offset)
        except EvbError as error:
            code, details = _status(error)
            await context.abort(code, details)
        return pb.CommitReply(offset=offset, lowest=lowest)

    async def EndRun(
        self, request: pb.EndRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndRunReply:
        try:
            next_offset = await self._service.end_run()
        except EvbError as error:
            code, details = _status(error)
            await context.abort(code, details)
        return pb.EndRunReply(next_offset=next_offset)


# ---------------------------------------------------------------------------------- serving


@dataclass
class RunningServer:
    """A started server: its port, the service behind it, and how to stop it."""

    server: grpc.aio.Server
    service: OrdererService
    health: health.aio.HealthServicer
    port: int
    metrics: ServiceMetrics
    metrics_port: int | None
    stop_grace: float
    _watcher: asyncio.Task[None] | None = field(default=None, repr=False)

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop: health NOT_SERVING, streams told to finish, in-flight calls get
        ``grace`` seconds, then the logs are made durable and closed."""
        await self.health.enter_graceful_shutdown()
        self.service.begin_shutdown()
        await self.server.stop(self.stop_grace if grace is None else grace)
        await self.service.close()
        self.metrics.stop()
        if self._watcher is not None:
            self._watcher.cancel()


def _metrics_snapshot_function(
    service: OrdererService, loop: asyncio.AbstractEventLoop
) -> Callable[[], MetricsSnapshot]:
    """A snapshot taken on the service's loop, callable from the metrics HTTP thread."""

    async def take() -> MetricsSnapshot:
        return service.metrics_snapshot()

    def snapshot() -> MetricsSnapshot:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return service.metrics_snapshot()
        return asyncio.run_coroutine_threadsafe(take(), loop).result(timeout=10)

    return snapshot


async def start_server(config: OrdererConfig, service_config: ServiceConfig) -> RunningServer:
    """Recover the run in ``data_dir``, then serve the orderer, health checking and reflection
    (over TLS and behind a token when configured: :mod:`orderer.service.security`).

    Everything a user can get wrong is checked before anything is opened or written: the TLS
    files, the gRPC address and the metrics port (:mod:`orderer.service.binding`: a port
    another server holds is refused, never shared), then the data directory (its lock). Each
    refusal is a :class:`ConfigError` naming the flag; what a later step fails on (a port taken
    in the meantime) is undone before it is raised."""
    security = ServerSecurity.load(
        tls_cert=service_config.tls_cert,
        tls_key=service_config.tls_key,
        tls_client_ca=service_config.tls_client_ca,
        token=service_config.token,
        token_file=service_config.token_file,
    )
    skipped = binding.check_listen(service_config.listen)
    if service_config.metrics_port is not None:
        binding.check_metrics(
            service_config.metrics_port, service_config.metrics_address, service_config.listen
        )
    service = OrdererService.open(config, service_config)
    metrics = ServiceMetrics(_metrics_snapshot_function(service, asyncio.get_running_loop()))
    try:
        metrics_port = None
        if service_config.metrics_port is not None:
            try:
                metrics_port = metrics.start_http(
                    service_config.metrics_port, service_config.metrics_address
                )
            except OSError as error:
                raise binding.metrics_failed(
                    service_config.metrics_port, service_config.metrics_address, error
                ) from None
        server, health_servicer, port = _bind(service, service_config, security, skipped)
    except BaseException:
        metrics.stop()
        await service.close()
        raise
    await server.start()
    for name in ("", SERVICE_NAME, LIVENESS_SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def unhealthy_on_failure() -> None:
        """NOT_SERVING while the storage failed or the log volume refuses writes."""
        while True:
            await service.health_changed.wait()
            service.health_changed.clear()
            bad = service.failed is not None or service.degraded is not None
            status = health_pb2.HealthCheckResponse.NOT_SERVING if bad else (
                health_pb2.HealthCheckResponse.SERVING
            )
            for name in ("", SERVICE_NAME):
                await health_servicer.set(name, status)
            if service.failed is not None:
                await health_servicer.set(
                    LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING
                )
                return

    return RunningServer(
        server=server,
        service=service,
        health=health_servicer,
        port=port,
        metrics=metrics,
        metrics_port=metrics_port,
        stop_grace=service_config.stop_grace,
        _watcher=asyncio.get_running_loop().create_task(unhealthy_on_failure()),
    )


def _bind(
    service: OrdererService,
    service_config: ServiceConfig,
    security: ServerSecurity,
    skipped: list[OSError],
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The gRPC server with its services, bound (not started) to ``listen``, never sharing the
    port (``grpc.so_reuseport`` 0: :mod:`orderer.service.binding`)."""
    options = [
        ("grpc.max_receive_message_length", service_config.max_message_bytes),
        ("grpc.max_send_message_length", service_config.max_message_bytes),
        *binding.GRPC_SERVER_OPTIONS,
    ]
    server = grpc.aio.server(options=options, interceptors=security.interceptors())
    pb_grpc.add_OrdererServicer_to_server(OrdererServicer(service), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    try:
        if security.credentials is None:
            port = server.add_insecure_port(service_config.listen)
        else:
            port = server.add_secure_port(service_config.listen, security.credentials)
    except RuntimeError:  # gRPC's "Failed to bind"; the cause went to its log
        port = 0
    if port == 0:
        raise binding.listen_failed(service_config.listen, skipped) from None
    return server, health_servicer, port


async def serve(
    config: OrdererConfig,
    service_config: ServiceConfig,
    *,
    ready: Callable[[RunningServer], None] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (graceful stop) or a storage failure (exit status 1, so that the
    pod restarts and recovers from the logs; 1 also for a stop while the log volume is full,
    since then input that arrived was not written: never acknowledged, so it is resent)."""
    running = await start_server(config, service_config)
    log.info("serving on port %d (data in %s)", running.port, service_config.data_dir)
    if ready is not None:
        ready(running)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    stopped = loop.create_task(stop.wait())
    failed = loop.create_task(running.service.failure.wait())
    await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    failed.cancel()
    log.info("stopping (grace %.1f s)", service_config.stop_grace)
    await running.stop()
    service = running.service
    return 1 if service.failed is not None or service.degraded is not None else 0
