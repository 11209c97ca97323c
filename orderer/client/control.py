"""Control calls of the orderer: :func:`get_stats`, :func:`configure`, :func:`end_run`,
:func:`commit`, :func:`get_committed`, :func:`delete_consumer`, :func:`set_source_state`, each
blocking and as an ``*_async`` twin.

Why one module: each is one unary call on a channel of its own, bounded twice the same way:
``connect_timeout`` bounds the connection (``ServiceUnavailable`` naming the address and the
cause), then ``timeout`` the call itself. Each call is written once, as the exchange it makes
(:class:`_Exchange`: method, request, how the reply reads); its blocking and its asyncio face
are made from that one description, so the two take the same parameters and say the same.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

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
from orderer.errors import InterfaceError
from orderer.wire import convert
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT
from orderer.wire.security import ChannelSecurity, aio_channel, sync_channel

_P = ParamSpec("_P")
_R = TypeVar("_R")


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


def _faces(
    describe: Callable[_P, _Exchange[_R]],
) -> tuple[Callable[_P, _R], Callable[_P, Coroutine[Any, Any, _R]]]:
    """The blocking and the asyncio function of the call ``describe`` describes; named after it
    (``_get_stats`` makes ``get_stats`` and ``get_stats_async``), with its parameters and
    docstring."""

    def blocking(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return describe(*args, **kwargs).blocking()

    async def asyncio(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await describe(*args, **kwargs).asyncio()

    name = describe.__name__.lstrip("_")
    parameters = inspect.signature(describe).replace(return_annotation=inspect.Signature.empty)
    for face, suffix in ((blocking, ""), (asyncio, "_async")):
        functools.update_wrapper(face, describe)
        face.__name__ = face.__qualname__ = name + suffix
        face.__signature__ = parameters  # type: ignore[union-attr]
    return blocking, asyncio


def _get_stats(
    target: str,
    *,
    barrier_log_limit: int = 0,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[dict[str, Any]]:
    """The counters (``evb replay --stats`` layout) and the live state of the service: sources,
    barrier log, connections, consumers. ``barrier_log_limit``: how many of the newest resolved
    barriers to return (0: the server's default, 1000); a live view asks for a few, so that a
    refresh every second does not carry a thousand records it never shows."""
    if isinstance(barrier_log_limit, bool) or not 0 <= barrier_log_limit < 2**32:
        raise InterfaceError(
            f"barrier_log_limit: {barrier_log_limit!r} must be an integer from 0 to 2**32 - 1"
        )
    request = pb.GetStatsRequest(barrier_log_limit=barrier_log_limit)
    return _Exchange(
        target, security, connect_timeout, "GetStats", request, timeout, convert.stats_to_mapping
    )


def _configure(
    target: str,
    changes: Mapping[str, Any] | None = None,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    **more: Any,
) -> _Exchange[dict[str, Any]]:
    """Change parameters live (``build_window=5``, ``sourceTimeout="off"``); returns the
    configuration now in force."""
    request = convert.configure_request({**(changes or {}), **more})
    return _Exchange(
        target, security, connect_timeout, "Configure", request, timeout, convert.config_to_mapping
    )


def _end_run(
    target: str,
    *,
    timeout: float = 60.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[int]:
    """End of run: drain every queue; returns the offset after the run's last fragment."""
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
) -> _Exchange[dict[str, int]]:
    """The next run on the same server, once the current one has ended: ``run`` (default: the
    current number + 1). Returns ``{"run", "start_offset"}``, the offset of its first fragment."""
    if run is not None and (isinstance(run, bool) or not 0 <= run < 2**64):
        raise InterfaceError(f"run: {run!r} must be an integer from 0 to 2**64 - 1")
    request = pb.BeginRunRequest() if run is None else pb.BeginRunRequest(run=run)
    return _Exchange(target, security, connect_timeout, "BeginRun", request, timeout, _begun)


def _begun(reply: pb.BeginRunReply) -> dict[str, int]:
    return {"run": int(reply.run), "start_offset": int(reply.start_offset)}


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
    """``consumer`` processed every offset below ``offset``: the orderer's retention keeps the
    rest for it. Returns (the consumer's committed offset now, the lowest over all consumers).
    ``metadata`` (at most 65,536 bytes) is kept with the offset, for :func:`get_committed`: a
    commit that moves the offset stores it (none when None), one at exactly the committed
    offset replaces it unless None, one below it changes nothing."""
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
) -> _Exchange[dict[str, Any]]:
    """``consumer``'s committed offset and the metadata committed with it, changing nothing (a
    :func:`commit` would register an unknown name). Returns ``{"known": bool, "offset": int,
    "metadata": bytes}``; an unknown name is ``{"known": False, "offset": 0, "metadata": b""}``."""
    request = pb.GetCommittedRequest(consumer=consumer)
    return _Exchange(
        target, security, connect_timeout, "GetCommitted", request, timeout, _read_committed
    )


def _read_committed(reply: pb.CommitReply) -> dict[str, Any]:
    return {"known": reply.known, "offset": int(reply.offset), "metadata": bytes(reply.metadata)}


def _delete_consumer(
    target: str,
    consumer: str,
    *,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> _Exchange[tuple[bool, int | None]]:
    """Forget ``consumer``, so that retention no longer keeps output for it (a consumer gone for
    good holds the log forever otherwise). Returns (whether it was known, the lowest committed
    offset over the consumers left, None when none is left)."""
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
) -> _Exchange[dict[str, bool]]:
    """Mark ``source`` dead by hand (``dead=True``), so that it no longer holds pending
    barriers, or revive it (NSCLDAQ's dead-source control; durable on the server). Returns
    ``{"was_known": True, "dead": whether it is dead now}``. A source the orderer does not know
    (neither declared nor heard from), or with ``strictSources`` an undeclared one, is refused
    (``InterfaceError`` naming the known or accepted sources)."""
    check_source(source)
    request = pb.SourceStateRequest(source=source, dead=bool(dead))
    return _Exchange(
        target, security, connect_timeout, "SetSourceState", request, timeout, _source_state
    )


def _source_state(reply: pb.SourceStateReply) -> dict[str, bool]:
    return {"was_known": bool(reply.was_known), "dead": bool(reply.dead)}


get_stats, get_stats_async = _faces(_get_stats)
configure, configure_async = _faces(_configure)
end_run, end_run_async = _faces(_end_run)
begin_run, begin_run_async = _faces(_begin_run)
commit, commit_async = _faces(_commit)
get_committed, get_committed_async = _faces(_get_committed)
delete_consumer, delete_consumer_async = _faces(_delete_consumer)
set_source_state, set_source_state_async = _faces(_set_source_state)
