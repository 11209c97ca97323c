"""The few Kubernetes API calls the operator makes on its children: create, get, patch, delete,
through the official ``kubernetes`` client package; the only module of the operator that talks
to the API server (kopf talks for itself about the EventBuilders).

Why the synchronous client in kopf's executor, not an asyncio client: the operator makes a
handful of calls per reconciliation and two per status tick, so a thread per call costs nothing
measurable, while the synchronous client is the one every ``kubernetes`` release since 30 ships
with the same call signatures (``kubernetes_asyncio`` is a separate port with its own release
cycle; the asyncio client inside the package is new in 37). Each call runs in
``settings.execution.executor``, the pool kopf runs synchronous handlers in, so the operator
has one place to size its threads.

Why typed APIs (``CoreV1Api``, ``AppsV1Api``, ``NetworkingV1Api``; ``CustomObjectsApi`` for the
SparkApplication) and not the DynamicClient: the kinds are known (:data:`KINDS`), so no
discovery call and no discovery cache file (the operator's root filesystem is read-only).
Bodies go in and come out as plain mappings (``_preload_content=False``): the specs are built
as mappings, and a typed model would refuse a status a controller has only half written.

Why create + JSON patch and not server-side apply: the test API server (KMock, which the end-to-
end test runs the real ``kopf run`` against) implements no apply: it ignores the content type
(an apply body becomes a merge patch, which keeps fields the operator dropped) and answers 404 to
an apply of an absent object, which a real server creates. Ownership stays simple without it:
the children are created once under fixed names, and a spec change replaces one whole subtree
(a JSON patch ``replace``, fields removed included). Every write names the field manager
``evb-operator``, so ``managedFields`` attributes the operator's fields to it on a real server.

Configuration: the in-cluster service account, else the kubeconfig (``KUBECONFIG``), loaded by
the ``kubernetes`` package once per login (:func:`kopf.login_via_client` in
:mod:`evb_operator.handlers.activities`), so kopf and these calls use the same credentials;
:func:`connect` takes them at every login (a rotated token included), :func:`current` gives the
client to the handlers.

Every failure is a :class:`KubeError` with the HTTP status (0: no answer); the handlers translate
it once into ``kopf.TemporaryError``/``PermanentError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client

from evb_operator import __version__

__all__ = ["KINDS", "Kube", "KubeError", "connect", "current", "disconnect", "resource"]

USER_AGENT = f"evb-operator/{__version__}"
FIELD_MANAGER = "evb-operator"
"""Who wrote the operator's fields, in the children's ``managedFields``."""
TIMEOUT = 30.0
"""Seconds one call may take (connect and read)."""
PROBE_TIMEOUT = 5.0
"""Seconds the readiness check may take: less than the chart's probe timeout (10 s)."""


@dataclass(frozen=True)
class Kind:
    """How the client package reaches one kind: a typed API and its method suffix, or the custom
    objects API (``api`` None) with the plural."""

    plural: str
    api: type[Any] | None = None
    suffix: str = ""


KINDS: dict[str, Kind] = {
    "ConfigMap": Kind("configmaps", client.CoreV1Api, "config_map"),
    "Service": Kind("services", client.CoreV1Api, "service"),
    "Secret": Kind("secrets", client.CoreV1Api, "secret"),
    "StatefulSet": Kind("statefulsets", client.AppsV1Api, "stateful_set"),
    "Deployment": Kind("deployments", client.AppsV1Api, "deployment"),
    "NetworkPolicy": Kind("networkpolicies", client.NetworkingV1Api, "network_policy"),
    "SparkApplication": Kind("sparkapplications"),
}
"""The kinds the operator touches (no discovery needed for these; kopf reads and patches the
EventBuilders)."""


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP status, 0 when the server did not answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status or 'no answer'}: {message}")
        self.status = status
        self.message = message


def resource(api_version: str, kind: str) -> tuple[str, str]:
    """(API group, plural) of a kind the operator manages: what RBAC rules name."""
    try:
        plural = KINDS[kind].plural
    except KeyError:
        raise KubeError(0, f"the operator does not manage {kind} objects") from None
    return (api_version.rsplit("/", 1)[0] if "/" in api_version else ""), plural


def _message(error: client.ApiException) -> str:
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return str(error.body or error.reason)
    return str(body.get("message", body)) if isinstance(body, Mapping) else str(body)


class Kube:
    """An API client from the loaded configuration; its calls run in ``executor``."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        self._client = client.ApiClient(configuration)
        self._client.user_agent = USER_AGENT
        self._executor = executor

    def close(self) -> None:
        self._client.close()

    def _invoke(
        self, verb: str, api_version: str, kind: str, namespace: str, **arguments: Any
    ) -> Any:
        """``<verb>_namespaced_<kind>`` of the typed API, or of the custom objects API."""
        _, plural = resource(api_version, kind)
        known = KINDS[kind]
        if known.api is not None:
            typed_verb = "read" if verb == "get" else verb
            method = getattr(known.api(self._client), f"{typed_verb}_namespaced_{known.suffix}")
        else:
            group, version = api_version.split("/")
            custom = client.CustomObjectsApi(self._client)
            method = getattr(custom, f"{verb}_namespaced_custom_object")
            arguments.update(group=group, version=version, plural=plural)
        response = method(
            namespace=namespace, _preload_content=False, _request_timeout=TIMEOUT, **arguments
        )
        return json.loads(response.data or b"{}")

    async def _call(
        self, verb: str, api_version: str, kind: str, namespace: str, **arguments: Any
    ) -> Any:
        """Run the call in the executor; every failure as a :class:`KubeError`."""
        call = functools.partial(self._invoke, verb, api_version, kind, namespace, **arguments)
        what = f"{verb} {kind} {arguments.get('name') or ''} in {namespace}".replace("  ", " ")
        return await self._run(call, what)

    async def served(self, api_version: str, timeout: float = PROBE_TIMEOUT) -> None:
        """Raise :class:`KubeError` unless the API server serves ``api_version`` to these
        credentials: a discovery read (``GET /apis/<group>/<version>``), which any
        authenticated client may make, so 401 means the credentials are refused, 404 that the
        group is not installed, 0 no answer."""
        group, version = api_version.split("/")
        api = client.CustomObjectsApi(self._client)
        call = functools.partial(
            api.get_api_resources,
            group,
            version,
            _preload_content=False,
            _request_timeout=timeout,
        )
        await self._run(call, f"discover {api_version}")

    async def _run(self, call: Callable[[], Any], what: str) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except client.ApiException as error:
            raise KubeError(int(error.status or 0), f"{what}: {_message(error)}") from None
        except urllib3.exceptions.HTTPError as error:
            raise KubeError(0, f"{what}: {error!r}") from None
        except ValueError as error:  # refused by the client's own schema (kubernetes >= 37)
            raise KubeError(422, f"{what}: {error}") from None

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create ``obj``; False if an object of that name exists already (nothing changes)."""
        meta = obj["metadata"]
        try:
            await self._call(
                "create",
                obj["apiVersion"],
                obj["kind"],
                meta["namespace"],
                body=dict(obj),
                field_manager=FIELD_MANAGER,
            )
        except KubeError as error:
            if error.status == 409:
                return False
            raise
        return True

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None if there is none."""
        try:
            return dict(await self._call("get", api_version, kind, namespace, name=name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """Patch the object (merge patch, or JSON patch if a list); None if there is none."""
        kind_of_patch = "merge-patch" if isinstance(patch, Mapping) else "json-patch"
        body: Any = dict(patch) if isinstance(patch, Mapping) else [dict(op) for op in patch]
        try:
            return dict(
                await self._call(
                    "patch",
                    api_version,
                    kind,
                    namespace,
                    name=name,
                    body=body,
                    field_manager=FIELD_MANAGER,
                    _content_type=f"application/{kind_of_patch}+json",
                )
            )
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete the object (background propagation); False if there was none."""
        try:
            await self._call(
                "delete", api_version, kind, namespace, name=name, propagation_policy="Background"
            )
        except KubeError as error:
            if error.status == 404:
                return False
            raise
        return True


class _Holder:
    client: Kube | None = None
    retired: list[Kube] = []


def connect(
    configuration: client.Configuration | None = None,
    *,
    executor: concurrent.futures.Executor | None = None,
) -> Kube:
    """Use ``configuration`` (default: the one the last login loaded) from now on; called at every
    login, e.g. after a token rotation."""
    if _Holder.client is not None:
        _Holder.retired.append(_Holder.client)
    if configuration is None:
        configuration = client.Configuration.get_default_copy()
    _Holder.client = Kube(configuration, executor=executor)
    return _Holder.client


def current() -> Kube:
    """The client of the latest login."""
    if _Holder.client is None:
        raise KubeError(0, "not logged in to the Kubernetes API yet")
    return _Holder.client


def disconnect() -> None:
    """Close every connection pool (operator cleanup)."""
    clients = [*_Holder.retired, *([_Holder.client] if _Holder.client else [])]
    _Holder.client, _Holder.retired = None, []
    for kube in clients:
        kube.close()
