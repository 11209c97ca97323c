"""How the operator itself connects to an orderer: TLS, mutual TLS, bearer token from Secrets.

Why the operator reads Secrets: it calls ``GetStats``, ``Configure`` and ``EndRun`` on every
orderer, and under ``spec.tls``/``spec.auth`` those calls need the CA (``ca.crt`` of the
orderer's Secret), the client certificate (``spec.tls.clientSecretName``) and the token
(``spec.auth.tokenSecretRef``). Mounting them into the operator pod cannot work (they are per
EventBuilder, in other namespaces), so the handlers ``get`` exactly the Secrets a spec names
(RBAC: ``get`` on secrets, no list or watch) and this module turns their data into a
:class:`orderer.client.ChannelSecurity`.

Pure: the handlers read the Secrets (:func:`secret_names` says which) and pass their decoded
data in.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from evb_operator.validation import ValidSpec
from orderer.client import ChannelSecurity
from orderer.errors import ConfigError, EvbError

__all__ = ["SecretProblem", "client_security", "decode_secret", "secret_names"]


class SecretProblem(EvbError):
    """A Secret the spec names is missing, or lacks a key: retried (it may be created later)."""


def secret_names(valid: ValidSpec) -> list[str]:
    """The Secrets the operator needs to reach this orderer (none without tls/auth)."""
    names: list[str] = []
    tls = valid.tls
    if tls is not None:
        names.append(tls.secret_name)
        if tls.mutual:
            names.append(tls.client_secret)
    if valid.auth is not None:
        names.append(valid.auth.token_secret_ref.name)
    return list(dict.fromkeys(names))


def decode_secret(secret: Mapping[str, Any] | None) -> dict[str, bytes] | None:
    """A Secret object's ``data`` (base64) as bytes; None for a missing Secret."""
    if secret is None:
        return None
    return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


def _key(secrets: Mapping[str, Mapping[str, bytes] | None], name: str, key: str) -> bytes:
    data = secrets.get(name)
    if data is None:
        raise SecretProblem(f"Secret {name} does not exist")
    if not data.get(key):
        raise SecretProblem(f"Secret {name} has no key {key}")
    return data[key]


def client_security(
    valid: ValidSpec, secrets: Mapping[str, Mapping[str, bytes] | None]
) -> ChannelSecurity | None:
    """How to connect to this EventBuilder's orderer; None: plaintext."""
    tls = valid.tls
    if tls is None:
        return None
    root = _key(secrets, tls.secret_name, "ca.crt")
    cert = key = None
    if tls.mutual:
        cert = _key(secrets, tls.client_secret, "tls.crt")
        key = _key(secrets, tls.client_secret, "tls.key")
    token = None
    if valid.auth is not None:
        ref = valid.auth.token_secret_ref
        token = _key(secrets, ref.name, ref.key).decode("utf-8", errors="replace").strip()
    try:
        return ChannelSecurity(
            root_certificates=root, certificate_chain=cert, private_key=key, token=token
        )
    except ConfigError as error:
        raise SecretProblem(f"the Secrets of spec.tls/spec.auth: {error}") from None
