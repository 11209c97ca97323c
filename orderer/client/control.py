"""Control calls of the orderer: :func:`get_stats`, :func:`configure`, :func:`end_run`,
:func:`begin_run`, :func:`commit`, :func:`get_committed`, :func:`delete_consumer`,
:func:`set_source_state`, :func:`get_slice_index`, each blocking and as an ``*_async`` twin,
each answering with typed values (:mod:`orderer.stats`, :class:`~orderer.config.OrdererConfig`,
the replies below).

Why one module: each is one unary call on a channel of its own, bounded twice the same way:
``connect_timeout`` bounds the connection (``ServiceUnavailable`` naming the address and the
cause), then ``timeout`` the call itself. Each call is described once, as the exchange it makes
(:class:`_Exchange`: method, request, how the reply reads); its blocking and its asyncio
function both take the description's parameters (:func:`~orderer.client.twins.parameters_of`),
so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client.connect import (
    call_error,
    channel_options,
    check_connect_timeout,
    check_source,
    connect_async,
    connect_sync,
)
from orderer.client.twins import parameters_of
from orderer.config import OrdererConfig
from orderer.errors import InterfaceError
from orderer.stats import RunSpan, SliceIndex, Stats
from orderer.wire import convert
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity, aio_channel, sync_channel

__all__ = [
    "Committed",
    "SourceMark",
    "begin_run",
    "begin_run_async",
    "commit",
    "commit_async",
    "configure",
    "configure_async",
    "delete_consumer",
    "delete_consumer_async",
    "end_run",
    "end_run_async",
    "get_committed",
    "get_committed_async",
    "get_slice_index",
    "get_slice_index_async",
    "get_stats",
    "get_stats_async",
    "set_source_state",
    "set_source_state_async",
]

_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Committed:
    """A consumer's committed offset, as :func:`get_committed` reads it."""

    known: bool
    """The service knows the consumer (an unknown one reads offset 0, no metadata)."""
    offset: int
    """It is done with every offset below this one."""
    metadata: bytes
    """What it committed with that offset (``b""``: nothing)."""


@dataclass(frozen=True, slots=True)
class SourceMark:
    """What :func:`set_source_state` did."""

    was_known: bool
    dead: bool
    """The source is dead now."""


@dataclass(frozen=True, slots=True)
class _Exchange(Generic[_R]):
    """One unary call to make: where, which method with which request, how long it may take,
    and what the caller gets from the reply."""

    target: str
    security: ChannelSecurity | None
    connect_timeout: float | None
    method: str
    request: Any
    timeout: float
    reply: Callable[[Any], _R]

    def __post_init__(self) -> None:
        check_connect_timeout(self.connect_timeout)

    def blocking(self) -> _R:
        with sync_channel(self.target, self.security, channel_options()) as channel:
            connect_sync(channel, self.target, self.connect_timeout, self.security)
            call = getattr(pb_grpc.OrdererStub(channel), self.method)
            try:
                reply = call(self.request, timeout=self.timeout, wait_for_ready=True)
            except grpc.RpcError as error:
                raise self._error(error) from None
        return self.reply(reply)

    async def asyncio(self) -> _R:
        async with aio_channel(self.target, self.security, channel_options()) as channel:
            await connect_async(channel, self.target, self.connect_timeout, self.security)
            call = getattr(pb_grpc.OrdererStub(channel), self.method)
            try:
                reply = await call(self.request, timeout=self.timeout, wait_for_ready=True)
            except grpc.aio.AioRpcError as error:
                raise self._error(error) from None
        return self.reply(reply)

    def _error(self, error: grpc.RpcError) -> Exception:
        return call_error(error, self.target, self.method, self.timeout, self.security)


def _get_stats(
    target: str,
    *,
    barrier_log_limit: int = 0,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[Stats]:
    if isinstance(barrier_log_limit, bool) or not 0 <= barrier_log_limit < 2**32:
        raise InterfaceError(
            f"barrier_log_limit: {barrier_log_limit!r} must be an integer from 0 to 2**32 - 1"
        )
    request = pb.GetStatsRequest(barrier_log_limit=barrier_log_limit)
    return _Exchange(
        target, security, connect_timeout, "GetStats", request, timeout, convert.stats_from_pb
    )


def _configure(
    target: str,
    changes: Mapping[str, Any] | None = None,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    **more: Any,
) -> _Exchange[OrdererConfig]:
    request = convert.configure_request({**(changes or {}), **more})
    return _Exchange(
        target, security, connect_timeout, "Configure", request, timeout, convert.config_from_pb
    )


def _end_run(
    target: str,
    *,
    timeout: float = 60.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[int]:
    request = pb.EndRunRequest()
    return _Exchange(target, security, connect_timeout, "EndRun", request, timeout, _next_offset)


def _next_offset(reply: pb.EndRunReply) -> int:
    return int(reply.next_offset)


def _begin_run(
    target: str,
    run: int | None = None,
    *,
    timeout: float = 60.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[RunSpan]:
    if run is not None and (isinstance(run, bool) or not 0 <= run < 2**64):
        raise InterfaceError(f"run: {run!r} must be an integer from 0 to 2**64 - 1")
    request = pb.BeginRunRequest() if run is None else pb.BeginRunRequest(run=run)
    return _Exchange(target, security, connect_timeout, "BeginRun", request, timeout, _begun)


def _begun(reply: pb.BeginRunReply) -> RunSpan:
    return RunSpan(int(reply.run), int(reply.start_offset))


def _commit(
    target: str,
    consumer: str,
    offset: int,
    *,
    metadata: bytes | None = None,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[tuple[int, int]]:
    if metadata is not None and not isinstance(metadata, bytes | bytearray | memoryview):
        raise InterfaceError(f"metadata: must be bytes, got {type(metadata).__name__}")
    request = pb.CommitRequest(consumer=consumer, offset=offset)
    if metadata is not None:
        request.metadata = bytes(metadata)
    return _Exchange(target, security, connect_timeout, "Commit", request, timeout, _committed)


def _committed(reply: pb.CommitReply) -> tuple[int, int]:
    return int(reply.offset), int(reply.lowest)


def _get_committed(
    target: str,
    consumer: str,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[Committed]:
    request = pb.GetCommittedRequest(consumer=consumer)
    return _Exchange(
        target, security, connect_timeout, "GetCommitted", request, timeout, _read_committed
    )


def _read_committed(reply: pb.CommitReply) -> Committed:
    return Committed(bool(reply.known), int(reply.offset), bytes(reply.metadata))


def _delete_consumer(
    target: str,
    consumer: str,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[tuple[bool, int | None]]:
    request = pb.DeleteConsumerRequest(consumer=consumer)
    return _Exchange(
        target, security, connect_timeout, "DeleteConsumer", request, timeout, _deleted
    )


def _deleted(reply: pb.DeleteConsumerReply) -> tuple[bool, int | None]:
    return bool(reply.existed), int(reply.lowest) if reply.HasField("lowest") else None


def _set_source_state(
    target: str,
    source: int,
    dead: bool,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[SourceMark]:
    check_source(source)
    request = pb.SourceStateRequest(source=source, dead=bool(dead))
    return _Exchange(
        target, security, connect_timeout, "SetSourceState", request, timeout, _source_state
    )


def _source_state(reply: pb.SourceStateReply) -> SourceMark:
    return SourceMark(bool(reply.was_known), bool(reply.dead))


def _get_slice_index(
    target: str,
    from_slice: int = 0,
    *,
    limit: int = 0,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[SliceIndex]:
    if isinstance(from_slice, bool) or not 0 <= from_slice < 2**64:
        raise InterfaceError(f"from_slice: {from_slice!r} must be an integer from 0 to 2**64 - 1")
    if isinstance(limit, bool) or not 0 <= limit < 2**32:
        raise InterfaceError(f"limit: {limit!r} must be an integer from 0 to 2**32 - 1")
    request = pb.GetSliceIndexRequest(from_slice=from_slice, limit=limit)
    return _Exchange(
        target, security, connect_timeout, "GetSliceIndex", request, timeout,
        convert.slice_index_from_pb,
    )  # fmt: skip


# ---------------------------------------------------------------- the calls, blocking and asyncio


@parameters_of(_get_stats)
def get_stats(*args: Any, **kwargs: Any) -> Stats:
    """The counters and the live state of the service: sources, barrier log, connections,
    consumers, the run table. ``barrier_log_limit``: how many of the newest resolved barriers
    to return (0: the server's default, 1000); a live view asks for a few, so that a refresh
    every second does not carry a thousand records it never shows."""
    return _get_stats(*args, **kwargs).blocking()


@parameters_of(_get_stats)
async def get_stats_async(*args: Any, **kwargs: Any) -> Stats:
    """:func:`get_stats` on asyncio."""
    return await _get_stats(*args, **kwargs).asyncio()


@parameters_of(_configure)
def configure(*args: Any, **kwargs: Any) -> OrdererConfig:
    """Change parameters live (``build_window=5``, ``sourceTimeout="off"``); returns the
    configuration now in force."""
    return _configure(*args, **kwargs).blocking()


@parameters_of(_configure)
async def configure_async(*args: Any, **kwargs: Any) -> OrdererConfig:
    """:func:`configure` on asyncio."""
    return await _configure(*args, **kwargs).asyncio()


@parameters_of(_end_run)
def end_run(*args: Any, **kwargs: Any) -> int:
    """End of run: drain every queue; returns the offset after the run's last fragment."""
    return _end_run(*args, **kwargs).blocking()


@parameters_of(_end_run)
async def end_run_async(*args: Any, **kwargs: Any) -> int:
    """:func:`end_run` on asyncio."""
    return await _end_run(*args, **kwargs).asyncio()


@parameters_of(_begin_run)
def begin_run(*args: Any, **kwargs: Any) -> RunSpan:
    """The next run on the same server, once the current one has ended: ``run`` (default: the
    current number + 1). Returns its span: its number and the offset of its first fragment."""
    return _begin_run(*args, **kwargs).blocking()


@parameters_of(_begin_run)
async def begin_run_async(*args: Any, **kwargs: Any) -> RunSpan:
    """:func:`begin_run` on asyncio."""
    return await _begin_run(*args, **kwargs).asyncio()


@parameters_of(_commit)
def commit(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """``consumer`` processed every offset below ``offset``: the orderer's retention keeps the
    rest for it. Returns (the consumer's committed offset now, the lowest over all consumers).
    ``metadata`` (at most 65,536 bytes) is kept with the offset, for :func:`get_committed`: a
    commit that moves the offset stores it (none when None), one at exactly the committed
    offset replaces it unless None, one below it changes nothing."""
    return _commit(*args, **kwargs).blocking()


@parameters_of(_commit)
async def commit_async(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """:func:`commit` on asyncio."""
    return await _commit(*args, **kwargs).asyncio()


@parameters_of(_get_committed)
def get_committed(*args: Any, **kwargs: Any) -> Committed:
    """``consumer``'s committed offset and the metadata committed with it, changing nothing (a
    :func:`commit` would register an unknown name); an unknown name reads
    ``Committed(known=False, offset=0, metadata=b"")``."""
    return _get_committed(*args, **kwargs).blocking()


@parameters_of(_get_committed)
async def get_committed_async(*args: Any, **kwargs: Any) -> Committed:
    """:func:`get_committed` on asyncio."""
    return await _get_committed(*args, **kwargs).asyncio()


@parameters_of(_delete_consumer)
def delete_consumer(*args: Any, **kwargs: Any) -> tuple[bool, int | None]:
    """Forget ``consumer``, so that retention no longer keeps output for it (a consumer gone for
    good holds the log forever otherwise). Returns (whether it was known, the lowest committed
    offset over the consumers left, None when none is left)."""
    return _delete_consumer(*args, **kwargs).blocking()


@parameters_of(_delete_consumer)
async def delete_consumer_async(*args: Any, **kwargs: Any) -> tuple[bool, int | None]:
    """:func:`delete_consumer` on asyncio."""
    return await _delete_consumer(*args, **kwargs).asyncio()


@parameters_of(_set_source_state)
def set_source_state(*args: Any, **kwargs: Any) -> SourceMark:
    """Mark ``source`` dead by hand (``dead=True``), so that it no longer holds pending
    barriers, or revive it (NSCLDAQ's dead-source control; durable on the server). A source the
    orderer does not know (neither declared nor heard from), or with ``strictSources`` an
    undeclared one, is refused (``InterfaceError`` naming the known or accepted sources)."""
    return _set_source_state(*args, **kwargs).blocking()


@parameters_of(_set_source_state)
async def set_source_state_async(*args: Any, **kwargs: Any) -> SourceMark:
    """:func:`set_source_state` on asyncio."""
    return await _set_source_state(*args, **kwargs).asyncio()


@parameters_of(_get_slice_index)
def get_slice_index(*args: Any, **kwargs: Any) -> SliceIndex:
    """The slice index of an orderer of a run over several (docs/scale-out.md): its pieces of
    slice ``from_slice`` and above, ``limit`` at most (0: the server's choice, 65,536), each
    with its slice, its first output offset and its highest ordinary timestamp so far, as far
    as its output is durable (``next_offset``); ``complete`` once the run has ended and all of
    it is durable. A piece ends where the orderer's next one begins. An orderer started
    without a slice length keeps none (``InterfaceError``)."""
    return _get_slice_index(*args, **kwargs).blocking()


@parameters_of(_get_slice_index)
async def get_slice_index_async(*args: Any, **kwargs: Any) -> SliceIndex:
    """:func:`get_slice_index` on asyncio."""
    return await _get_slice_index(*args, **kwargs).asyncio()
