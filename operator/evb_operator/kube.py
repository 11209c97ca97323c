"""The few Kubernetes API calls the operator makes on its children: create, get, patch, delete.

Why not a client library: kopf already speaks to the API server over aiohttp with the credentials
of its login handlers (:class:`kopf.ConnectionInfo`), and the operator needs four verbs on five
kinds. :func:`connect` is called by the login handler in :mod:`evb_operator.handlers` with the
same credentials kopf uses; :func:`current` gives the client to the other handlers.

Every failure is a :class:`KubeError` with the HTTP status (0: no answer); the handlers translate
it once into ``kopf.TemporaryError``/``PermanentError``. A patch is a JSON merge patch (a mapping)
or a JSON patch (a list of operations: ``replace`` swaps a whole subtree, fields removed
included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import kopf

from evb_operator import __version__

__all__ = ["Kube", "KubeError", "connect", "current", "disconnect", "resource_path"]

USER_AGENT = f"evb-operator/{__version__}"

PLURALS: dict[str, str] = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "StatefulSet": "statefulsets",
    "NetworkPolicy": "networkpolicies",
    "SparkApplication": "sparkapplications",
    "Secret": "secrets",
    "EventBuilder": "eventbuilders",
}
"""Resource names of the kinds the operator touches (no discovery needed for these)."""


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP status, 0 when the server did not answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status or 'no answer'}: {message}")
        self.status = status
        self.message = message


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """``/api/v1/namespaces/ns/services[/name]`` or ``/apis/group/version/...``."""
    try:
        plural = PLURALS[kind]
    except KeyError:
        raise KubeError(0, f"the operator does not manage {kind} objects") from None
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    path = f"{root}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name is not None else path


class Kube:
    """An aiohttp session to the API server, built from kopf's connection info."""

    def __init__(self, info: kopf.ConnectionInfo, *, timeout: float = 30.0) -> None:
        self._info = info
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def server(self) -> str:
        return self._info.server.rstrip("/")

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._info.as_ssl_context()),
                headers={**self._info.as_http_headers(), "User-Agent": USER_AGENT},
                proxy=self._info.proxy_url,
                trust_env=self._info.trust_env,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        session = self._open()
        try:
            async with session.request(
                method,
                self.server + path,
                json=body,
                headers={"Content-Type": content_type} if body is not None else None,
            ) as response:
                try:
                    data = await response.json(content_type=None)
                except ValueError:
                    data = {"message": await response.text()}
                return response.status, data
        except (TimeoutError, aiohttp.ClientError) as error:
            raise KubeError(0, f"{method} {path}: {error!r}") from None

    @staticmethod
    def _fail(method: str, path: str, status: int, data: Any) -> KubeError:
        message = data.get("message", "") if isinstance(data, Mapping) else str(data)
        return KubeError(status, f"{method} {path}: {message}")

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create ``obj``; False if an object of that name exists already (nothing changes)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta["namespace"])
        status, data = await self._call("POST", path, body=obj)
        if status == 409:
            return False
        if status >= 300:
            raise self._fail("POST", path, status, data)
        return True

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None if there is none."""
        path = resource_path(api_version, kind, namespace, name)
        status, data = await self._call("GET", path)
        if status == 404:
            return None
        if status >= 300:
            raise self._fail("GET", path, status, data)
        return dict(data)

    async def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """Patch the object (merge patch, or JSON patch if a list); None if there is none."""
        path = resource_path(api_version, kind, namespace, name)
        kind_of_patch = "merge-patch" if isinstance(patch, Mapping) else "json-patch"
        status, data = await self._call(
            "PATCH", path, body=patch, content_type=f"application/{kind_of_patch}+json"
        )
        if status == 404:
            return None
        if status >= 300:
            raise self._fail("PATCH", path, status, data)
        return dict(data)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete the object (background propagation); False if there was none."""
        path = resource_path(api_version, kind, namespace, name)
        status, data = await self._call(
            "DELETE",
            path,
            body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
        )
        if status == 404:
            return False
        if status >= 300:
            raise self._fail("DELETE", path, status, data)
        return True


class _Holder:
    client: Kube | None = None
    retired: list[Kube] = []


def connect(info: kopf.ConnectionInfo) -> Kube:
    """Use ``info`` from now on (called at every login, e.g. after a token rotation)."""
    if _Holder.client is not None:
        _Holder.retired.append(_Holder.client)
    _Holder.client = Kube(info)
    return _Holder.client


def current() -> Kube:
    """The client of the latest login."""
    if _Holder.client is None:
        raise KubeError(0, "not logged in to the Kubernetes API yet")
    return _Holder.client


async def disconnect() -> None:
    """Close every session (operator cleanup)."""
    clients = [*_Holder.retired, *([_Holder.client] if _Holder.client else [])]
    _Holder.client, _Holder.retired = None, []
    for client in clients:
        await client.close()
