"""The blocking source client, for readout loops and scripts.

Why a thread and not a second implementation: :class:`SourceClient` runs an
:class:`~orderer.client.sources.AsyncSourceClient` on an asyncio loop in a background thread, so
batching, numbering, resending and flow control are the asyncio client's, and ``send`` only
appends to the source's buffer (no thread hop) until a batch is full.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from orderer.batch import FragmentBatch
from orderer.client.batching import check_timestamp, single_source, source_batch
from orderer.client.sources import AsyncSourceClient
from orderer.client.twins import method_parameters_of

__all__ = ["SourceClient"]

_T = TypeVar("_T")


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
        if not self._client.registered(source):

            async def register() -> None:
                self._client._register(source)

            self._call(register())

    def send(self, source: int, timestamp: int, barrier: int = 0, payload: bytes = b"") -> None:
        client = self._client
        client._check()
        check_timestamp(timestamp)
        self._registered(source)
        self._added(source, client._buffer_one(source, timestamp, barrier, payload))

    @method_parameters_of(AsyncSourceClient.send_batch)
    def send_batch(self, source: int, *arrays: Any, **named: Any) -> None:
        """:meth:`AsyncSourceClient.send_batch` from this thread (its parameters)."""
        client = self._client
        client._check()
        self._registered(source)
        batch = source_batch(source, *arrays, **named)
        self._added(source, client._buffer_batch(source, batch))

    def number_from(self, source: int, first_sequence: int) -> None:
        """:meth:`AsyncSourceClient.number_from` from this thread."""

        async def number() -> None:
            self._client.number_from(source, first_sequence)

        self._call(number())

    def send_fragments(self, batch: FragmentBatch) -> None:
        client = self._client
        client._check()
        source = single_source(batch)
        self._registered(source)
        self._added(source, client._buffer_batch(source, batch))

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
    def targets(self) -> tuple[str, ...]:
        """The run's orderers' addresses, in their order."""
        return self._client.targets

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
