"""The real operator (``kopf run``, against KMock) reports an incomplete barrier of a real orderer
(``evb serve``) from the orderer's barrier log: one Warning Event naming the barrier's output
offset and the source that sent none, the same barrier in ``status.barriers``, and no second
Event for it from an operator restarted with that status (its only memory).

The emulator, the operator's process and the helpers are those of
:mod:`tests.e2e.test_operator` (its module docstring says what KMock is not)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from orderer.client import AsyncSourceClient, get_stats_async
from orderer.stats import BarrierRecord
from tests.e2e import test_operator as e2e
from tests.e2e.conftest import ServerProcess

pytestmark = e2e.pytestmark
cluster = e2e.cluster
"""The emulator and ``kopf run`` against it (the fixture of :mod:`tests.e2e.test_operator`)."""

NAME = "run-b"


async def test_an_incomplete_barrier_is_one_event_naming_the_missing_source(
    cluster: tuple[e2e.KubernetesAPI, e2e.Operator], tmp_path: Path
) -> None:
    api, operator = cluster
    flags = ("--sources", "1,2", "--build-window", "0.2", "--startup-delay", "0")
    orderer = ServerProcess(tmp_path / "data", tmp_path, *flags, "--barrier-timeout", "1")
    await asyncio.to_thread(orderer.start)
    try:
        spec = {"sources": [1, 2], "buildWindow": 0.2, "startupDelay": 0, "barrierTimeout": 1}
        response = await api.post(
            f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders",
            json=e2e._eventbuilder(NAME, orderer.target, **spec),
        )
        assert response.status == 200, await response.text()
        # source 1 sends a barrier (type 7) after its data; source 2 sends data but no barrier:
        # the barrier resolves incomplete once barrierTimeout (1 s) has passed
        async with AsyncSourceClient(orderer.target, sources=[1, 2]) as source:
            await source.send_batch(2, np.arange(1, 101, dtype=np.uint64))
            await source.send_batch(1, np.arange(1, 101, dtype=np.uint64))
            await source.send(1, 200, barrier=7)
            await source.flush()
            await source.wait_acked(timeout=e2e.TIMEOUT)
        record = await e2e.until(lambda: _incomplete(orderer.target), "an incomplete barrier")
        assert record.missing == (2,) and record.types == {1: 7}

        (event,) = await e2e.until(
            lambda: e2e._events(api, NAME, "IncompleteBarrier"), "an IncompleteBarrier Event"
        )
        assert event["type"] == "Warning"
        assert f"barrier at output offset {record.offset} " in event["message"]
        assert "no barrier from source(s) 2; sent source 1: type 7" in event["message"]
        barriers = await e2e.until(lambda: _reported(api, record.offset), "the status")
        assert barriers["lastIncomplete"]["missing"] == [2]
        assert barriers["lastIncomplete"]["types"] == {"1": 7}
        assert barriers["incomplete"] == 1

        # a new operator, with the status as its only memory, does not report it again
        await operator.stop()
        again = e2e.Operator(tmp_path / "kubeconfig", tmp_path / "kopf-2.log")
        try:
            await e2e.until(
                lambda: again.text().count("Timer 'refresh_status' succeeded") >= 3,
                "three status updates by the restarted operator",
            )
            assert len(e2e._events(api, NAME, "IncompleteBarrier")) == 1, again.text()[-5000:]
        finally:
            await again.stop()
    finally:
        orderer.stop()


async def _incomplete(target: str) -> BarrierRecord | None:
    stats = await get_stats_async(target)
    return next((b for b in stats.barrier_log if not b.complete), None)


def _reported(api: e2e.KubernetesAPI, offset: int) -> dict[str, Any] | None:
    body = e2e._object(api, "evb.io/v1alpha1/eventbuilders", NAME) or {}
    barriers: dict[str, Any] = body.get("status", {}).get("barriers", {})
    return barriers if barriers.get("lastReportedOffset") == offset else None
