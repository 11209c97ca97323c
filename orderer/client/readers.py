"""Readers of the ordered output: :class:`OrderedStreamReader` (blocking) and :func:`subscribe`
(asyncio) iterate it from an offset and resume where they stopped after a reconnect.

Why one class for both: the two read the same ``Subscribe`` stream the same way (ask from the
next offset, cut at ``until``, ask again from where the last batch ended after a reconnect)
and take the same parameters; only the waiting differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import EmittedBatch
from orderer.client.connect import (
    channel_options,
    check_connect_timeout,
    connect_async,
    connect_sync,
)
from orderer.client.reconnect import Reconnects
from orderer.client.twins import parameters_of
from orderer.wire import convert
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity, aio_channel, sync_channel

__all__ = ["OrderedStreamReader", "subscribe"]


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
        check_connect_timeout(connect_timeout)
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
        self._lock = threading.Lock()
        self._call: grpc.Future | None = None
        """The blocking stream being read, for :meth:`stop_at` to end."""

    @property
    def _done(self) -> bool:
        return self.until is not None and self.offset >= self.until

    def stop_at(self, offset: int) -> None:
        """End the (blocking) iteration at ``offset``, at once when it is there already; from
        any thread. Why: a reader waiting for output that will not come (the run ended, which
        the stream does not say) sits in the stream; ``evb tail --follow`` learns the end from
        ``GetStats`` and stops its reader here."""
        with self._lock:
            self.until = offset if self.until is None else min(self.until, offset)
            call = self._call
        if self._done and call is not None:
            call.cancel()

    def _request(self) -> pb.SubscribeRequest:
        """Ask from the next offset (again, after a reconnect)."""
        return pb.SubscribeRequest(
            from_offset=self.offset,
            max_fragments=self._max_fragments,
            omit_payload=not self._payload,
        )

    def _take(self, message: pb.OrderedBatch) -> EmittedBatch | None:
        """The batch of ``message``, cut at ``until`` (None when nothing is left of it); the
        offsets move past it."""
        batch = convert.emitted_from_pb(message)
        if self.until is not None and batch.first_seq + len(batch) > self.until:
            batch = batch.slice(0, max(0, self.until - batch.first_seq))
        self.offset += len(batch)
        self.next_offset = max(self.next_offset, message.next_offset)
        return batch if len(batch) else None

    def __iter__(self) -> Iterator[EmittedBatch]:
        reconnects = Reconnects(self._backoff, self._reconnect_timeout)
        with sync_channel(self.target, self._security, channel_options()) as channel:
            connect_sync(channel, self.target, self._connect_timeout, self._security)
            stub = pb_grpc.OrdererStub(channel)
            while not self._done:
                call = stub.Subscribe(self._request(), wait_for_ready=True)
                with self._lock:
                    self._call = call
                    if self._done:  # stopped between the check and the call
                        call.cancel()
                try:
                    for message in call:
                        reconnects.answered()
                        if (batch := self._take(message)) is not None:
                            yield batch
                        if self._done:
                            break
                except grpc.RpcError as error:
                    if self._done:  # cancelled by stop_at
                        break
                    code, details = error.code(), error.details()
                    time.sleep(
                        reconnects.delay_or_raise(code, details, self.target, self._security)
                    )
                finally:
                    call.cancel()

    async def _iterate_async(self) -> AsyncGenerator[EmittedBatch, None]:
        """:meth:`__iter__` on an asyncio channel (:func:`subscribe`)."""
        reconnects = Reconnects(self._backoff, self._reconnect_timeout)
        async with aio_channel(self.target, self._security, channel_options()) as channel:
            await connect_async(channel, self.target, self._connect_timeout, self._security)
            stub = pb_grpc.OrdererStub(channel)
            while not self._done:
                call = stub.Subscribe(self._request(), wait_for_ready=True)
                try:
                    async for message in call:
                        reconnects.answered()
                        if (batch := self._take(message)) is not None:
                            yield batch
                        if self._done:
                            break
                except grpc.aio.AioRpcError as error:
                    code, details = error.code(), error.details()
                    delay = reconnects.delay_or_raise(code, details, self.target, self._security)
                    await asyncio.sleep(delay)
                finally:
                    call.cancel()


@parameters_of(OrderedStreamReader)
async def subscribe(*args: Any, **kwargs: Any) -> AsyncIterator[EmittedBatch]:
    """The ordered output from ``from_offset`` (up to ``until``, else forever), as batches with
    consecutive offsets; resumes where it stopped after a reconnect. ``payload=False`` leaves
    the payloads out. ``ServiceUnavailable`` when the first connection is not made within
    ``connect_timeout`` seconds, or a lost one not again within ``reconnect_timeout``. Takes
    :class:`OrderedStreamReader`'s parameters."""
    reader = OrderedStreamReader(*args, **kwargs)
    async with contextlib.aclosing(reader._iterate_async()) as batches:  # closed with this one
        async for batch in batches:
            yield batch
