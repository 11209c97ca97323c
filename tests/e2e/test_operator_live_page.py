"""The real operator (``kopf run``, against KMock) with an EventBuilder whose Spark job serves
the live page (``spec.spark.ui``).

One scenario: created with ``ui: 8080``, and changed to 9090 while the operator is still
creating the children (the emulator holds the page's Service until the change is in) -> the
Service ``NAME-live`` exists, owned by the EventBuilder, on port 9090 to the driver's port 9090,
selecting the Spark job's driver; the SparkApplication gives the job ``--ui 0.0.0.0:9090`` and
the driver that port; the status names the page's URL. ``ui`` patched to 7070 once all is
settled -> the same Service on 7070, the job's flag and port and the status follow. Deleted ->
the Service goes with the other children. Every call the operator made is one the chart's RBAC
allows.

No orderer runs: the endpoint override points at a closed port (the status timer still writes
where the page is; the orderer's part of the status is :mod:`tests.e2e.test_operator`'s). The
emulator, the operator's process and the helpers are that module's (its docstring says what
KMock is not).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kmock

from tests.e2e import test_operator as e2e

pytestmark = e2e.pytestmark
cluster = e2e.cluster
"""The emulator and ``kopf run`` against it (the fixture of :mod:`tests.e2e.test_operator`)."""

NAME = "paged"
SERVICE = ("v1/services", f"{NAME}-live")
APP = ("sparkoperator.k8s.io/v1beta2/sparkapplications", f"{NAME}-spark")
CLOSED = "127.0.0.1:1"
"""The endpoint override: no orderer answers there (GetStats fails at once)."""


def _get(api: e2e.KubernetesAPI, where: tuple[str, str]) -> dict[str, Any] | None:
    return e2e._object(api, *where)


def _on_port(api: e2e.KubernetesAPI, port: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The Service and the SparkApplication once both say ``port``."""
    service, app = _get(api, SERVICE), _get(api, APP)
    if service is None or app is None:
        return None
    args = app["spec"]["arguments"]
    if "--ui" not in args or args[args.index("--ui") + 1] != f"0.0.0.0:{port}":
        return None
    if [p["port"] for p in service["spec"]["ports"]] != [port]:
        return None
    return service, app


def _page(api: e2e.KubernetesAPI) -> str | None:
    body = _get(api, ("evb.io/v1alpha1/eventbuilders", NAME)) or {}
    ui = body.get("status", {}).get("spark", {}).get("ui")
    return None if ui is None else str(ui)


async def test_the_live_page_gets_a_service_the_status_names_and_deletion_removes(
    cluster: tuple[e2e.KubernetesAPI, e2e.Operator],
) -> None:
    api, operator = cluster
    held = api.hold(*SERVICE)
    spark = {"dt": 100, "output": {"path": "s3a://daq/paged"}, "ui": 8080}
    response = await api.post(
        f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders",
        json=e2e._eventbuilder(NAME, CLOSED, sources=[1, 2], spark=spark),
    )
    assert response.status == 200, await response.text()
    owner_uid = (await response.json())["metadata"]["uid"]

    # changed while the creation is being handled: the operator acts on the change too (kopf
    # once folded it into the creation, and the children kept the first port)
    await asyncio.wait_for(held.arrived.wait(), e2e.TIMEOUT)
    await e2e._merge_patch(api, NAME, {"spec": {"spark": {"ui": 9090}}})
    held.released.set()
    service, app = await e2e.until(lambda: _on_port(api, 9090), "the page's Service on 9090")
    (reference,) = service["metadata"]["ownerReferences"]
    assert reference["uid"] == owner_uid and reference["kind"] == "EventBuilder"
    assert reference["controller"] is True
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == 9090
    (driver_port,) = app["spec"]["driver"]["ports"]
    assert (driver_port["name"], driver_port["containerPort"]) == ("live-page", 9090)
    selector = service["spec"]["selector"]
    assert selector.pop("spark-role") == "driver"  # Spark's label: the driver, no executor
    assert selector.items() <= app["spec"]["driver"]["labels"].items()
    url = f"http://{NAME}-live.{e2e.NAMESPACE}.svc:9090/"
    await e2e.until(lambda: _page(api) == url, "status.spark.ui")

    # another port once all is settled: the same Service on it, the job's flag and the status
    await e2e._merge_patch(api, NAME, {"spec": {"spark": {"ui": 7070}}})
    moved, _ = await e2e.until(lambda: _on_port(api, 7070), "the page on 7070")
    assert moved["metadata"]["uid"] == service["metadata"]["uid"]
    history = api.objects[(kmock.resource(SERVICE[0]), e2e.NAMESPACE, SERVICE[1])].history
    assert None not in list(history), "the Service was deleted"
    url = f"http://{NAME}-live.{e2e.NAMESPACE}.svc:7070/"
    await e2e.until(lambda: _page(api) == url, "status.spark.ui on 7070")

    # deletion: the Service goes with the other children
    response = await api.delete(f"{e2e.EVB}/namespaces/{e2e.NAMESPACE}/eventbuilders/{NAME}")
    assert response.status == 200
    await e2e.until(
        lambda: _get(api, ("evb.io/v1alpha1/eventbuilders", NAME)) is None,
        "the EventBuilder to be gone (finalizer released)",
    )
    assert _get(api, SERVICE) is None and _get(api, APP) is None
    assert "Traceback" not in operator.text()

    allowed = e2e._rbac_rules()
    calls = e2e.operator_calls(api)
    assert ("", "services", "patch") in calls
    assert calls <= allowed, sorted(calls - allowed)
