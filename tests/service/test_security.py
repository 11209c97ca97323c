"""TLS, mutual TLS and the bearer token against a real grpc.aio server on loopback, with
certificates made at test time (tests/certs.py): what is allowed works end to end (send and
subscribe), everything else is refused before any fragment is accepted."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orderer import EvbError, OrdererConfig
from orderer.client import (
    AsyncSourceClient,
    ChannelSecurity,
    end_run_async,
    get_stats_async,
    subscribe,
)
from orderer.errors import ConfigError, ServiceUnavailable
from orderer.service.security import ServerSecurity
from orderer.service.server import RunningServer
from orderer.service.settings import ServiceConfig
from tests.certs import make_pki
from tests.service.harness import run, serving

CONFIG = OrdererConfig(build_window=0.2, startup_delay=0.0, sources=(1,))
TOKEN = "s3cret-token-for-tests"
REFUSED = 3.0
"""Seconds a refused connection is given: it fails the handshake, so it never succeeds."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"), TOKEN)


def _tls(pki: dict[str, Path], **more: object) -> dict[str, object]:
    return {"tls_cert": pki["server_cert"], "tls_key": pki["server_key"], **more}


def _received(running: RunningServer) -> int:
    return int(running.service.orderer.counters()["totals"]["received"])


def _target(port: int) -> str:
    return f"127.0.0.1:{port}"  # the server certificate names 127.0.0.1 and localhost


async def _send_and_read(target: str, security: ChannelSecurity, n: int = 500) -> list[int]:
    async with AsyncSourceClient(
        target, sources=[1], batch_size=100, security=security, reconnect_timeout=10
    ) as client:
        await client.send_batch(1, np.arange(1000, 1000 + n, dtype=np.uint64))
        await client.end_source(1)
    end = await end_run_async(target, security=security)
    got: list[int] = []
    async for batch in subscribe(target, 0, until=end, security=security):
        got += batch.timestamp.tolist()
    return got


def test_tls_end_to_end_send_and_subscribe(tmp_path: Path, pki: dict[str, Path]) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG, **_tls(pki)) as running:
            security = ChannelSecurity.from_files(ca=pki["ca"])
            assert await _send_and_read(_target(running.port), security) == list(
                range(1000, 1500)
            )

    run(body())


def test_plaintext_client_is_refused_by_a_tls_server(tmp_path: Path, pki: dict[str, Path]) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG, **_tls(pki)) as running:
            target = _target(running.port)
            with pytest.raises(ServiceUnavailable):
                await get_stats_async(target, timeout=REFUSED, connect_timeout=REFUSED)
            client = AsyncSourceClient(
                target, sources=[1], reconnect_timeout=REFUSED, connect_timeout=REFUSED
            )
            with pytest.raises(ServiceUnavailable):
                async with client:
                    await client.send(1, 5)
                    await client.wait_acked(timeout=30)
            with pytest.raises(ServiceUnavailable):  # nor does TLS with a CA the server's
                await get_stats_async(  # certificate does not chain to
                    target,
                    timeout=REFUSED,
                    connect_timeout=REFUSED,
                    security=ChannelSecurity.from_files(ca=pki["other_ca"]),
                )
            assert _received(running) == 0

    run(body())


def test_mutual_tls_refuses_clients_without_a_certificate_of_its_ca(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    async def body() -> None:
        settings = _tls(pki, tls_client_ca=pki["ca"])
        async with serving(tmp_path, CONFIG, **settings) as running:
            target = _target(running.port)
            no_cert = ChannelSecurity.from_files(ca=pki["ca"])
            foreign = ChannelSecurity.from_files(
                ca=pki["ca"], cert=pki["stranger_cert"], key=pki["stranger_key"]
            )
            for security in (no_cert, foreign):
                with pytest.raises(ServiceUnavailable):
                    await get_stats_async(
                        target, timeout=REFUSED, connect_timeout=REFUSED, security=security
                    )
                client = AsyncSourceClient(
                    target,
                    sources=[1],
                    reconnect_timeout=REFUSED,
                    connect_timeout=REFUSED,
                    security=security,
                )
                with pytest.raises(ServiceUnavailable):
                    async with client:
                        await client.send(1, 5)
                        await client.wait_acked(timeout=30)
            assert _received(running) == 0
            good = ChannelSecurity.from_files(
                ca=pki["ca"], cert=pki["client_cert"], key=pki["client_key"]
            )
            assert await _send_and_read(target, good, n=50) == list(range(1000, 1050))

    run(body())


def test_bearer_token_missing_or_wrong_is_unauthenticated_and_nothing_is_accepted(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    async def body() -> None:
        settings = _tls(pki, token_file=pki["token_file"])
        async with serving(tmp_path, CONFIG, **settings) as running:
            target = _target(running.port)
            missing = ChannelSecurity.from_files(ca=pki["ca"])
            wrong = ChannelSecurity.from_files(ca=pki["ca"], token="not-" + TOKEN)
            for security in (missing, wrong):
                with pytest.raises(EvbError, match="UNAUTHENTICATED"):
                    await get_stats_async(target, security=security)
                with pytest.raises(EvbError, match="UNAUTHENTICATED"):
                    await end_run_async(target, security=security)
                client = AsyncSourceClient(target, sources=[1], security=security)
                with pytest.raises(EvbError, match="UNAUTHENTICATED"):
                    async with client:
                        await client.send_batch(1, np.arange(10, dtype=np.uint64))
                        await client.wait_acked(timeout=30)
                with pytest.raises(EvbError, match="UNAUTHENTICATED"):
                    async for _ in subscribe(target, 0, security=security):
                        pass
            assert _received(running) == 0 and not running.service.stats().run_ended
            # health checking stays open (kubelet probes carry no token)
            credentials = grpc.ssl_channel_credentials(pki["ca"].read_bytes())
            async with grpc.aio.secure_channel(target, credentials) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=10
                )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            right = ChannelSecurity.from_files(ca=pki["ca"], token_file=pki["token_file"])
            assert await _send_and_read(target, right, n=20) == list(range(1000, 1020))

    run(body())


def test_bad_security_settings_name_the_setting(tmp_path: Path, pki: dict[str, Path]) -> None:
    def load(**settings: object) -> ServerSecurity:
        config = ServiceConfig(data_dir=tmp_path, **settings)  # type: ignore[arg-type]
        return ServerSecurity.load(
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
            tls_client_ca=config.tls_client_ca,
            token=config.token,
            token_file=config.token_file,
        )

    cases = [
        ({"tls_cert": pki["server_cert"]}, "tls_key"),
        ({"tls_key": pki["server_key"]}, "tls_cert"),
        ({"tls_client_ca": pki["ca"]}, "tls_client_ca"),
        ({"token": TOKEN}, "token"),  # a token without TLS would travel in clear
        ({**_tls(pki), "tls_cert": tmp_path / "absent.crt"}, "tls_cert"),
        ({**_tls(pki), "tls_key": pki["server_cert"]}, "tls_key"),  # not a key
        ({**_tls(pki), "tls_key": pki["client_key"]}, "tls_key"),  # not the cert's key
        ({**_tls(pki), "token_file": tmp_path / "absent"}, "token_file"),
        ({**_tls(pki), "token": TOKEN, "token_file": pki["token_file"]}, "token"),
    ]
    for settings, name in cases:
        with pytest.raises(ConfigError) as caught:
            load(**settings)
        assert caught.value.parameter == name, settings
    assert load(**_tls(pki, tls_client_ca=pki["ca"])).mutual
    with pytest.raises(ConfigError, match="token"):
        ChannelSecurity(token=TOKEN)  # the client side refuses a token in clear too
    with pytest.raises(ConfigError, match="tls_cert"):
        ChannelSecurity.from_files(ca=pki["ca"], cert=pki["client_cert"])
    env = {"EVB_TLS_CA": str(pki["ca"]), "EVB_TOKEN_FILE": str(pki["token_file"])}
    from_env = ChannelSecurity.from_env(env)
    assert from_env.tls and from_env.token == TOKEN
    assert TOKEN not in repr(from_env)
    assert not ChannelSecurity.from_env({}).tls
