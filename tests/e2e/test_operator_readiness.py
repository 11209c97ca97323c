"""The operator's readiness (``/healthz``, kopf's ``--liveness`` endpoint, which the chart's
probes ask) means that it can talk to the Kubernetes API: the real ``kopf run -m
evb_operator.handlers`` against KMock that refuses its credentials (401), then accepts them,
then refuses again; and against an address where no API server listens. Before, ``/healthz``
answered 200 (``{}``) to both, and a 401 at the start made kopf exit (``Ran out of valid
credentials``)."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from tests.e2e.test_operator import KubernetesAPI, Operator, _resources, until
from tests.operator.kubernetes_api import kubeconfig as api_config

SETTLED = 3.0
"""Seconds an unready operator is watched to stay unready (and running)."""


class RefusingAPI(KubernetesAPI):
    """The emulator, answering 401 to every request while ``refusing`` (credentials refused,
    as for a revoked or not yet valid service-account token)."""

    refusing: bool = True

    async def _handle(self, request: kmock.Request) -> Any:
        if self.refusing:
            raise kmock.KubernetesError(status=401, reason="Unauthorized", message="refused")
        return await super()._handle(request)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _health(port: int) -> int | None:
    """The HTTP status of ``/healthz``; None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=15) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


async def _status(port: int) -> int | None:
    return await asyncio.to_thread(_health, port)


@asynccontextmanager
async def _operator(server: str, tmp_path: Path) -> AsyncIterator[tuple[Operator, int]]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api_config(server)))
    port = _free_port()
    operator = Operator(
        kubeconfig, tmp_path / "kopf.log", f"--liveness=http://127.0.0.1:{port}/healthz"
    )
    try:
        yield operator, port
    finally:
        await operator.stop()


async def _stays_unready(operator: Operator, port: int) -> None:
    """Answers, not 200, for :data:`SETTLED` seconds, and the operator keeps running."""
    answered = await until(lambda: _status(port), "/healthz to answer")
    assert answered != 200, operator.text()[-5000:]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLED
    while loop.time() < deadline:
        status = await _status(port)
        assert status is not None and status != 200, (status, operator.text()[-5000:])
        await asyncio.sleep(0.5)
    assert operator.process.poll() is None, operator.text()[-5000:]


async def _ready(port: int) -> bool:
    return await _status(port) == 200


async def _unready(port: int) -> bool:
    status = await _status(port)
    return status is not None and status != 200


@pytest.mark.asyncio
async def test_readiness_follows_whether_the_api_accepts_the_credentials(tmp_path: Path) -> None:
    async with RefusingAPI() as api, kmock.Server(api) as server:
        _resources(api)
        async with _operator(str(server.url), tmp_path) as (operator, port):
            await _stays_unready(operator, port)
            assert "refuses the operator's credentials" in operator.text()
            api.refusing = False
            await until(lambda: _ready(port), "/healthz 200 once the API accepts the login")
            api.refusing = True  # a token revoked while it runs
            await until(lambda: _unready(port), "/healthz not 200 once the API refuses again")
            assert operator.process.poll() is None, operator.text()[-5000:]


@pytest.mark.asyncio
async def test_no_api_server_is_not_ready(tmp_path: Path) -> None:
    async with _operator(f"http://127.0.0.1:{_free_port()}", tmp_path) as (operator, port):
        await _stays_unready(operator, port)
