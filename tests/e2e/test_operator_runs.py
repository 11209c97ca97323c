"""The real operator (``kopf run``, against KMock) and a real orderer (``evb serve``): runs one
after another through ``spec.run``, and the forwarders of ``spec.upstreams``.

One scenario: an EventBuilder created at run 1 with an upstream -> its forwarders' Deployment
runs ``evb forward`` from that upstream into this orderer; data of run 1 sent; ``spec.run``
raised to 2 -> the operator ended run 1 (``EndRun``) and began run 2 (``BeginRun``): the
orderer's ``GetStats`` says run 2, starting at the offset after run 1's fragments, and the
status shows it; ``spec.run`` lowered to 1 (no API server to refuse it: KMock has no CEL) ->
the operator refuses naming the field and both values, and the orderer stays at run 2;
``spec.upstreams`` emptied -> the Deployment is deleted.

The emulator, the operator's process and the helpers are those of
:mod:`tests.e2e.test_operator` (its module docstring says what KMock is not)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from orderer.client import AsyncSourceClient, get_stats_async
from orderer.stats import Stats
from tests.e2e import test_operator as e2e
from tests.e2e.conftest import ServerProcess

pytestmark = e2e.pytestmark
cluster = e2e.cluster
"""The emulator and ``kopf run`` against it (the fixture of :mod:`tests.e2e.test_operator`)."""

NAME = "runs"
FORWARD = "apps/v1/deployments"
UPSTREAM: dict[str, Any] = {"target": "lower-orderer.daq.svc:50051", "asSource": 4}


async def _at_run(target: str, run: int) -> Stats | None:
    stats = await get_stats_async(target)
    return stats if stats.run == run else None


def _status(api: e2e.KubernetesAPI) -> dict[str, Any]:
    body = e2e._object(api, "evb.io/v1alpha1/eventbuilders", NAME) or {}
    status: dict[str, Any] = body.get("status", {})
    return status


async def test_raising_spec_run_ends_the_run_and_begins_the_next(
    cluster: tuple[e2e.KubernetesAPI, e2e.Operator], tmp_path: Path
) -> None:
    api, operator = cluster
    flags = ("--sources", "1", "--build-window", "0.2", "--startup-delay", "0")
    orderer = ServerProcess(tmp_path / "data", tmp_path, *flags)
    await asyncio.to_thread(orderer.start)
    try:
        spec = {"sources": [1], "buildWindow": 0.2, "startupDelay": 0, "upstreams": [UPSTREAM]}
        response = await api.post(
            f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders",
            json=e2e._eventbuilder(NAME, orderer.target, **spec),
        )
        assert response.status == 200, await response.text()
        deployment = await e2e.until(
            lambda: e2e._object(api, FORWARD, f"{NAME}-forward"), "the forwarders' Deployment"
        )
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"] == [
            "forward",
            "--from",
            UPSTREAM["target"],
            "--to",
            f"{NAME}-orderer.{e2e.NAMESPACE}.svc:50051",
            "--as-source",
            "4",
        ]
        configmap = await e2e.until(
            lambda: e2e._object(api, "v1/configmaps", f"{NAME}-orderer-config"), "the ConfigMap"
        )
        assert "run: 1\n" in configmap["data"]["evb.yaml"]
        await e2e.until(lambda: _status(api).get("run") == 1, "status.run 1")

        async with AsyncSourceClient(orderer.target, sources=[1]) as source:
            await source.send_batch(1, np.arange(1, 101, dtype=np.uint64))
            await source.flush()
            await source.wait_acked(timeout=e2e.TIMEOUT)
        first = await get_stats_async(orderer.target)
        assert (first.run, first.run_ended) == (1, False)

        await e2e._merge_patch(api, NAME, {"spec": {"run": 2}})
        stats: Stats = await e2e.until(lambda: _at_run(orderer.target, 2), "the orderer at run 2")
        assert stats.run_start_offset == 100  # run 1 was ended: all of it in order
        assert stats.run_ended is False
        await e2e.until(
            lambda: _status(api).get("run") == 2 and _status(api).get("runStartOffset") == 100,
            "status.run 2 from offset 100",
        )
        assert "ended run 1" in operator.text() and "began run 2" in operator.text()

        await e2e._merge_patch(api, NAME, {"spec": {"run": 1}})
        await e2e.until(
            lambda: "spec.run: cannot be lowered from 2 to 1" in operator.text(),
            "the operator refusing to lower spec.run",
        )
        assert (await get_stats_async(orderer.target)).run == 2

        await e2e._merge_patch(api, NAME, {"spec": {"upstreams": []}})
        await e2e.until(
            lambda: e2e._object(api, FORWARD, f"{NAME}-forward") is None,
            "the forwarders' Deployment deleted",
        )
    finally:
        orderer.stop()
