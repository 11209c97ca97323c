"""``evb_operator/kube.py``: the operator's calls through the ``kubernetes`` client package,
against an in-process API emulator (``tests/operator/kubernetes_api.py``): every child the
specs build arrives unchanged and reads back the same, a second create changes nothing, a JSON
patch replaces a whole subtree, writes name the field manager, deletion propagates in the
background, failures carry the HTTP status, and the login hands kopf's executor and the loaded
kubeconfig to the client (``tests/e2e/test_operator.py`` runs the real ``kopf run``)."""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path
from typing import Any

import kmock
import kopf
import pytest
import yaml
from kubernetes import client as k8s

from evb_operator import handlers, kube, specs, validation
from evb_operator.handlers import common
from tests.operator.kubernetes_api import emulated, stored
from tests.operator.kubernetes_api import kubeconfig as api_config

SPEC: dict[str, Any] = {
    "sources": [1, 2],
    "tls": {"secretName": "run-tls", "mutual": True, "clientSecretName": "run-client"},
    "auth": {"tokenSecretRef": {"name": "run-token"}},
    "networkPolicy": {"enabled": True, "allowedClients": [{"podSelector": {}}]},
    "spark": {"dt": 10, "output": {"path": "s3a://bucket/events"}},
}


def _children() -> list[dict[str, Any]]:
    return specs.build_children(
        "run",
        "daq",
        validation.validate(SPEC),
        orderer_image="evb:1",
        spark_image="evb-spark:1",
        operator_namespace="evb-system",
        operator_labels={"app.kubernetes.io/name": "evb-operator"},
        labels={"team": "daq"},
    )


@pytest.mark.asyncio
async def test_every_child_arrives_unchanged_and_reads_back() -> None:
    """The client's own models (kubernetes >= 37 validates bodies with them) drop nothing."""
    async with emulated() as (api, client):
        for child in _children():
            assert await client.create(child), child["kind"]
            name = child["metadata"]["name"]
            assert await client.get(child["apiVersion"], child["kind"], "daq", name) == child
            group, plural = kube.resource(child["apiVersion"], child["kind"])
            version = child["apiVersion"].rsplit("/", 1)[-1]
            resource = f"{group}/{version}/{plural}" if group else f"{version}/{plural}"
            assert stored(api, resource, "daq", name) == child


@pytest.mark.asyncio
async def test_a_second_create_changes_nothing() -> None:
    async with emulated() as (api, client):
        configmap = _children()[0]
        assert await client.create(configmap)
        changed = {**configmap, "data": {"other": "value"}}
        assert await client.create(changed) is False  # 409: exists
        assert stored(api, "v1/configmaps", "daq", "run-orderer-config") == configmap


@pytest.mark.asyncio
async def test_a_json_patch_replaces_a_subtree_and_a_merge_patch_merges() -> None:
    async with emulated() as (api, client):
        sparkapplication = next(c for c in _children() if c["kind"] == "SparkApplication")
        api_version, name = sparkapplication["apiVersion"], sparkapplication["metadata"]["name"]
        await client.create(sparkapplication)
        new_spec = {"type": "Python", "mode": "cluster"}  # every other field removed
        replace = [{"op": "replace", "path": "/spec", "value": new_spec}]
        patched = await client.patch(api_version, "SparkApplication", "daq", name, replace)
        assert patched is not None and patched["spec"] == new_spec
        merged = await client.patch(
            api_version, "SparkApplication", "daq", name, {"spec": {"mode": "client"}}
        )
        assert merged is not None and merged["spec"] == {"type": "Python", "mode": "client"}
        methods = [(r.method, r.headers.get("Content-Type")) for r in list(api)][-2:]
        assert methods == [
            ("PATCH", "application/json-patch+json"),
            ("PATCH", "application/merge-patch+json"),
        ]


@pytest.mark.asyncio
async def test_absent_objects_are_none_or_false() -> None:
    async with emulated() as (_, client):
        assert await client.get("v1", "Secret", "daq", "missing") is None
        assert await client.patch("apps/v1", "StatefulSet", "daq", "missing", {"a": 1}) is None
        assert await client.delete("networking.k8s.io/v1", "NetworkPolicy", "daq", "x") is False


@pytest.mark.asyncio
async def test_writes_name_the_field_manager_and_delete_propagates_in_background() -> None:
    async with emulated() as (api, client):
        statefulset = next(c for c in _children() if c["kind"] == "StatefulSet")
        await client.create(statefulset)
        await client.patch("apps/v1", "StatefulSet", "daq", "run-orderer", {"spec": {}})
        assert await client.delete("apps/v1", "StatefulSet", "daq", "run-orderer")
        create, patch, delete = list(api)
        assert create.params["fieldManager"] == patch.params["fieldManager"] == "evb-operator"
        assert delete.params["propagationPolicy"] == "Background"
        assert {r.headers["User-Agent"] for r in (create, patch, delete)} == {kube.USER_AGENT}
        assert stored(api, "apps/v1/statefulsets", "daq", "run-orderer") is None


class Refusing(kmock.KubernetesEmulator):
    """Answers 403 (RBAC) to every write, as an API server whose role lacks the verb."""

    async def _handle(self, request: kmock.Request) -> Any:
        if request.method != "GET" and request.resource is not None:
            raise kmock.KubernetesError(status=403, reason="Forbidden", message="no patch here")
        return await super()._handle(request)


@pytest.mark.asyncio
async def test_a_refusal_carries_the_status_and_the_servers_message() -> None:
    async with emulated(Refusing()) as (_, client):
        with pytest.raises(kube.KubeError, match="no patch here") as failure:
            await client.patch("v1", "ConfigMap", "daq", "x", {"data": {}})
        assert failure.value.status == 403
        assert isinstance(common.kube_error(failure.value), kopf.TemporaryError)


@pytest.mark.asyncio
async def test_an_object_the_client_refuses_is_permanent() -> None:
    """kubernetes >= 37 checks a built-in kind before sending it: as the server's 422."""
    async with emulated() as (api, client):
        broken = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "b"}}
        broken["metadata"]["namespace"] = "daq"
        broken["spec"] = {"replicas": 1}  # no selector, no template
        with pytest.raises(kube.KubeError) as failure:
            await client.create(broken)
        assert failure.value.status == 422 and "selector" in failure.value.message
        assert isinstance(common.kube_error(failure.value), kopf.PermanentError)
        assert not list(api)  # nothing was sent


@pytest.mark.asyncio
async def test_no_answer_is_status_zero() -> None:
    configuration = k8s.Configuration(host="http://127.0.0.1:9")  # discard: nothing listens
    configuration.retries = 0
    unreachable = kube.Kube(configuration)
    try:
        with pytest.raises(kube.KubeError) as failure:
            await unreachable.get("v1", "ConfigMap", "daq", "x")
        assert failure.value.status == 0
    finally:
        unreachable.close()


def test_an_unmanaged_kind_is_an_error() -> None:
    with pytest.raises(kube.KubeError, match="Pod"):
        kube.resource("v1", "Pod")
    assert kube.resource("networking.k8s.io/v1", "NetworkPolicy") == (
        "networking.k8s.io",
        "networkpolicies",
    )


def test_no_client_before_login() -> None:
    kube.disconnect()
    with pytest.raises(kube.KubeError, match="not logged in"):
        kube.current()


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        CountingExecutor.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.asyncio
async def test_login_loads_the_kubeconfig_and_calls_run_in_kopfs_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as server:
        api.resources.load_bundled()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(api_config(str(server.url), {"token": "secret-token"}))
        )
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a cluster
        monkeypatch.setattr(
            "kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)
        )
        settings = kopf.OperatorSettings()
        executor = CountingExecutor(max_workers=1)
        settings.execution.executor = executor
        try:
            info = await handlers.login(settings=settings, logger=logging.getLogger("test"))
            assert info is not None and info.token == "secret-token"
            before = CountingExecutor.submitted
            assert await kube.current().get("v1", "ConfigMap", "daq", "x") is None
            assert CountingExecutor.submitted == before + 1
            tried, read = list(api)  # the login tried the credentials (a discovery read)
            assert tried.url.path == "/apis/evb.io/v1alpha1"
            for request in (tried, read):
                assert request.headers["Authorization"] == "Bearer secret-token"  # kopf's too
        finally:
            kube.disconnect()
            executor.shutdown()
