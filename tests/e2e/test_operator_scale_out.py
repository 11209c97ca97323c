"""The real operator (``kopf run``, against KMock) with one run over three orderers
(``spec.orderers: 3``), and three real orderers (``evb serve``) started from what it wrote.

One scenario: an EventBuilder with ``orderers: 3`` -> its children exist, owned by it: the
ConfigMap, the run's Service, the headless Service governing a StatefulSet of three pods, the
release's Deployment and the SparkApplication given every orderer; three ``evb serve`` processes
started as the kubelet would start pods 0, 1 and 2 (the pod template's arguments with the
ordinal in their variable, the ConfigMap as their ``--config``; the cluster's names replaced by
loopback addresses, the metrics port by a free one, as three pods on one host need) -> each
says in its ``GetStats`` that it is orderer k of 3, with the spec's slice length and the peers;
a source routes data over the three; the release's command (its arguments, the targets
replaced the same way, one look) answers; the status sums the three orderers' counters and has
an entry for each; the pods ready and the Spark job running -> Ready; ``buildWindow`` patched ->
all three run the new window, and Ready follows the new generation; orderer 1 killed -> not
Ready, the condition naming orderer 1 and no other, its entry not ready with its last counters;
started again -> Ready; ``state: Ended`` -> every orderer's run ended, the status Ended, the
release scaled to 0; delete -> every child goes, the headless Service and the release included;
every call the operator made is one the chart's RBAC allows.

The operator reaches each orderer at its address in the endpoint override (the three loopback
addresses, in index order, standing in for the pods' names under the headless Service). The
emulator, the operator's process and the helpers are those of :mod:`tests.e2e.test_operator`
(its docstring says what KMock is not).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orderer.client import AsyncSourceClient, get_stats_async
from tests.e2e import test_operator as e2e
from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.operator.conftest import kubelet_args, pod_of

pytestmark = e2e.pytestmark
cluster = e2e.cluster
"""The emulator and ``kopf run`` against it (the fixture of :mod:`tests.e2e.test_operator`)."""

NAME = "wide"
T = 1000
CHILDREN = {
    "ConfigMap": ("v1/configmaps", f"{NAME}-orderer-config"),
    "Service": ("v1/services", f"{NAME}-orderer"),
    "Headless": ("v1/services", f"{NAME}-orderer-headless"),
    "StatefulSet": ("apps/v1/statefulsets", f"{NAME}-orderer"),
    "Release": ("apps/v1/deployments", f"{NAME}-release"),
    "SparkApplication": ("sparkoperator.k8s.io/v1beta2/sparkapplications", f"{NAME}-spark"),
}
PEERS = [f"{NAME}-orderer-{k}.{NAME}-orderer-headless.{e2e.NAMESPACE}.svc:50051" for k in range(3)]


def _free_ports(count: int) -> list[int]:
    """Ports no one listens on now (the orderers need each other's addresses before they
    start: ``--peers``)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def _status(api: e2e.KubernetesAPI) -> dict[str, Any]:
    body = e2e._object(api, "evb.io/v1alpha1/eventbuilders", NAME) or {}
    return dict(body.get("status", {}))


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", ()) if c["type"] == kind), {})


async def _ready_children(api: e2e.KubernetesAPI) -> None:
    """What the StatefulSet's and the Spark operator's controllers would report: three pods
    ready, the job RUNNING."""
    for path, body in (
        (
            f"/apis/apps/v1/namespaces/{e2e.NAMESPACE}/statefulsets/{NAME}-orderer",
            {"replicas": 3, "readyReplicas": 3},
        ),
        (
            f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{e2e.NAMESPACE}/sparkapplications/"
            f"{NAME}-spark",
            {"applicationState": {"state": "RUNNING"}},
        ),
    ):
        response = await api.patch(
            f"{path}/status",
            json={"status": body},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status == 200, await response.text()


def _children(api: e2e.KubernetesAPI) -> dict[str, dict[str, Any]] | None:
    found = {key: e2e._object(api, res, name) for key, (res, name) in CHILDREN.items()}
    if any(child is None for child in found.values()):
        return None
    return found  # type: ignore[return-value]


def _as_local(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag``'s value replaced (a cluster's name by this host's address)."""
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def _orderer(
    statefulset: dict[str, Any], ordinal: int, config: Path, port: int, peers: str, tmp: Path
) -> ServerProcess:
    """Pod ``ordinal`` of the StatefulSet, as a process on this host."""
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    args = kubelet_args(pod_of(statefulset, ordinal), container)
    assert args[0] == "serve"
    args = _as_local(_as_local(args[1:], "--config", str(config)), "--peers", peers)
    logs = tmp / f"orderer-{ordinal}"
    logs.mkdir()
    server = ServerProcess(logs / "data", logs, *args, "--metrics-port", "0")
    server.port = port
    return server


async def test_three_orderers_get_a_statefulset_of_three_a_headless_service_and_a_release(
    cluster: tuple[e2e.KubernetesAPI, e2e.Operator], tmp_path: Path
) -> None:
    api, operator = cluster
    ports = _free_ports(3)
    local = [f"127.0.0.1:{port}" for port in ports]
    spec = {
        "orderers": 3,
        "sliceTicks": T,
        "sources": [1, 2],
        "buildWindow": 0.5,
        "startupDelay": 0,
        "spark": {"dt": 100, "output": {"path": "s3a://events/wide"}},
    }
    response = await api.post(
        f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders",
        json=e2e._eventbuilder(NAME, ",".join(local), **spec),
    )
    assert response.status == 200, await response.text()
    owner_uid = (await response.json())["metadata"]["uid"]

    # create -> every child, owned by the EventBuilder
    children = await e2e.until(lambda: _children(api), "the children of a run over three")
    for key, child in children.items():
        (reference,) = child["metadata"]["ownerReferences"]
        assert reference["uid"] == owner_uid and reference["controller"] is True, key
    statefulset = children["StatefulSet"]
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["serviceName"] == f"{NAME}-orderer-headless"
    assert children["Headless"]["spec"]["clusterIP"] == "None"
    assert children["Release"]["spec"]["replicas"] == 1
    job = children["SparkApplication"]["spec"]["arguments"]
    assert job[job.index("--target") + 1].split(",") == PEERS

    # the orderers, started from what the operator wrote -> orderer k of 3 each
    config = tmp_path / "evb.yaml"
    config.write_text(children["ConfigMap"]["data"]["evb.yaml"])
    assert yaml.safe_load(config.read_text())["sliceTicks"] == T
    orderers = [
        _orderer(statefulset, k, config, ports[k], ",".join(local), tmp_path) for k in range(3)
    ]
    try:
        await asyncio.gather(*(asyncio.to_thread(o.start) for o in orderers))
        for k, orderer in enumerate(orderers):
            role = (await get_stats_async(orderer.target)).slicing
            assert (role.orderers, role.index, role.slice_ticks) == (3, k, T)
            assert list(role.peers) == local
        await _scenario(api, operator, orderers, children["Release"], local)
    finally:
        for orderer in orderers:
            orderer.stop()


async def _scenario(
    api: e2e.KubernetesAPI,
    operator: e2e.Operator,
    orderers: list[ServerProcess],
    release: dict[str, Any],
    local: list[str],
) -> None:
    # a source given one orderer finds the others (its peers) and routes over all three
    async with AsyncSourceClient(local[1], sources=[1, 2]) as source:
        for source_id in (1, 2):
            await source.send_batch(source_id, np.arange(0, 6 * T, 7, dtype=np.uint64))
        await source.flush()
        await source.wait_acked(timeout=e2e.TIMEOUT)
    received = [(await get_stats_async(o.target)).totals.received for o in orderers]
    assert all(count > 0 for count in received), received

    # the status: the three orderers' counters summed, an entry for each
    def summed() -> dict[str, Any] | None:
        status = _status(api)
        entries = status.get("orderers", [])
        if [e.get("fragments") for e in entries] == received:
            return status
        return None

    status = await e2e.until(summed, "the status to sum the three orderers' counters")
    assert status["fragments"] == sum(received) == 2 * len(range(0, 6 * T, 7))
    assert status["endpoint"] == ",".join(local)
    assert [(e["index"], e["endpoint"], e["ready"]) for e in status["orderers"]] == [
        (k, local[k], True) for k in range(3)
    ]
    assert status["phase"] == "Running" and status["window"] == 0.5

    # the pods ready and the Spark job running (as their controllers would say) -> Ready
    await _ready_children(api)
    ready = await e2e.until(lambda: e2e._ready(api, NAME, generation=1), "Ready at generation 1")
    assert "the 3 orderers' pods are ready and answer" in _condition(ready, "Ready")["message"]

    # a live edit reaches all three; Ready follows the new generation
    await e2e._merge_patch(api, NAME, {"spec": {"buildWindow": 0.75}})
    for orderer in orderers:
        await e2e.until(
            lambda o=orderer: e2e._window_is(o.target, 0.75), f"{orderer.target} at 0.75 s"
        )
    status = await e2e.until(lambda: e2e._ready(api, NAME, generation=2), "Ready at generation 2")
    assert _condition(status, "Configured")["status"] == "True"

    # orderer 1 killed -> not Ready, naming it; started again -> Ready
    orderers[1].kill()

    def not_ready() -> dict[str, Any] | None:
        status = _status(api)
        condition = _condition(status, "Ready")
        return status if condition and condition["reason"] == "OrdererUnreachable" else None

    status = await e2e.until(not_ready, "Ready False while orderer 1 is down")
    message = _condition(status, "Ready")["message"]
    assert f"orderer 1 ({local[1]}) does not answer" in message, message
    assert "orderer 0" not in message and "orderer 2" not in message, message
    assert _condition(status, "Ready")["status"] == "False"
    down = status["orderers"][1]
    assert down["ready"] is False and down["fragments"] == received[1]  # its last counters
    assert status["fragments"] == sum(received)
    await asyncio.to_thread(orderers[1].start)  # same port, same data directory
    await e2e.until(lambda: e2e._ready(api, NAME, generation=2), "Ready again")
    assert (await get_stats_async(orderers[1].target)).config.build_window == 0.75

    # the release's own command line, one look over the three: nothing silent to release
    (container,) = release["spec"]["template"]["spec"]["containers"]
    args = _as_local(container["args"], "--target", ",".join(local))
    done = await asyncio.to_thread(
        subprocess.run,
        evb_command(*args, "--once", "--connect-timeout", "10"),
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"released": []}

    # state Ended -> the release goes to 0 replicas (no run begins again)
    await e2e._merge_patch(api, NAME, {"spec": {"state": "Ended"}})

    def scaled_down() -> bool:
        deployment = e2e._object(api, "apps/v1/deployments", f"{NAME}-release") or {}
        return deployment.get("spec", {}).get("replicas") == 0

    await e2e.until(scaled_down, "the release's Deployment at 0 replicas")
    for orderer in orderers:  # EndRun reached every orderer
        assert (await get_stats_async(orderer.target)).run_ended, orderer.target

    def every_one_ended() -> dict[str, Any] | None:
        status = _status(api)
        entries = status.get("orderers", [])
        return status if len(entries) == 3 and all(e.get("runEnded") for e in entries) else None

    status = await e2e.until(every_one_ended, "each orderer's entry to say its run ended")
    assert status["phase"] == "Ended" and status["runEnded"] is True
    assert _condition(status, "RunEnded")["status"] == "True"

    # delete -> every child goes, then the EventBuilder
    response = await api.delete(f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders/{NAME}")
    assert response.status == 200
    await e2e.until(
        lambda: e2e._object(api, "evb.io/v1alpha1/eventbuilders", NAME) is None,
        "the EventBuilder to be gone (finalizer released)",
    )
    for resource, name in CHILDREN.values():
        assert e2e._object(api, resource, name) is None, name

    # least privilege: every call of the operator is allowed by the chart's RBAC
    allowed = e2e._rbac_rules()
    calls = e2e.operator_calls(api)
    assert calls and calls <= allowed, sorted(calls - allowed)
    assert "Traceback" not in operator.text()
