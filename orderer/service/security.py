"""What the server enforces: TLS credentials, client certificates, the bearer token.

The rules both ends share (file reading, token checks, the methods left open for health
probes) live in :mod:`orderer.wire.security`; this module holds only the server's half.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from orderer.errors import ConfigError
from orderer.wire.security import OPEN_METHODS, check_token, read_pem, read_token

__all__ = ["ServerSecurity", "TokenInterceptor"]


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
            check_token("token_file" if token is None else "token", secret)
            if tls_cert is None:
                raise ConfigError(
                    "token_file" if token is None else "token",
                    "<hidden>",
                    "needs TLS (tls_cert, tls_key): a bearer token must not travel in clear",
                )
        credentials = None
        if tls_cert is not None and tls_key is not None:
            chain = read_pem("tls_cert", tls_cert, b"CERTIFICATE")
            key = read_pem("tls_key", tls_key, b"PRIVATE KEY")
            roots = None
            if tls_client_ca is not None:
                roots = read_pem("tls_client_ca", tls_client_ca, b"CERTIFICATE")
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
