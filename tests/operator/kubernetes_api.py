"""An in-process Kubernetes API emulator (KMock on loopback, in the test's own event loop) with
the operator's client (:class:`evb_operator.kube.Kube`) connected to it, for the tests of the
operator's API calls: ``test_kube.py`` (what the calls do) and ``test_rbac.py`` (which
(apiGroup, resource, verb) they need). The calls run in a thread (kopf's executor in the
operator), the emulator in the event loop, as in the operator.

KMock stores objects as plain JSON (a patch body that is a mapping is merged, a list is a JSON
patch; the Content-Type is not read), runs no controllers and enforces no RBAC; it answers 409
to a create of an existing object and 404 to a read, patch or delete of an absent one.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import kmock
from kubernetes import client

from evb_operator import kube

VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _sparkapplications(api: kmock.KubernetesEmulator) -> None:
    api.resources.load_bundled()  # the built-in kinds of a recent cluster (K3s)
    api.resources["sparkoperator.k8s.io/v1beta2/sparkapplications"] = kmock.ResourceInfo(
        kind="SparkApplication",
        singular="sparkapplication",
        namespaced=True,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
        subresources={"status"},
    )


@asynccontextmanager
async def emulated(
    api: kmock.KubernetesEmulator | None = None,
) -> AsyncIterator[tuple[kmock.KubernetesEmulator, kube.Kube]]:
    """The emulator serving on loopback and the operator's client connected to it (also as
    :func:`evb_operator.kube.current`, as after a login); disconnected at the end."""
    api = kmock.KubernetesEmulator() if api is None else api  # an empty one is falsy
    async with api as emulator, kmock.Server(emulator) as server:
        _sparkapplications(emulator)
        try:
            yield emulator, kube.connect(client.Configuration(host=str(server.url).rstrip("/")))
        finally:
            kube.disconnect()


def kubeconfig(server: str, user: dict[str, Any] | None = None) -> dict[str, Any]:
    """A kubeconfig with one context: ``server`` as ``user`` (no credentials by default)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": user or {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "test"}}],
        "current-context": "kmock",
    }


def stored(api: kmock.KubernetesEmulator, resource: str, namespace: str, name: str) -> Any:
    """The object as the emulator holds it, or None."""
    key = (kmock.resource(resource), namespace, name)
    if key not in api.objects or api.objects[key].deleted:
        return None
    return dict(api.objects[key].raw)


def put_secret(api: kmock.KubernetesEmulator, namespace: str, name: str, **data: bytes) -> None:
    """A Secret, written straight into the emulator (no API call recorded)."""
    api.objects[(kmock.resource("v1/secrets"), namespace, name)] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def calls(api: kmock.KubernetesEmulator) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) of every request the emulator received: what an
    RBAC rule has to grant for it."""
    found = set()
    for request in list(api):
        if request.resource is None:
            continue
        resource = request.resource.plural
        if request.subresource:
            resource += "/" + request.subresource
        if request.method == "GET":
            verb = "get" if request.name else "list"
        else:
            verb = VERBS[request.method]
        found.add((request.resource.group or "", resource, verb))
    return found
