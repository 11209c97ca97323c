"""The real operator (``kopf run -m evb_operator.handlers``, a subprocess) against a Kubernetes API
emulator on loopback (KMock), with a real orderer (``evb serve``, a subprocess) standing in for
the EventBuilder's endpoint (annotation ``evb.io/endpoint-override``, honoured because the test
sets ``EVB_ALLOW_ENDPOINT_OVERRIDE=1``).

One scenario, in order: create -> the children exist with owner references; data sent ->
the status shows the orderer's counters and a LateDataBurst Event is posted; the StatefulSet's
pod made ready and the Spark job RUNNING (by the test, as their controllers would) -> Ready=True
with observedGeneration; buildWindow patched -> the live orderer reports the new window, no
child was recreated, and Ready and observedGeneration follow the new generation; an invalid
EventBuilder -> phase Invalid with the field named, no children, no retry loop; state Ended ->
EndRun (the orderer's stats say the run ended); delete -> children deleted, finalizer released.
Finally every call the operator made is one the chart's RBAC allows.

What KMock is not: it applies no CRD defaults or validation (the operator defaults and validates
itself), runs no controllers (no pods; no garbage collection) and does not enforce RBAC (checked
here from its request log instead). KMock 0.8 also fails on ``/api/v1/namespaces`` (it reads
``namespaces`` as a namespace prefix), which kopf lists when given ``--namespace``; the operator
therefore runs with ``--all-namespaces`` here, the chart's default.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import jsonpatch
import kmock
import numpy as np
import pytest
import pytest_asyncio
import yaml

from orderer.client import AsyncSourceClient, get_stats_async
from orderer.stats import Stats
from tests.e2e.conftest import REPO, ServerProcess, environment
from tests.operator.kubernetes_api import kubeconfig as api_config

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]

NAMESPACE = "daq"
EVB = "/apis/evb.io/v1alpha1"
TIMEOUT = 30.0
"""Seconds any one expectation may take (generous: the machine is shared)."""

_T = TypeVar("_T")


class KubernetesAPI(kmock.KubernetesEmulator):
    """KMock's emulator plus what a real API server adds by itself: ``metadata.uid``,
    ``creationTimestamp``, ``generation`` (1, then one more for each write of the spec), a new
    ``resourceVersion`` on every write, a name from ``generateName`` (kopf names its Events that
    way), and 422 for a JSON patch whose ``test`` fails.

    And one thing for the tests' timing: a creation can be held (:meth:`hold`), as a slow API
    server would keep it, so that a test can change the spec while the operator is in the middle
    of handling the object."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self._holds: dict[tuple[Any, str], Hold] = {}

    def hold(self, resource: str, name: str) -> Hold:
        """Keep the next creation of ``resource`` ``name`` waiting until its hold is released."""
        hold = Hold()
        self._holds[(kmock.resource(resource), name)] = hold
        return hold

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if request.resource is not None and isinstance(data, list):  # a JSON patch
            if request.action == kmock.action.UPDATE:
                version = str(next(self._versions))
                data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
        elif request.resource is not None and isinstance(data, dict):
            if request.action == kmock.action.CREATE:
                meta = data.setdefault("metadata", {})
                hold = self._holds.pop((request.resource, meta.get("name", "")), None)
                if hold is not None:
                    hold.arrived.set()
                    await hold.released.wait()
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:8]
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
                meta["generation"] = 1
                meta["resourceVersion"] = str(next(self._versions))
            elif request.action == kmock.action.UPDATE:
                meta = data.setdefault("metadata", {})
                meta["resourceVersion"] = str(next(self._versions))
                if "spec" in data and request.subresource is None:
                    stored = self.objects[(request.resource, request.namespace, request.name)]
                    meta["generation"] = stored.raw["metadata"].get("generation", 1) + 1
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchException as error:
            # a failed ``test`` (kopf's optimistic concurrency on resourceVersion): 422, as the
            # API server answers, not KMock's 500, so that kopf retries from a fresh object
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from None


class Hold:
    """A creation the emulator keeps waiting: ``arrived`` when the operator asked for it; it goes
    on once ``released``."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.released = asyncio.Event()


def _resources(api: KubernetesAPI) -> None:
    api.resources.load_bundled()  # the built-in kinds of a recent cluster (K3s)
    every_verb = {"get", "list", "watch", "create", "patch", "update", "delete"}
    api.resources["evb.io/v1alpha1/eventbuilders"] = kmock.ResourceInfo(
        kind="EventBuilder",
        singular="eventbuilder",
        namespaced=True,
        verbs=every_verb,
        shortnames={"evb"},
        subresources={"status"},
    )
    api.resources["sparkoperator.k8s.io/v1beta2/sparkapplications"] = kmock.ResourceInfo(
        kind="SparkApplication",
        singular="sparkapplication",
        namespaced=True,
        verbs=every_verb,
        subresources={"status"},
    )


async def until(
    probe: Callable[[], Awaitable[_T | None] | _T | None], what: str, timeout: float = TIMEOUT
) -> _T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


def _object(api: KubernetesAPI, resource: str, name: str) -> dict[str, Any] | None:
    key = (kmock.resource(resource), NAMESPACE, name)
    if key not in api.objects or api.objects[key].deleted:
        return None
    return dict(api.objects[key].raw)


CHILDREN = {
    "ConfigMap": ("v1/configmaps", "{}-orderer-config"),
    "Service": ("v1/services", "{}-orderer"),
    "StatefulSet": ("apps/v1/statefulsets", "{}-orderer"),
    "SparkApplication": ("sparkoperator.k8s.io/v1beta2/sparkapplications", "{}-spark"),
}


def _children(api: KubernetesAPI, name: str) -> dict[str, dict[str, Any]] | None:
    found = {
        kind: _object(api, res, pattern.format(name)) for kind, (res, pattern) in CHILDREN.items()
    }
    if any(child is None for child in found.values()):
        return None
    return found  # type: ignore[return-value]


def _eventbuilder(name: str, endpoint: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "evb.io/v1alpha1",
        "kind": "EventBuilder",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"evb.io/endpoint-override": endpoint},
            "labels": {"team": "daq"},
        },
        "spec": spec,
    }


async def _merge_patch(api: KubernetesAPI, name: str, patch: dict[str, Any]) -> None:
    response = await api.patch(
        f"{EVB}/namespaces/{NAMESPACE}/eventbuilders/{name}",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, await response.text()


class Operator:
    """``kopf run`` in a subprocess, logging to a file."""

    def __init__(self, kubeconfig: Path, log: Path, *flags: str) -> None:
        self.log = log
        env = environment()
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "operator"), env["PYTHONPATH"]])
        env.update(
            KUBECONFIG=str(kubeconfig),
            EVB_ALLOW_ENDPOINT_OVERRIDE="1",
            EVB_STATS_INTERVAL="1",
            EVB_OPERATOR_NAMESPACE="evb-system",
        )
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "-m",
                    "evb_operator.handlers",
                    "--standalone",
                    "--all-namespaces",
                    "--verbose",
                    *flags,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log.parent,
            )

    async def stop(self) -> None:
        """SIGTERM, and wait for the exit off the event loop: the emulator answers on that loop,
        and the operator's threads finish their calls to it before its process can exit (waited
        for on the loop, a call in flight held the exit until the kill, 20 s later)."""
        await asyncio.to_thread(self._stop)

    def _stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[KubernetesAPI, Operator]]:
    async with KubernetesAPI() as api, kmock.Server(api) as server:
        _resources(api)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api_config(str(server.url))))
        operator = Operator(kubeconfig, tmp_path / "kopf.log")
        try:
            yield api, operator
        finally:
            await operator.stop()
            # captured: pytest shows it under the test's failure ("Captured stdout teardown"),
            # the one place the operator's side of a timeout can be read (an async fixture
            # does not see the test's exception, so it cannot print on failure alone); without
            # gRPC's debug lines (``--verbose`` turns them on: one every 50 ms)
            lines = operator.text().splitlines()
            print("\n".join(line for line in lines if "cygrpc" not in line)[-20000:])


def _verb(method: str, path: str, query: str) -> str:
    if method == "GET":
        return "watch" if "watch=true" in query else ("get" if _named(path) else "list")
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]


def _named(path: str) -> bool:
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if parts and parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    return len(parts) >= 2


def _rbac_rules() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) allowed by the chart's ClusterRoles, as rendered."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import generate_manifests
    finally:
        sys.path.remove(str(REPO / "tools"))
    allowed = set()
    for obj in generate_manifests.render_chart():
        if obj["kind"] == "ClusterRole":
            for rule in obj["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            allowed.add((group, resource, verb))
    return allowed


def _call(path: str) -> tuple[str, str]:
    """(apiGroup, resource[/subresource]) of an API path."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0]
    if len(rest) >= 3:
        resource += "/" + rest[2]
    return group, resource


async def test_the_operator_reconciles_an_eventbuilder_through_its_life(
    cluster: tuple[KubernetesAPI, Operator], tmp_path: Path
) -> None:
    api, operator = cluster
    orderer = ServerProcess(
        tmp_path / "orderer-data",
        tmp_path,
        "--sources",
        "1,2",
        "--build-window",
        "5",
        "--startup-delay",
        "0",
    )
    await asyncio.to_thread(orderer.start)  # the emulator keeps serving the operator meanwhile
    try:
        await _scenario(api, operator, orderer)
    finally:
        orderer.stop()


async def _scenario(api: KubernetesAPI, operator: Operator, orderer: ServerProcess) -> None:
    name = "run-1"
    spec = {
        "sources": [1, 2],
        "buildWindow": 5,
        "startupDelay": 0,
        "alerts": {"lateBurst": 1},
        "spark": {"dt": 100, "output": {"path": "file:///events", "volumeClaim": "events"}},
    }
    response = await api.post(
        f"{EVB}/namespaces/{NAMESPACE}/eventbuilders",
        json=_eventbuilder(name, orderer.target, **spec),
    )
    assert response.status == 200, await response.text()
    owner_uid = (await response.json())["metadata"]["uid"]

    # create -> the children exist, owned by the EventBuilder
    children = await until(lambda: _children(api, name), "the children")
    for kind, child in children.items():
        (reference,) = child["metadata"]["ownerReferences"]
        assert reference["uid"] == owner_uid and reference["kind"] == "EventBuilder", kind
        assert reference["controller"] is True and reference["blockOwnerDeletion"] is True
        assert child["metadata"]["labels"]["team"] == "daq"  # the owner's labels, adopted
    uids = {kind: child["metadata"]["uid"] for kind, child in children.items()}
    args = children["SparkApplication"]["spec"]["arguments"]
    assert args[args.index("--target") + 1] == f"{name}-orderer.{NAMESPACE}.svc:50051"

    # data -> the status shows the orderer's counters; a burst of late data is an Event
    async with AsyncSourceClient(orderer.target, sources=[1, 2]) as source:
        await source.send_batch(1, np.arange(1000, dtype=np.uint64))
        await source.send_batch(2, np.arange(1000, dtype=np.uint64))
        await source.flush()
        await source.wait_acked(timeout=TIMEOUT)
        await until(
            lambda: _stats_received(orderer.target, 2000), "the orderer to take 2000 fragments"
        )
        await source.send(1, 5)  # below the high-water mark: late
        await source.flush()
        await source.wait_acked(timeout=TIMEOUT)
    stats = await until(lambda: _late_stats(orderer.target), "a late fragment in the orderer")

    def status_matches() -> dict[str, Any] | None:
        body = _object(api, "evb.io/v1alpha1/eventbuilders", name) or {}
        status = body.get("status", {})
        if status.get("fragments") == 2001 and status.get("late") == 1:
            return status
        return None

    status = await until(status_matches, "the status to show the orderer's counters")
    assert status["phase"] == "Running"
    assert status["emitted"] == stats.totals.emitted
    assert status["window"] == 5.0
    assert status["endpoint"] == orderer.target
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "Ready": "False",  # KMock runs no StatefulSet controller: no pod is ready yet
        "Valid": "True",
        "OrdererReachable": "True",
        "Configured": "True",
    }
    await until(lambda: _events(api, name, "LateDataBurst"), "a LateDataBurst Event")

    # the pod ready and the Spark job running (what their controllers would report) -> Ready
    for path, body in (
        (f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{name}-orderer", {"readyReplicas": 1}),
        (
            f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{NAMESPACE}/sparkapplications/"
            f"{name}-spark",
            {"applicationState": {"state": "RUNNING"}},
        ),
    ):
        response = await api.patch(
            f"{path}/status",
            json={"status": body},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status == 200, await response.text()
    status = await until(lambda: _ready(api, name, generation=1), "Ready=True at generation 1")
    assert status["observedGeneration"] == 1

    # patch buildWindow -> the live orderer runs the new window; no child recreated
    await _merge_patch(api, name, {"spec": {"buildWindow": 7.5}})
    await until(lambda: _window_is(orderer.target, 7.5), "the orderer's window to become 7.5")
    await until(
        lambda: (
            (_object(api, "evb.io/v1alpha1/eventbuilders", name) or {})
            .get("status", {})
            .get("window")
            == 7.5
        ),
        "status.window 7.5",
    )
    status = await until(lambda: _ready(api, name, generation=2), "Ready=True at generation 2")
    assert status["observedGeneration"] == 2
    now = _children(api, name)
    assert now is not None
    assert {kind: child["metadata"]["uid"] for kind, child in now.items()} == uids
    for resource, pattern in CHILDREN.values():
        history = api.objects[(resource, NAMESPACE, pattern.format(name))].history
        assert None not in list(history), f"{resource} was deleted"
    creations = [
        r
        for r in list(api)
        if r.method == "POST"
        and r.resource is not None
        and r.resource.plural in {"configmaps", "services", "statefulsets", "sparkapplications"}
    ]
    assert all(
        pattern.format(name) in {r.data["metadata"]["name"] for r in creations}
        for _, pattern in CHILDREN.values()
    )

    # a new orderer image -> the StatefulSet's pod template changes (the pod rolls), same object
    await _merge_patch(api, name, {"spec": {"orderer": {"image": "evb:0.2.0"}}})

    def rolled() -> dict[str, Any] | None:
        statefulset = _object(api, "apps/v1/statefulsets", f"{name}-orderer") or {}
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        return statefulset if container["image"] == "evb:0.2.0" else None

    statefulset = await until(rolled, "the new image in the pod template")
    assert statefulset["metadata"]["uid"] == uids["StatefulSet"]

    # an invalid EventBuilder -> phase Invalid naming the field, no children, no retry loop
    bad = _eventbuilder("bad", orderer.target, buildWindow=10, barrierTimeout=5)
    response = await api.post(f"{EVB}/namespaces/{NAMESPACE}/eventbuilders", json=bad)
    assert response.status == 200

    def invalid_status() -> dict[str, Any] | None:
        status = (_object(api, "evb.io/v1alpha1/eventbuilders", "bad") or {}).get("status", {})
        return status if status.get("phase") == "Invalid" else None

    status = await until(invalid_status, "the invalid EventBuilder's status")
    (valid,) = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert valid["status"] == "False" and valid["message"].startswith("spec.barrierTimeout")
    assert _object(api, "v1/configmaps", "bad-orderer-config") is None
    assert "invalid spec" in operator.text() and "Traceback" not in operator.text()

    # state Ended -> EndRun
    await _merge_patch(api, name, {"spec": {"state": "Ended"}})
    stats = await until(lambda: _run_ended(orderer.target), "the orderer to end the run")
    assert stats.queued == 0

    def ended() -> bool:
        status = (_object(api, "evb.io/v1alpha1/eventbuilders", name) or {}).get("status", {})
        return status.get("phase") == "Ended" and status.get("runEnded") is True

    await until(ended, "phase Ended")

    # delete -> the children go (the Spark job first), then the EventBuilder itself
    for doomed in (name, "bad"):
        response = await api.delete(f"{EVB}/namespaces/{NAMESPACE}/eventbuilders/{doomed}")
        assert response.status == 200
    await until(
        lambda: (
            _object(api, "evb.io/v1alpha1/eventbuilders", name) is None
            and _object(api, "evb.io/v1alpha1/eventbuilders", "bad") is None
        ),
        "the EventBuilders to be gone (finalizers released)",
    )
    for resource, pattern in CHILDREN.values():
        assert _object(api, resource, pattern.format(name)) is None, resource
    deletions = [
        r.url.path
        for r in list(api)
        if r.method == "DELETE"
        and "namespaces/daq/" in r.url.path
        and "/eventbuilders/" not in r.url.path
    ]
    assert "sparkapplications" in deletions[0]

    # least privilege holds: every call of the operator is allowed by the chart's RBAC
    allowed = _rbac_rules()
    calls = operator_calls(api)
    assert calls, "no call recorded"
    assert calls <= allowed, sorted(calls - allowed)


def operator_calls(api: KubernetesAPI) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every call the operator made to the emulated API server
    (not the test's own, which KMock's client makes), for the RBAC check: discovery
    (``/api/v1``, ``/apis/...``) is open to every user and left out."""
    return {
        (*_call(r.url.path), _verb(r.method, r.url.path, r.url.query_string))
        for r in list(api)
        if r.resource is not None
        and r.resource.plural
        and "kmock" not in r.headers.get("User-Agent", "")
    }


def _ready(api: KubernetesAPI, name: str, *, generation: int) -> dict[str, Any] | None:
    """The status once Ready is True and computed from ``generation`` (what ``kubectl wait
    --for=condition=Ready`` reads), with the generation acted on."""
    status = (_object(api, "evb.io/v1alpha1/eventbuilders", name) or {}).get("status", {})
    ready = [c for c in status.get("conditions", ()) if c["type"] == "Ready"]
    if (
        ready
        and ready[0]["status"] == "True"
        and ready[0]["observedGeneration"] == generation
        and status.get("observedGeneration") == generation
    ):
        return status
    return None


async def _stats_received(target: str, count: int) -> bool:
    return (await get_stats_async(target)).totals.received >= count


async def _late_stats(target: str) -> Stats | None:
    stats = await get_stats_async(target)
    return stats if stats.totals.late >= 1 else None


async def _window_is(target: str, window: float) -> bool:
    return (await get_stats_async(target)).config.build_window == window


async def _run_ended(target: str) -> Stats | None:
    stats = await get_stats_async(target)
    return stats if stats.run_ended else None


def _events(api: KubernetesAPI, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        dict(obj.raw)
        for (resource, namespace, _), obj in api.objects.items()
        if resource.plural == "events"
        and not obj.deleted
        and obj.raw.get("reason") == reason
        and obj.raw.get("involvedObject", {}).get("name") == name
    ]
