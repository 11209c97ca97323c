"""In-process servers for the service and client tests: a real grpc.aio server on loopback with
a free port, on the test's own event loop, stopped cleanly whatever the test does."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc

from orderer.config import OrdererConfig
from orderer.service.orderer_service import OrdererService
from orderer.service.server import RunningServer, start_server
from orderer.service.settings import ServiceConfig

T = TypeVar("T")

TIMEOUT = 60.0
"""Generous: other test runs share the two cores."""


def run(coroutine: Awaitable[T], timeout: float = TIMEOUT) -> T:
    """Run one async test body with a time limit."""

    async def limited() -> T:
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(limited())


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path, config: OrdererConfig | None = None, **settings: Any
) -> AsyncIterator[RunningServer]:
    settings.setdefault("listen", "127.0.0.1:0")
    running = await start_server(
        config or OrdererConfig(), ServiceConfig(data_dir=data_dir, **settings)
    )
    try:
        yield running
    finally:
        await running.stop(grace=1.0)


def target(running: RunningServer) -> str:
    return f"127.0.0.1:{running.port}"


@contextlib.asynccontextmanager
async def serving_channel(
    data_dir: Path, config: OrdererConfig | None = None, **settings: Any
) -> AsyncIterator[tuple[RunningServer, grpc.aio.Channel]]:
    """A server and a client channel to it."""
    async with (
        serving(data_dir, config, **settings) as running,
        grpc.aio.insecure_channel(target(running)) as channel,
    ):
        yield running, channel


@contextlib.contextmanager
def arrival_writes_stalled(service: OrdererService) -> Iterator[threading.Event]:
    """The service's arrival-log writes wait (a disk behind the network) until the event
    yielded is set, which leaving the block does whatever happened in it."""
    disk = threading.Event()
    append_rows = service.arrivals.append_rows

    def stalled(t: float, rows: object) -> None:
        disk.wait(60)
        append_rows(t, rows)  # type: ignore[arg-type]

    service.arrivals.append_rows = stalled  # type: ignore[method-assign]
    try:
        yield disk
    finally:
        disk.set()
