"""TLS, mutual TLS and bearer-token authentication of the gRPC service: the rules both ends share.

Why a module of its own: the server (:mod:`orderer.service.security` enforces them) and every client
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

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a channel is made: the evb command's start never loads gRPC
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
    "aio_channel",
    "check_token",
    "read_pem",
    "read_token",
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


def read_pem(setting: str, path: Path | str, marker: bytes) -> bytes:
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


def check_token(setting: str, token: str) -> str:
    if not token or not token.isprintable() or " " in token:
        raise ConfigError(setting, "<hidden>", "must be a non-empty printable word")
    return token


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
            check_token("token", self.token)
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
            root_certificates=None if ca is None else read_pem("tls_ca", ca, b"CERTIFICATE"),
            certificate_chain=None if cert is None else read_pem("tls_cert", cert, b"CERTIFICATE"),
            private_key=None if key is None else read_pem("tls_key", key, b"PRIVATE KEY"),
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
        import grpc

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
    import grpc

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
    import grpc

    security = security or PLAINTEXT
    credentials = security.credentials()
    options = [*options, *security.options()]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)
