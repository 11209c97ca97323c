"""What the server enforces: TLS credentials, client certificates, the bearer token.

The rules both ends share (file reading, token checks, the methods left open for health
probes) live in :mod:`orderer.wire.security`; this module holds only the server's half, and
the reloading of its files: cert-manager renews the Secret and the kubelet swaps the mounted
files under the running pod (a ``..data`` symlink replaced atomically), so the certificate, its
key, the client CA and the token file are read again when they change on disk, without a
restart and without touching established connections (:class:`Reloading`).
"""

from __future__ import annotations

import hmac
import logging
import os
import ssl
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc

from orderer.errors import ConfigError
from orderer.wire.security import OPEN_METHODS, check_token, read_pem, read_token

__all__ = ["Reloading", "ServerSecurity", "TokenInterceptor"]

log = logging.getLogger("evb.service")

T = TypeVar("T")

_Stamp = tuple[tuple[int, int, int, int] | None, ...]


def _stamp(paths: Sequence[Path]) -> _Stamp:
    """What tells a new version of the files without reading them: device, inode, mtime and
    size of each (``os.stat`` follows the kubelet's ``..data`` symlink, so its atomic swap shows
    as a new inode; an in-place rewrite as a new mtime or size). None: the file is missing."""
    stamps: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(stamps)


class Reloading(Generic[T]):
    """A value read from files, and read again when they change on disk.

    :meth:`refresh` costs one ``stat`` per file when nothing changed: gRPC asks on every new
    connection, the token check on every call. A new version that cannot be used (half
    written, not PEM, a key that is not the certificate's) keeps the value loaded before and
    logs one warning naming the file, until the files change again; it never raises (an
    exception in gRPC's certificate fetcher would fail the handshake). A version that changes
    while it is read is left for the next caller to read once settled."""

    def __init__(self, what: str, paths: Sequence[Path], read: Callable[[], T]) -> None:
        self._what = what
        self._paths = tuple(paths)
        self._read = read
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self.value: T = read()
        """The value in use. At start every problem is raised: a ``ConfigError`` naming the
        setting."""
        self._refused: _Stamp | None = None

    def refresh(self) -> bool:
        """Take a new version of the files if there is a usable one; True when taken."""
        stamp = _stamp(self._paths)
        if stamp == self._stamp or stamp == self._refused:
            return False
        with self._lock:  # gRPC may ask from several threads; one reads
            if stamp == self._stamp:
                return False
            try:
                value = self._read()
            except Exception as error:  # whatever it is, the old value stays
                if _stamp(self._paths) == stamp:  # settled, not being written: warn once
                    self._refused = stamp
                    log.warning(
                        "new %s not used, keeping the one loaded before: %s", self._what, error
                    )
                return False
            if _stamp(self._paths) != stamp:
                return False
            self.value, self._stamp = value, stamp
        log.info("reloaded the %s from %s", self._what, ", ".join(map(str, self._paths)))
        return True

    def current(self) -> T:
        """The value, refreshed first."""
        self.refresh()
        return self.value


def _no_password() -> bytes:
    """Never prompt on a terminal for an encrypted key (gRPC cannot use one anyway)."""
    return b""


@dataclass(frozen=True)
class _TlsFiles:
    """The server's certificate chain, its key and the optional client CA, as files."""

    cert: Path
    key: Path
    client_ca: Path | None

    def read(self) -> grpc.ServerCertificateConfiguration:
        """Read and check the files: each certificate parses and the key is the certificate's
        (checked with :mod:`ssl` here, since gRPC itself would only fail the next handshake)."""
        chain = read_pem("tls_cert", self.cert, b"CERTIFICATE")
        key = read_pem("tls_key", self.key, b"PRIVATE KEY")
        roots = None
        if self.client_ca is not None:
            roots = read_pem("tls_client_ca", self.client_ca, b"CERTIFICATE")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        for setting, path, pem in (
            ("tls_cert", self.cert, chain),
            ("tls_client_ca", self.client_ca, roots),
        ):
            if pem is None:
                continue
            try:
                context.load_verify_locations(cadata=pem.decode("ascii"))
            except (ssl.SSLError, ValueError) as error:  # UnicodeDecodeError is a ValueError
                raise ConfigError(
                    setting, str(path), f"holds no valid certificate ({error})"
                ) from None
        try:
            context.load_cert_chain(self.cert, self.key, password=_no_password)
        except ssl.SSLError as error:
            raise ConfigError(
                "tls_key",
                str(self.key),
                f"is not the unencrypted key of the certificate in {self.cert} ({error})",
            ) from None
        return grpc.ssl_server_certificate_configuration([(key, chain)], roots)


@dataclass(frozen=True)
class ServerSecurity:
    """What the server enforces, loaded from the files of a ``ServiceConfig``."""

    credentials: grpc.ServerCredentials | None
    """TLS credentials to listen with (dynamic: the files are read again when they change);
    None: plaintext."""
    token: str | Reloading[str] | None = field(default=None, repr=False)
    """The bearer token every call (but health checking) must carry (from ``token_file``: read
    again when it changes); None: no token."""
    mutual: bool = False
    """Client certificates are required and verified."""

    @classmethod
    def load(
        cls,
        *,
        tls_cert: Path | None,
        tls_key: Path | None,
        tls_client_ca: Path | None,
        token: str | None,
        token_file: Path | None,
    ) -> ServerSecurity:
        """Read the files at start, where every problem is a ``ConfigError`` naming the
        setting; later versions of the files are taken as they come (:class:`Reloading`)."""
        if (tls_cert is None) != (tls_key is None):
            missing = "tls_key" if tls_key is None else "tls_cert"
            raise ConfigError(missing, None, "tls_cert and tls_key go together")
        if tls_client_ca is not None and tls_cert is None:
            raise ConfigError("tls_client_ca", str(tls_client_ca), "needs tls_cert and tls_key")
        if token is not None and token_file is not None:
            raise ConfigError("token", "<hidden>", "give token or token_file, not both")
        secret: str | Reloading[str] | None = token
        if token_file is not None:
            path = token_file
            secret = Reloading(
                "bearer token",
                [path],
                lambda: check_token("token_file", read_token("token_file", path)),
            )
        elif token is not None:
            check_token("token", token)
        if secret is not None and tls_cert is None:
            raise ConfigError(
                "token_file" if token is None else "token",
                "<hidden>",
                "needs TLS (tls_cert, tls_key): a bearer token must not travel in clear",
            )
        credentials = None
        if tls_cert is not None and tls_key is not None:
            files = _TlsFiles(tls_cert, tls_key, tls_client_ca)
            tls = Reloading(
                "TLS certificate",
                [p for p in (tls_cert, tls_key, tls_client_ca) if p is not None],
                files.read,
            )

            def fetch() -> grpc.ServerCertificateConfiguration | None:
                """Called by gRPC before each new handshake; None: keep the current one."""
                return tls.value if tls.refresh() else None

            credentials = grpc.dynamic_ssl_server_credentials(
                tls.value, fetch, require_client_authentication=tls_client_ca is not None
            )
        return cls(credentials=credentials, token=secret, mutual=tls_client_ca is not None)

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [] if self.token is None else [TokenInterceptor(self.token)]


def _denied(
    handler: grpc.RpcMethodHandler, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that ends the call UNAUTHENTICATED without
    reading a request."""

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kinds: Mapping[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler]] = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(handler.request_streaming, handler.response_streaming)]
    return make(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Every call but :data:`OPEN_METHODS` must carry ``authorization: Bearer <token>``: the
    token in use when the call starts (a token file is read again when it changes; calls
    already running are not affected)."""

    def __init__(self, token: str | Reloading[str]) -> None:
        self._token = token

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method in OPEN_METHODS:
            return handler
        given = [
            value
            for key, value in (handler_call_details.invocation_metadata or ())
            if key == "authorization"
        ]
        if not given:
            return _denied(handler, "no bearer token: this orderer requires one (--token-file)")
        value = given[0].encode() if isinstance(given[0], str) else bytes(given[0])
        token = self._token if isinstance(self._token, str) else self._token.current()
        if len(given) != 1 or not hmac.compare_digest(value, f"Bearer {token}".encode()):
            return _denied(handler, "the bearer token is not valid for this orderer")
        return handler
