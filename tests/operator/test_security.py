"""``evb_operator/security.py``: the operator's own way to the orderer from the Secrets a spec
names. With real certificates (tests/certs.py) in Secret form, the ChannelSecurity it builds
reaches a real TLS server that requires a client certificate and a token; a missing Secret or
key is a SecretProblem naming it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from evb_operator import security, validation
from orderer import OrdererConfig
from orderer.client import get_stats_async
from tests.certs import CertificateAuthority
from tests.service.harness import run, serving

SPEC = {
    "tls": {"secretName": "run-tls", "mutual": True, "clientSecretName": "run-client"},
    "auth": {"tokenSecretRef": {"name": "run-token", "key": "daq"}},
}


def _as_secret(**files: bytes) -> dict[str, object]:
    return {"data": {k: base64.b64encode(v).decode() for k, v in files.items()}}


def test_the_operator_reaches_a_mutual_tls_server_with_a_token(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    server, client = ca.issue("server", server=True), ca.issue("client", server=False)
    token = tmp_path / "token"
    token.write_text("operator-token\n")
    valid = validation.validate(SPEC)
    assert security.secret_names(valid) == ["run-tls", "run-client", "run-token"]
    secrets = {
        "run-tls": security.decode_secret(
            _as_secret(
                **{
                    "tls.crt": server.cert.read_bytes(),
                    "tls.key": server.key.read_bytes(),
                    "ca.crt": ca.cert.read_bytes(),
                }
            )
        ),
        "run-client": security.decode_secret(
            _as_secret(**{"tls.crt": client.cert.read_bytes(), "tls.key": client.key.read_bytes()})
        ),
        "run-token": security.decode_secret(_as_secret(daq=b"operator-token\n")),
    }
    reach = security.client_security(valid, secrets)
    assert reach is not None and reach.tls and reach.token == "operator-token"

    async def body() -> None:
        settings = {
            "tls_cert": server.cert,
            "tls_key": server.key,
            "tls_client_ca": ca.cert,
            "token_file": token,
        }
        async with serving(tmp_path / "data", OrdererConfig(), **settings) as running:
            stats = await get_stats_async(f"127.0.0.1:{running.port}", security=reach)
            assert stats.next_offset == 0

    run(body())

    with pytest.raises(security.SecretProblem, match="run-client does not exist"):
        security.client_security(valid, {**secrets, "run-client": None})
    with pytest.raises(security.SecretProblem, match="run-token has no key daq"):
        security.client_security(valid, {**secrets, "run-token": {"token": b"x"}})
    assert security.client_security(validation.validate({}), {}) is None
