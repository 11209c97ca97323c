"""Certificates, client CA and token rotated under a running server (real grpc.aio server on
loopback): the files are swapped the way the kubelet updates a mounted Secret
(tests/certs.py ``MountedSecret``); a new connection gets the new files, an established one
keeps going, and a replacement that cannot be used keeps the old files with one warning."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orderer import EvbError
from orderer.client import AsyncSourceClient, ChannelSecurity, get_stats_async
from orderer.errors import ServiceUnavailable
from orderer.service.server import RunningServer
from tests.certs import MountedSecret, make_pki
from tests.service.harness import run, serving
from tests.service.test_security import CONFIG, REFUSED

TOKEN = "first-token-for-tests"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"), TOKEN)


def _der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text())


def _served_certificate(port: int) -> bytes:
    """The certificate a NEW connection is served (DER), read with a plain TLS handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        served = tls.getpeercert(binary_form=True)
    assert served is not None
    return served


async def _served(running: RunningServer) -> bytes:
    return await asyncio.to_thread(_served_certificate, running.port)


async def _check(channel: grpc.aio.Channel) -> None:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=10
    )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def _refused(target: str, security: ChannelSecurity) -> None:
    with pytest.raises(ServiceUnavailable):
        await get_stats_async(
            target, timeout=REFUSED, connect_timeout=REFUSED, security=security
        )


def _received(running: RunningServer) -> int:
    return int(running.service.orderer.counters()["totals"]["received"])


def test_new_connections_get_the_renewed_certificate_while_established_ones_keep_going(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    mount = MountedSecret(
        tmp_path / "tls", {"tls.crt": pki["server_cert"], "tls.key": pki["server_key"]}
    )
    old_ca = ChannelSecurity.from_files(ca=pki["ca"])
    new_ca = ChannelSecurity.from_files(ca=pki["other_ca"])

    async def body() -> None:
        settings = {"tls_cert": mount.path("tls.crt"), "tls_key": mount.path("tls.key")}
        async with serving(tmp_path / "data", CONFIG, **settings) as running:
            target = f"127.0.0.1:{running.port}"
            assert await _served(running) == _der(pki["server_cert"])
            await _refused(target, new_ca)
            credentials = grpc.ssl_channel_credentials(pki["ca"].read_bytes())
            async with (
                grpc.aio.secure_channel(target, credentials) as established,
                AsyncSourceClient(
                    target, sources=[1], security=old_ca, reconnect_timeout=REFUSED
                ) as source,
            ):
                await _check(established)
                await source.send_batch(1, np.arange(100, dtype=np.uint64))
                await source.wait_acked(timeout=30)

                mount.update(
                    {"tls.crt": pki["other_server_cert"], "tls.key": pki["other_server_key"]}
                )
                assert await _served(running) == _der(pki["other_server_cert"])
                await get_stats_async(target, timeout=10, security=new_ca)
                await _refused(target, old_ca)
                # both trust only the old CA: a reconnection would fail, so they kept theirs
                await _check(established)
                await source.send_batch(1, np.arange(100, 200, dtype=np.uint64))
                await source.wait_acked(timeout=30)
            assert _received(running) == 200

    run(body())


def test_a_replacement_that_cannot_be_used_keeps_the_certificate_and_warns_once(
    tmp_path: Path, pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    good = {"tls.crt": pki["server_cert"], "tls.key": pki["server_key"]}
    mount = MountedSecret(tmp_path / "tls", good)
    chain = pki["other_server_cert"].read_bytes()
    bad_versions = [
        # a renewed certificate with the old key: not a pair
        ({"tls.crt": pki["other_server_cert"], "tls.key": pki["server_key"]}, "tls.key"),
        # a certificate written half-way
        ({"tls.crt": chain[: len(chain) // 2], "tls.key": pki["other_server_key"]}, "tls.crt"),
        ({"tls.crt": pki["other_server_cert"], "tls.key": b""}, "tls.key"),
    ]

    async def body() -> None:
        settings = {"tls_cert": mount.path("tls.crt"), "tls_key": mount.path("tls.key")}
        async with serving(tmp_path / "data", CONFIG, **settings) as running:
            target = f"127.0.0.1:{running.port}"
            for files, named in bad_versions:
                caplog.clear()
                mount.update(files)
                for _ in range(3):  # gRPC asks on every new connection
                    assert await _served(running) == _der(pki["server_cert"])
                await get_stats_async(
                    target, timeout=10, security=ChannelSecurity.from_files(ca=pki["ca"])
                )
                warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
                assert len(warnings) == 1, (named, [r.getMessage() for r in warnings])
                assert str(mount.path(named)) in warnings[0].getMessage()
            mount.update({"tls.crt": pki["other_server_cert"], "tls.key": pki["other_server_key"]})
            assert await _served(running) == _der(pki["other_server_cert"])

    with caplog.at_level(logging.INFO, logger="evb.service"):
        run(body())
    assert any("reloaded the TLS certificate" in r.getMessage() for r in caplog.records)


def test_the_client_ca_rotates_for_mutual_tls(tmp_path: Path, pki: dict[str, Path]) -> None:
    mount = MountedSecret(
        tmp_path / "tls",
        {"tls.crt": pki["server_cert"], "tls.key": pki["server_key"], "ca.crt": pki["ca"]},
    )
    ours = ChannelSecurity.from_files(
        ca=pki["ca"], cert=pki["client_cert"], key=pki["client_key"]
    )
    of_new_ca = ChannelSecurity.from_files(
        ca=pki["ca"], cert=pki["stranger_cert"], key=pki["stranger_key"]
    )

    async def body() -> None:
        settings = {
            "tls_cert": mount.path("tls.crt"),
            "tls_key": mount.path("tls.key"),
            "tls_client_ca": mount.path("ca.crt"),
        }
        async with serving(tmp_path / "data", CONFIG, **settings) as running:
            target = f"127.0.0.1:{running.port}"
            await get_stats_async(target, timeout=10, security=ours)
            await _refused(target, of_new_ca)
            mount.update(
                {
                    "tls.crt": pki["server_cert"],
                    "tls.key": pki["server_key"],
                    "ca.crt": pki["other_ca"],
                }
            )
            await get_stats_async(target, timeout=10, security=of_new_ca)
            await _refused(target, ours)

    run(body())


def test_the_token_file_rotates_and_an_empty_one_keeps_the_token(
    tmp_path: Path, pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    mount = MountedSecret(tmp_path / "auth", {"token": pki["token_file"]})

    def with_token(token: str) -> ChannelSecurity:
        return ChannelSecurity.from_files(ca=pki["ca"], token=token)

    async def body() -> None:
        settings = {
            "tls_cert": pki["server_cert"],
            "tls_key": pki["server_key"],
            "token_file": mount.path("token"),
        }
        async with serving(tmp_path / "data", CONFIG, **settings) as running:
            target = f"127.0.0.1:{running.port}"
            await get_stats_async(target, timeout=10, security=with_token(TOKEN))
            mount.update({"token": b"second-token\n"})
            await get_stats_async(target, timeout=10, security=with_token("second-token"))
            with pytest.raises(EvbError, match="UNAUTHENTICATED"):
                await get_stats_async(target, timeout=10, security=with_token(TOKEN))
            caplog.clear()
            mount.update({"token": b"\n"})
            for _ in range(3):
                await get_stats_async(target, timeout=10, security=with_token("second-token"))
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1, [r.getMessage() for r in warnings]
            assert str(mount.path("token")) in warnings[0].getMessage()
            assert "second-token" not in warnings[0].getMessage()

    with caplog.at_level(logging.INFO, logger="evb.service"):
        run(body())
