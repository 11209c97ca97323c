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
import socket
import time
from dataclasses import dataclass
from typing import Any

import grpc

from orderer.errors import AuthenticationError, EvbError, InterfaceError, ServiceUnavailable
from orderer.wire.security import ChannelSecurity, aio_channel, sync_channel

__all__ = [
    "FATAL_CODES",
    "Cause",
    "call_error",
    "cause_of",
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
"""Asked without waiting for a connection (a fail-fast call): any answer, even an error status,
means the channel is connected; UNAVAILABLE carries gRPC's reason for having no connection. Open
without a token (:data:`orderer.wire.security.OPEN_METHODS`), and an empty request is valid."""

_POLL = 0.05
"""Seconds between two probes while there is no connection yet: a probe during gRPC's
reconnect backoff fails at once with the last attempt's reason."""

_NOT_CONNECTED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

_SSL_REASON = re.compile(r"OPENSSL_internal:([A-Z0-9_]+)(?::\s*([^:]+))?")
_OS_REASON = re.compile(r"Failed to connect to remote host: ([^:;]+)")
_ADDRESS_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")


@dataclass(frozen=True, slots=True)
class Cause:
    """Why there is no connection, in plain words.

    ``final``: the server answered and refused this client (a TLS handshake that failed, a
    connection it closed, a peer that does not speak HTTP/2): waiting longer cannot change
    that, so the client says so at once instead of after ``connect_timeout``. Every other cause
    (refused, not resolved, no answer) may pass while a server starts, so the client waits."""

    words: str
    final: bool = False
    answered: bool = True
    """False when nothing answered before the probe's deadline (an attempt still under way):
    a reason seen earlier (``connection refused``) then says more."""


def check_connect_timeout(connect_timeout: float | None) -> None:
    if connect_timeout is not None and not connect_timeout > 0:
        raise InterfaceError(f"connect_timeout: {connect_timeout!r} must be > 0 seconds or None")


def check_source(source: object) -> None:
    """A source id as the wire carries it (uint32), checked before anything is sent, so that
    the error names the value instead of a protobuf overflow."""
    if isinstance(source, bool) or not isinstance(source, int) or not 0 <= source < 2**32:
        raise InterfaceError(f"source: {source!r} is not an integer in 0..2**32-1")


def _host_port(target: str) -> tuple[str, str] | None:
    """``(host, port)`` of a plain ``host:port`` target; None for gRPC's other forms."""
    if target.startswith(_ADDRESS_SCHEMES) or "://" in target or ":" not in target:
        return None
    host, port = target.rsplit(":", 1)
    return host.strip("[]"), port


def _host(target: str) -> str:
    address = target.split("://", 1)[-1].lstrip("/")
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]") or target


def cause_of(details: str, target: str, security: ChannelSecurity | None) -> Cause:
    """gRPC's reason for having no connection, in plain words."""
    text = details.lower()
    tls = security is not None and security.tls
    if "resolv" in text or "domain name not found" in text or "lookup" in text:
        return Cause(f"name not resolved ({_host(target)})")
    if "handshake failed" in text:
        match = _SSL_REASON.search(details)
        if match is None:
            return Cause("TLS handshake failed", final=True)
        name, more = match.group(1), (match.group(2) or "").strip()
        if name == "WRONG_VERSION_NUMBER":
            return Cause("TLS handshake failed (the server does not serve TLS)", final=True)
        reason = name.lower().replace("_", " ")
        if name == "CERTIFICATE_VERIFY_FAILED":
            reason += f": {more}" if more else ""
            reason += "; the server's certificate is not signed by the CA this client trusts"
        return Cause(f"TLS handshake failed ({reason})", final=True)
    if "failed parsing http/2" in text:
        return Cause("the server does not speak gRPC (HTTP/2)", final=True)
    if "socket closed" in text or "connection reset" in text or "end of tcp stream" in text:
        if not tls:
            words = "the server closed the connection (does it serve TLS? then connect with TLS)"
        elif security is not None and security.certificate_chain is None:
            words = (
                "TLS handshake failed (the server closed the connection; does it require a"
                " client certificate?)"
            )
        else:
            words = (
                "TLS handshake failed (the server closed the connection; is this client's"
                " certificate signed by a CA the server trusts?)"
            )
        return Cause(words, final=True)
    if "connection refused" in text:
        return Cause("connection refused")
    match = _OS_REASON.search(details)
    if match is not None:
        return Cause(match.group(1).strip().lower())
    if "deadline" in text or "timed out" in text or "timeout" in text:
        return Cause("timed out (no gRPC answer from this address)", answered=False)
    return Cause("no connection")


def _unavailable(
    target: str, connect_timeout: float, cause: Cause, details: str
) -> ServiceUnavailable:
    """The error of a first connection not made: a final cause says it was refused (at once),
    any other that ``connect_timeout`` ran out."""
    if cause.final:
        where = f"cannot connect to {target}"
    else:
        where = f"cannot reach {target} within {connect_timeout:g} s"
    return ServiceUnavailable(f"{where}: {cause.words} [gRPC: {details}]")


def _probe_options(target: str, security: ChannelSecurity | None) -> list[tuple[str, Any]]:
    """Options of a channel to one address of ``target``: the certificate is still checked
    against ``target``'s host (or the configured server name)."""
    options: list[tuple[str, Any]] = channel_options()
    host = _host(target)
    if security is not None and security.tls and security.server_name is None:
        options.append(("grpc.ssl_target_name_override", host))
    options.append(("grpc.default_authority", target))
    return options


def _address_target(family: int, address: str, port: str) -> str:
    return f"ipv6:[{address}]:{port}" if family == socket.AF_INET6 else f"ipv4:{address}:{port}"


def _distinct(infos: list[tuple[Any, ...]], port: str) -> list[str]:
    """One gRPC target per resolved address, in the resolver's order."""
    targets: list[str] = []
    for family, _kind, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = _address_target(family, str(sockaddr[0]), port)
            if address not in targets:
                targets.append(address)
    return targets


def _details(error: grpc.RpcError) -> str:
    return str(error.details() or error.code().name)


def _connected(error: grpc.RpcError) -> bool:
    """Whether the probe's failure still means a connection (the server gave a status)."""
    return error.code() not in _NOT_CONNECTED


class _SyncProbes:
    """The probes of :func:`connect_sync`: the channel itself, and, when gRPC names only the
    last address it tried, each address of the target on a channel of its own, because a
    name with several addresses (``localhost``: ::1, then 127.0.0.1) reports the last one's
    reason (nothing listening on ::1) where another one's server refused the handshake."""

    def __init__(self, channel: grpc.Channel, target: str, security: ChannelSecurity | None):
        self._channel, self._target, self._security = channel, target, security
        self._per_address: list[grpc.Channel] | None = None

    def probe(self, timeout: float) -> str | None:
        """None when connected, else gRPC's reason."""
        return self._ask(self._channel, timeout)

    @staticmethod
    def _ask(channel: grpc.Channel, timeout: float) -> str | None:
        try:
            channel.unary_unary(_PROBE_METHOD)(b"", timeout=timeout)
        except grpc.RpcError as error:
            return None if _connected(error) else _details(error)
        return None

    def final(self, timeout: float) -> tuple[Cause, str] | None:
        """A final cause found at one of the target's addresses, if any."""
        for channel in self._addresses():
            details = self._ask(channel, timeout)
            if details is not None:
                cause = cause_of(details, self._target, self._security)
                if cause.final:
                    return cause, details
        return None

    def _addresses(self) -> list[grpc.Channel]:
        if self._per_address is None:
            self._per_address = []
            found = _host_port(self._target)
            if found is not None:
                try:
                    infos = socket.getaddrinfo(*found, type=socket.SOCK_STREAM)
                except (OSError, UnicodeError):
                    infos = []
                targets = _distinct(infos, found[1])
                if len(targets) > 1:
                    options = _probe_options(self._target, self._security)
                    self._per_address = [sync_channel(t, self._security, options) for t in targets]
        return self._per_address

    def close(self) -> None:
        for channel in self._per_address or []:
            channel.close()


def connect_sync(
    channel: grpc.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """Wait until ``channel`` is connected, at most ``connect_timeout`` seconds; raise
    ``ServiceUnavailable`` with gRPC's reason in plain words when it is not, at once when the
    server refused this client (:class:`Cause`)."""
    if connect_timeout is None:
        return
    # Fail-fast probes, not grpc.channel_ready_future: its connectivity poller wakes every
    # 0.2 s and closing the channel waits for it: 200 ms added to every blocking call (the
    # Spark source makes several each micro-batch).
    deadline = time.monotonic() + connect_timeout
    probes = _SyncProbes(channel, target, security)
    # the last reason gRPC gave: a probe that met an attempt still under way (a loaded host)
    # has none, and the reason an earlier attempt ended with is the one to tell
    heard: tuple[Cause, str] | None = None
    try:
        while True:
            details = probes.probe(max(deadline - time.monotonic(), 0.001))
            if details is None:
                return
            cause = cause_of(details, target, security)
            if not cause.final:  # another of its addresses may have refused this client
                cause, details = probes.final(_POLL * 4) or (cause, details)
            heard = (cause, details) if cause.answered else heard
            left = deadline - time.monotonic()
            if cause.final or left <= 0:
                told, why = heard or (cause, details)
                raise _unavailable(target, connect_timeout, told, why) from None
            time.sleep(min(_POLL, left))
    finally:
        probes.close()


class _AsyncProbes:
    """:class:`_SyncProbes` on asyncio channels."""

    def __init__(
        self, channel: grpc.aio.Channel, target: str, security: ChannelSecurity | None
    ) -> None:
        self._channel, self._target, self._security = channel, target, security
        self._per_address: list[grpc.aio.Channel] | None = None

    async def probe(self, timeout: float) -> str | None:
        return await self._ask(self._channel, timeout)

    @staticmethod
    async def _ask(channel: grpc.aio.Channel, timeout: float) -> str | None:
        try:
            await channel.unary_unary(_PROBE_METHOD)(b"", timeout=timeout)
        except grpc.aio.AioRpcError as error:
            return None if _connected(error) else _details(error)
        return None

    async def final(self, timeout: float) -> tuple[Cause, str] | None:
        for channel in await self._addresses():
            details = await self._ask(channel, timeout)
            if details is not None:
                cause = cause_of(details, self._target, self._security)
                if cause.final:
                    return cause, details
        return None

    async def _addresses(self) -> list[grpc.aio.Channel]:
        if self._per_address is None:
            self._per_address = []
            found = _host_port(self._target)
            if found is not None:
                loop = asyncio.get_running_loop()
                try:
                    infos = await loop.getaddrinfo(*found, type=socket.SOCK_STREAM)
                except (OSError, UnicodeError):
                    infos = []
                targets = _distinct(list(infos), found[1])
                if len(targets) > 1:
                    options = _probe_options(self._target, self._security)
                    self._per_address = [aio_channel(t, self._security, options) for t in targets]
        return self._per_address

    async def close(self) -> None:
        for channel in self._per_address or []:
            await channel.close()


async def connect_async(
    channel: grpc.aio.Channel,
    target: str,
    connect_timeout: float | None,
    security: ChannelSecurity | None,
) -> None:
    """:func:`connect_sync` for an asyncio channel."""
    if connect_timeout is None:
        return
    deadline = time.monotonic() + connect_timeout
    probes = _AsyncProbes(channel, target, security)
    # the last reason gRPC gave: a probe that met an attempt still under way (a loaded host)
    # has none, and the reason an earlier attempt ended with is the one to tell
    heard: tuple[Cause, str] | None = None
    try:
        while True:
            details = await probes.probe(max(deadline - time.monotonic(), 0.001))
            if details is None:
                return
            cause = cause_of(details, target, security)
            if not cause.final:  # another of its addresses may have refused this client
                cause, details = await probes.final(_POLL * 4) or (cause, details)
            heard = (cause, details) if cause.answered else heard
            left = deadline - time.monotonic()
            if cause.final or left <= 0:
                told, why = heard or (cause, details)
                raise _unavailable(target, connect_timeout, told, why) from None
            await asyncio.sleep(min(_POLL, left))
    finally:
        await probes.close()
