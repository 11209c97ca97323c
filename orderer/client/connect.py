"""Making the client's connection to the orderer, and naming why there is none.

Why a module of its own: every entry point of the client (sources, readers, control calls)
opens its channel with the same options, bounds its first connection by ``connect_timeout`` and
turns a gRPC status into the one error hierarchy of evb (:mod:`orderer.errors`), naming the
orderer's address. gRPC itself would retry an unreachable address forever (``wait_for_ready``)
or fail with a bare ``UNAVAILABLE``; here a connection not made in time raises
:class:`~orderer.errors.ServiceUnavailable` naming the address and the cause in plain words
(connection refused, name not resolved, TLS handshake failed, timed out), gRPC's own detail kept
at the end, and a refused bearer token :class:`~orderer.errors.AuthenticationError`.
"""

from __future__ import annotations

import asyncio
import re

import grpc

from orderer.errors import AuthenticationError, EvbError, InterfaceError, ServiceUnavailable
from orderer.wire.security import ChannelSecurity

__all__ = [
    "FATAL_CODES",
    "call_error",
    "channel_options",
    "check_connect_timeout",
    "connect_async",
    "connect_sync",
    "error_of",
]

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


def error_of(
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


def call_error(
    error: grpc.RpcError,
    target: str,
    method: str,
    timeout: float,
    security: ChannelSecurity | None,
) -> EvbError:
    """The error of a unary call that failed: a call that ran out of ``timeout`` names it."""
    code, details = error.code(), error.details()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ServiceUnavailable(
            f"the orderer at {target} did not answer {method} within {timeout:g} s"
        )
    return error_of(code, details, target, security)


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


def check_connect_timeout(connect_timeout: float | None) -> None:
    if connect_timeout is not None and not connect_timeout > 0:
        raise InterfaceError(f"connect_timeout: {connect_timeout!r} must be > 0 seconds or None")


def check_source(source: object) -> None:
    """A source id as the wire carries it (uint32), checked before anything is sent, so that
    the error names the value instead of a protobuf overflow."""
    if isinstance(source, bool) or not isinstance(source, int) or not 0 <= source < 2**32:
        raise InterfaceError(f"source: {source!r} is not an integer in 0..2**32-1")


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


def _probed(
    error: grpc.RpcError,
    target: str,
    connect_timeout: float,
    security: ChannelSecurity | None,
) -> None:
    """Raise ``ServiceUnavailable`` when the probe's answer says there is no connection; any
    other answer means it connected at the last moment."""
    code, details = error.code(), error.details()
    if code in _NOT_CONNECTED:
        cause = _cause(details or code.name, target, security)
        raise ServiceUnavailable(
            f"cannot reach {target} within {connect_timeout:g} s: "
            f"{cause} [gRPC: {details or code.name}]"
        ) from None


def connect_sync(
    channel: grpc.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """Wait until ``channel`` is connected, at most ``connect_timeout`` seconds; then raise
    ``ServiceUnavailable`` with gRPC's reason, read from one call that does not wait."""
    if connect_timeout is None:
        return
    # One probe that waits for the connection: any answer, even an error, means there is one.
    # Not grpc.channel_ready_future: its connectivity poller wakes every 0.2 s and closing the
    # channel waits for it: 200 ms added to every blocking call (the Spark source makes several
    # each micro-batch).
    try:
        channel.unary_unary(_PROBE_METHOD)(b"", timeout=connect_timeout, wait_for_ready=True)
        return
    except grpc.RpcError as error:
        if error.code() not in _NOT_CONNECTED:
            return
    try:
        channel.unary_unary(_PROBE_METHOD)(b"", timeout=_PROBE_TIMEOUT)
    except grpc.RpcError as error:
        _probed(error, target, connect_timeout, security)


async def connect_async(
    channel: grpc.aio.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """:func:`connect_sync` for an asyncio channel."""
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
        _probed(error, target, connect_timeout, security)
