"""TLS, mutual TLS and bearer-token authentication of the gRPC service, both ends.

Why a module of its own: the server (:func:`orderer.service.server.start_server`) and every client
(:mod:`orderer.client`, hence ``evb send/tail/stats``, the operator and the Spark job) must agree
on one set of rules, and the rules are security rules: kept in one short file that can be read
in one sitting.

The rules:

- **TLS** is on when the server has a certificate and a key (PEM files). It then listens with
  ``grpc.ssl_server_credentials`` only: a plaintext client fails the handshake, nothing else.
- **Mutual TLS**: with a client CA file as well, the server requires a client certificate and
  verifies it against that CA; a client without one, or with one from another CA, fails the
  handshake.
- **Bearer token**: with a token (or a token file), every call must carry
  ``authorization: Bearer <token>`` or ends ``UNAUTHENTICATED`` before its handler runs, so
  nothing of it is accepted. The token is compared in constant time. A token needs TLS on both
  ends: it must never travel in clear (gRPC itself refuses call credentials on a plaintext
  channel). **Health checking stays open**: the kubelet's gRPC probes carry no token, and
  ``Health/Check`` tells nothing but SERVING/NOT_SERVING. Reflection is behind the token.

Bad settings (a missing file, a key without a certificate, a token without TLS, a file that is
not PEM) raise :class:`~orderer.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from orderer.errors import ConfigError

__all__ = [
    "ENV_TLS_CA",
    "ENV_TLS_CERT",
    "ENV_TLS_KEY",
    "ENV_TOKEN",
    "ENV_TOKEN_FILE",
    "OPEN_METHODS",
    "ChannelSecurity",
    "ServerSecurity",
    "TokenInterceptor",
    "aio_channel",
    "sync_channel",
]

ENV_TLS_CA = "EVB_TLS_CA"
"""Client side: PEM file of the CA that signed the server's certificate (turns TLS on)."""
ENV_TLS_CERT = "EVB_TLS_CERT"
"""Client side: PEM file of the client certificate (mutual TLS)."""
ENV_TLS_KEY = "EVB_TLS_KEY"
"""Client side: PEM file of the client certificate's key (mutual TLS)."""
ENV_TOKEN = "EVB_TOKEN"
"""Both sides: the bearer token itself."""
ENV_TOKEN_FILE = "EVB_TOKEN_FILE"
"""Both sides: a file holding the bearer token (surrounding whitespace is ignored)."""

OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
"""Methods callable without the token: the kubelet's gRPC probes cannot send one."""


def _read(setting: str, path: Path | str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(setting, str(path), f"cannot be read ({error.strerror})") from None


def _pem(setting: str, path: Path | str, marker: bytes) -> bytes:
    data = _read(setting, path)
    if b"-----BEGIN " not in data or marker not in data:
        raise ConfigError(setting, str(path), "is not a PEM file of the expected kind")
    return data


def read_token(setting: str, path: Path | str) -> str:
    """The token in a file, without surrounding whitespace (a trailing newline is common)."""
    token = _read(setting, path).decode("utf-8", errors="replace").strip()
    if not token:
        raise ConfigError(setting, str(path), "holds no token")
    return token


def _check_token(setting: str, token: str) -> str:
    if not token or not token.isprintable() or " " in token:
        raise ConfigError(setting, "<hidden>", "must be a non-empty printable word")
    return token


# ---------------------------------------------------------------------------------- server


@dataclass(frozen=True)
class ServerSecurity:
    """What the server enforces, loaded from the files of a ``ServiceConfig``."""

    credentials: grpc.ServerCredentials | None
    """TLS credentials to listen with; None: plaintext."""
    token: str | None = field(default=None, repr=False)
    """The bearer token every call (but health checking) must carry; None: no token."""
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
        """Read the files once, at start; every problem is a ``ConfigError`` naming the
        setting."""
        if (tls_cert is None) != (tls_key is None):
            missing = "tls_key" if tls_key is None else "tls_cert"
            raise ConfigError(missing, None, "tls_cert and tls_key go together")
        if tls_client_ca is not None and tls_cert is None:
            raise ConfigError("tls_client_ca", str(tls_client_ca), "needs tls_cert and tls_key")
        if token is not None and token_file is not None:
            raise ConfigError("token", "<hidden>", "give token or token_file, not both")
        secret = token if token_file is None else read_token("token_file", token_file)
        if secret is not None:
            _check_token("token_file" if token is None else "token", secret)
            if tls_cert is None:
                raise ConfigError(
                    "token_file" if token is None else "token",
                    "<hidden>",
                    "needs TLS (tls_cert, tls_key): a bearer token must not travel in clear",
                )
        credentials = None
        if tls_cert is not None and tls_key is not None:
            chain = _pem("tls_cert", tls_cert, b"CERTIFICATE")
            key = _pem("tls_key", tls_key, b"PRIVATE KEY")
            roots = None
            if tls_client_ca is not None:
                roots = _pem("tls_client_ca", tls_client_ca, b"CERTIFICATE")
            credentials = grpc.ssl_server_credentials(
                [(key, chain)],
                root_certificates=roots,
                require_client_auth=roots is not None,
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
    """Every call but :data:`OPEN_METHODS` must carry ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

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
        if len(given) != 1 or not hmac.compare_digest(value, self._expected):
            return _denied(handler, "the bearer token is not valid for this orderer")
        return handler


# ---------------------------------------------------------------------------------- client


@dataclass(frozen=True)
class ChannelSecurity:
    """How a client connects: plaintext (the default), TLS, mutual TLS, with a bearer token.

    ``ChannelSecurity()`` is plaintext. :meth:`from_files` reads PEM files (CLI flags, mounted
    Secrets), :meth:`from_env` the ``EVB_TLS_*``/``EVB_TOKEN*`` variables (the Spark job's pods),
    and the fields take PEM bytes directly (the operator reads them from Secrets).
    """

    tls: bool = False
    """Connect with TLS (implied by any of the other fields but the token)."""
    root_certificates: bytes | None = field(default=None, repr=False)
    """PEM of the CA(s) the server's certificate must chain to; None: the system's roots."""
    certificate_chain: bytes | None = field(default=None, repr=False)
    """PEM of the client certificate (mutual TLS)."""
    private_key: bytes | None = field(default=None, repr=False)
    """PEM of the client certificate's key."""
    token: str | None = field(default=None, repr=False)
    """Bearer token sent with every call (TLS only)."""
    server_name: str | None = None
    """Name to check the server's certificate against instead of the target's host."""

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ConfigError("tls_cert", None, "a client certificate and its key go together")
        uses_tls = self.tls or any(
            value is not None
            for value in (self.root_certificates, self.certificate_chain, self.server_name)
        )
        object.__setattr__(self, "tls", uses_tls)
        if self.token is not None:
            _check_token("token", self.token)
            if not uses_tls:
                raise ConfigError(
                    "token", "<hidden>", "needs TLS (--tls-ca): a bearer token must not travel"
                    " in clear"
                )

    @classmethod
    def from_files(
        cls,
        *,
        ca: Path | str | None = None,
        cert: Path | str | None = None,
        key: Path | str | None = None,
        token: str | None = None,
        token_file: Path | str | None = None,
        tls: bool = False,
    ) -> ChannelSecurity:
        if token is not None and token_file is not None:
            raise ConfigError("token", "<hidden>", "give a token or a token file, not both")
        if token_file is not None:
            token = read_token("token_file", token_file)
        return cls(
            tls=tls,
            root_certificates=None if ca is None else _pem("tls_ca", ca, b"CERTIFICATE"),
            certificate_chain=None if cert is None else _pem("tls_cert", cert, b"CERTIFICATE"),
            private_key=None if key is None else _pem("tls_key", key, b"PRIVATE KEY"),
            token=token,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ChannelSecurity:
        """From ``EVB_TLS_CA``, ``EVB_TLS_CERT``, ``EVB_TLS_KEY``, ``EVB_TOKEN`` or
        ``EVB_TOKEN_FILE`` (unset or empty: not used)."""
        env = os.environ if environ is None else environ
        return cls.from_files(
            ca=env.get(ENV_TLS_CA) or None,
            cert=env.get(ENV_TLS_CERT) or None,
            key=env.get(ENV_TLS_KEY) or None,
            token=env.get(ENV_TOKEN) or None,
            token_file=env.get(ENV_TOKEN_FILE) or None,
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials, or None for plaintext."""
        if not self.tls:
            return None
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )
        if self.token is not None:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(self.token)
            )
        return credentials

    def options(self) -> list[tuple[str, str]]:
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


PLAINTEXT = ChannelSecurity()


def sync_channel(
    target: str, security: ChannelSecurity | None, options: list[tuple[str, Any]]
) -> grpc.Channel:
    """The one place a blocking channel is made."""
    security = security or PLAINTEXT
    credentials = security.credentials()
    options = [*options, *security.options()]
    if credentials is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, credentials, options=options)


def aio_channel(
    target: str, security: ChannelSecurity | None, options: list[tuple[str, Any]]
) -> grpc.aio.Channel:
    """The one place an asyncio channel is made."""
    security = security or PLAINTEXT
    credentials = security.credentials()
    options = [*options, *security.options()]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)
