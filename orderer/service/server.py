"""Starting and serving: :func:`start_server` recovers the run and serves the orderer, health
checking and reflection; :func:`serve` (``evb serve``) runs it until a signal or a storage
failure; :class:`RunningServer` is a started server and how to stop it.

Why a module of its own: what a user can get wrong when starting (TLS files, the address, the
metrics port, the data directory) is checked here in one order, before anything is opened or
written, and health checking follows the service's state: readiness (the overall status) is
NOT_SERVING while the log volume refuses writes, liveness (:data:`LIVENESS_SERVICE`) only once
the service failed, so that a restart is asked for only when it would help.

Callers: ``evb serve`` (:func:`serve`), the end-to-end tests (:func:`start_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from orderer.config import OrdererConfig
from orderer.service import binding, servicer
from orderer.service.group_commit import MAX_UNWRITTEN_BYTES
from orderer.service.metrics import MetricsSnapshot, ServiceMetrics
from orderer.service.orderer_service import OrdererService
from orderer.service.security import ServerSecurity
from orderer.service.servicer import SERVICE_NAME
from orderer.service.settings import GivenParameter, ServiceConfig

__all__ = [
    "LIVENESS_SERVICE",
    "SERVICE_NAME",
    "RunningServer",
    "serve",
    "start_server",
]

log = logging.getLogger("evb.service")


LIVENESS_SERVICE = "liveness"
"""Health service name for liveness probes: NOT_SERVING only once the service failed. The
overall status ("") is for readiness: NOT_SERVING also while the log volume is full, which a
restart would not cure."""


STOP_SLACK = 1.0
"""Seconds the gRPC server's stop may take past the stop grace (cancelling the calls left
and ending their handlers) before the logs are closed without it: :meth:`RunningServer.stop`."""


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
    connections_left: bool = False
    """The gRPC server had not finished stopping when the logs were closed: connections to
    peers that do not read were still open. gRPC's own teardown then waits for them (its
    poller thread is joined while the process exits), so :func:`serve` ends the process
    without it."""

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop: health NOT_SERVING, streams told to finish, in-flight calls get
        ``grace`` seconds, then the logs are made durable and closed.

        The gRPC server's stop is awaited for ``grace`` + :data:`STOP_SLACK` at most: after
        the grace it cancels every call, but it completes only once every connection is gone,
        and a connection with a write in progress to a peer that does not read (a stopped or
        stalled subscriber whose socket buffers are full) ends only when the kernel gives up
        on the write (gRPC's TCP user timeout, 20 s), however soon the calls ended. Waiting
        for that took the stop past the pod's grace period, so the logs were never closed
        (SIGKILL); the connections left are dropped when the process exits
        (:attr:`connections_left`)."""
        grace = self.stop_grace if grace is None else grace
        await self.health.enter_graceful_shutdown()
        self.service.begin_shutdown()
        stopping = asyncio.ensure_future(self.server.stop(grace))
        done, _ = await asyncio.wait({stopping}, timeout=grace + STOP_SLACK)
        if not done:
            self.connections_left = True
            log.warning(
                "connections still open %.1f s after the stop began (peers that do not read);"
                " closing the logs without waiting for them",
                grace + STOP_SLACK,
            )
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


async def start_server(
    config: OrdererConfig,
    service_config: ServiceConfig,
    *,
    given: Iterable[GivenParameter] | None = None,
) -> RunningServer:
    """Recover the run in ``data_dir``, then serve the orderer, health checking and reflection
    (over TLS and behind a token when configured: :mod:`orderer.service.security`).

    The run is recovered with the parameters it recorded; of ``config``, the parameters
    ``given`` (None: all) that differ are refused, or applied as live changes once the server
    is bound, before it takes a call (:mod:`orderer.service.restart`).

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
    service = OrdererService.open(config, service_config, given)
    metrics = ServiceMetrics(
        _metrics_snapshot_function(service, asyncio.get_running_loop()), service.role
    )
    server: grpc.aio.Server | None = None
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
        await service.apply_restart_changes()
    except BaseException:
        if server is not None:  # bound, never started
            await server.stop(None)
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
    servicer.add_to_server(servicer.OrdererServicer(service), server)
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


GC_THRESHOLD = 50_000
"""Allocations between two young-generation collections of the serving process (Python's
default is 700). Every Submit message leaves a few dozen short-lived objects (the protobuf
message, numpy views, tuples), so with the default a collection ran every few dozen messages
and took 3-5 % of the loop thread at 2 M fragments/s (perf, issue 18)."""


def _settle_garbage_collector() -> None:
    """Once the server is up: what startup built (modules, the recovered state) lives for the
    whole process, so it is frozen out of every later collection, and young collections run
    every :data:`GC_THRESHOLD` allocations instead of every 700."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, middle, old)


MMAP_THRESHOLD = 4 << 20
"""Bytes from which glibc's malloc maps a block of its own (and unmaps it when freed): above
what one cycle of the orderer's thread or one arrival-log join allocates at a time, below the
orderer's queues of a stalled run (a higher threshold raised the stalled-source benchmark's
memory peak at the same speed: README, "The service")."""

TRIM_THRESHOLD = MAX_UNWRITTEN_BYTES
"""Free bytes at the top of a malloc heap that glibc keeps instead of giving back: as much as
the received messages waiting for the arrival log's writes may hold. With 32 MiB, the memory of
large-payload messages (1-4 KiB a fragment) was given back between two bursts and faulted in
again by gRPC's receive on the event loop's thread, which then spent most of its time zeroing
fresh pages (README, "The service"); at 32-byte payloads more was no faster."""


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory the serving process frees for its next allocation.

    Why: every cycle of the orderer's thread and every write round allocates arrays of a few
    hundred kilobytes to a few megabytes (decoded columns, the output taken, arrival-log rows)
    and frees them a few milliseconds later. With glibc's defaults each was given back to the
    kernel and faulted in again page by page (glibc's own adjustment of its threshold did not
    prevent it): the compiled join of arrival-log rows spent most of its time in page faults
    (540 a call), and the server's CPU per 1000 fragments was a fifth higher (the README's
    Performance). Nothing happens where malloc is not glibc's."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: the C library's among them
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


async def serve(
    config: OrdererConfig,
    service_config: ServiceConfig,
    *,
    given: Iterable[GivenParameter] | None = None,
    ready: Callable[[RunningServer], None] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (graceful stop) or a storage failure (exit status 1, so that the
    pod restarts and recovers from the logs; 1 also for a stop while the log volume is full,
    since then input that arrived was not written: never acknowledged, so it is resent)."""
    _keep_freed_memory()
    running = await start_server(config, service_config, given=given)
    _settle_garbage_collector()
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
    status = 1 if service.failed is not None or service.degraded is not None else 0
    if running.connections_left:
        _exit_now(status)
    return status


def _exit_now(status: int) -> NoReturn:
    """End the process at once, the logs closed and the output flushed. Why: gRPC's teardown
    (the event loop's close deallocates the server, which shuts its completion queue down and
    joins its poller thread) waits for every connection to end, and one with a write in
    progress to a peer that does not read ends only at gRPC's TCP user timeout (20 s), past
    a pod's grace period. Nothing is left to do here: the logs are durable and closed, and the
    kernel drops the connections when the process ends."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
