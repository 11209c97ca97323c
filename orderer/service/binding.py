"""The service's addresses: a port another process serves is refused, and a failed bind says why.

Why this module: gRPC sets ``SO_REUSEPORT`` on its listening sockets by default, so a second
``evb serve`` on a port already served used to start, and the kernel then split the clients
between the two servers: one run silently split in two. The server is built with
``grpc.so_reuseport`` 0 (:data:`GRPC_SERVER_OPTIONS`), so such a bind fails; but gRPC then says
only "Failed to bind" (the cause goes to its own log), and for a name that resolves to several
addresses (``localhost``: 127.0.0.1 and ::1) it binds those that are free and succeeds. So each
address is first bound here by a plain socket (``SO_REUSEADDR`` as gRPC and the metrics endpoint
do, never ``SO_REUSEPORT``), before anything is opened or written: the error names the flag,
the address and the cause (in use, not an address of this host, not resolved, privileged).

A check, then the real bind: a process that takes the port in between still makes the real bind
fail, and :func:`listen_failed` / :func:`metrics_failed` word that.
"""

from __future__ import annotations

import errno
import os
import socket

from orderer.errors import ConfigError

__all__ = [
    "GRPC_SERVER_OPTIONS",
    "LISTEN_FLAG",
    "METRICS_FLAG",
    "check_listen",
    "check_metrics",
    "listen_failed",
    "metrics_failed",
]

LISTEN_FLAG = "--listen"
METRICS_FLAG = "--metrics-port"

GRPC_SERVER_OPTIONS: list[tuple[str, int]] = [("grpc.so_reuseport", 0)]
"""A port already served is refused instead of shared with the other server."""

_OTHER_FORMS = ("unix:", "unix-abstract:", "vsock:")
"""Addresses gRPC binds that are not ``host:port``: left to gRPC."""


def _why(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"the host name is not resolved ({error.strerror})"
    if error.errno == errno.EADDRINUSE:
        return "address already in use"
    if error.errno == errno.EADDRNOTAVAIL:
        return "not an address of this host"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return error.strerror or str(error)


def _parse_listen(listen: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; None for gRPC's other forms."""
    if listen.startswith(_OTHER_FORMS):
        if listen.startswith("unix:"):
            path = listen.removeprefix("unix:").removeprefix("//")
            if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise ConfigError(LISTEN_FLAG, listen, "the socket's directory does not exist")
            if _unix_socket_served(path):
                # gRPC would unlink the other server's socket and take its clients from now on
                raise ConfigError(LISTEN_FLAG, listen, "a server listens on this socket already")
        return None
    host, colon, port = listen.rpartition(":")
    if not colon or not host:
        raise ConfigError(
            LISTEN_FLAG, listen, "must be HOST:PORT, e.g. 127.0.0.1:50051 or [::]:50051"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(LISTEN_FLAG, listen, "an IPv6 address goes in brackets: [::1]:50051")
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(LISTEN_FLAG, listen, "the port must be a number from 0 to 65535")
    return host, int(port)


def _unix_socket_served(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(path) == 0


def _probe(host: str, port: int) -> tuple[list[OSError], OSError | None]:
    """Bind each address ``host`` resolves to, then let go: ``(errors, fatal)``. ``fatal`` is
    the first address another socket holds (or a privileged port); ``errors`` are the rest,
    which gRPC also meets but tolerates while some address binds (no IPv6 on this host)."""
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        return [error], error
    addresses = [(info[0], info[4]) for info in infos]
    if host == "::":  # gRPC falls back to 0.0.0.0 when the IPv6 wildcard cannot be bound
        addresses.append((socket.AF_INET, ("0.0.0.0", port)))
    errors: list[OSError] = []
    for family, address in addresses:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return errors, error
            errors.append(error)
    if len(errors) == len(addresses):  # nothing binds: gRPC would fail too
        return errors, errors[0]
    return errors, None


def check_listen(listen: str) -> list[OSError]:
    """Refuse ``listen`` (:class:`ConfigError` naming ``--listen``) if it is malformed, or if
    an address it names is served already or cannot be bound on this host. Returns what went
    wrong on the addresses gRPC will skip, for :func:`bind_failed`."""
    parsed = _parse_listen(listen)
    if parsed is None:
        return []
    errors, fatal = _probe(*parsed)
    if fatal is not None:
        why = _why(fatal)
        if fatal.errno == errno.EADDRINUSE:
            why += " (another evb serve?)"
        raise ConfigError(LISTEN_FLAG, listen, why)
    return errors


def check_metrics(port: int, address: str, listen: str) -> None:
    """Refuse a metrics port (:class:`ConfigError` naming ``--metrics-port``) that is served
    already on ``address``, cannot be bound there, or is the gRPC port of ``listen`` (port 0,
    any free port, always can)."""
    if port == 0:
        return
    parsed = _parse_listen(listen)
    if parsed is not None and parsed[1] == port:
        raise ConfigError(METRICS_FLAG, port, f"is the port of {LISTEN_FLAG} {listen} too")
    _, fatal = _probe(address, port)
    if fatal is not None:
        raise metrics_failed(port, address, fatal)


def listen_failed(listen: str, skipped: list[OSError]) -> ConfigError:
    """The error for a gRPC bind that failed although :func:`check_listen` passed: checked
    again, the address is usually in use now (another process took it in between); else the
    cause is one of the addresses gRPC skipped, or, for a form not checked here, in gRPC's own
    log line."""
    try:
        check_listen(listen)
    except ConfigError as error:
        return error
    if skipped:
        return ConfigError(LISTEN_FLAG, listen, f"cannot be bound: {_why(skipped[0])}")
    return ConfigError(LISTEN_FLAG, listen, "cannot be bound (gRPC's log line above says why)")


def metrics_failed(port: int, address: str, error: OSError) -> ConfigError:
    """The error for a metrics endpoint that could not bind although :func:`check_metrics`
    passed (the port was taken in between)."""
    return ConfigError(METRICS_FLAG, port, f"{address}:{port}: {_why(error)}")
