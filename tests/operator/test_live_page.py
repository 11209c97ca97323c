"""The Spark job's live page on Kubernetes (``spec.spark.ui``; ``evb_operator/crd/live.py``,
``specs/live.py`` and their parts in ``specs/spark.py``, ``status`` and ``handlers``).

What the user writes and gets: a port in ``spec.spark.ui`` gives the driver ``--ui
0.0.0.0:PORT`` and a named container port, a ClusterIP Service ``NAME-live`` on that port
selecting the driver alone, and ``status.spark.ui`` naming the page's URL; without it none of
this exists, with one orderer or three. The CRD refuses a port out of range or one of Spark's
own (the generated CRD file, as the API server holds it, and the operator's twin alike, both
naming the field), and refuses setting or unsetting the page while ``output.path`` stays (the
job keeps the page's totals in the run's checkpoint; the port may change). No NetworkPolicy
the operator or the chart makes selects the driver, so nothing closes the page's port. The
handlers, against the in-process API emulator: the Service is created owned by the
EventBuilder, its port follows a change, it goes when the page or the EventBuilder goes
(``tests/e2e/test_operator_live_page.py`` runs the same through ``kopf run``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import kopf
import pytest

from evb_operator import crd, handlers, specs, validation
from evb_operator import status as evb_status
from evb_operator.specs import common as specs_common
from evb_operator.specs import live as specs_live
from evb_operator.specs import network as specs_network
from evb_operator.specs import spark as specs_spark
from evb_operator.typed_spec import Spark
from orderer import client as orderer_client
from orderer.config import OrdererConfig
from orderer.job_config import JobConfig
from tests.operator.conftest import stats_answer, validate_builtin
from tests.operator.kubernetes_api import emulated, stored
from tests.operator.test_chart import GENERATOR
from tests.operator.test_chart_observability import ALL_ON, MONITORING, render
from tests.operator.test_fuzz_spec import SPEC_SCHEMA, _cel, _rules, api_server_accepts

SPARK: dict[str, Any] = {"dt": 100, "output": {"path": "s3a://daq/run"}}
PAGE = {**SPARK, "ui": 8080}
THREE = {"orderers": 3, "sliceTicks": 1_000_000}
NAME, NAMESPACE = "run1", "daq"

SHAPES = {
    "one orderer, no page": {"spark": SPARK},
    "one orderer, page": {"spark": PAGE},
    "three orderers, no page": {**THREE, "spark": SPARK},
    "three orderers, page": {**THREE, "spark": PAGE},
    "policy, page": {"networkPolicy": {"enabled": True}, "spark": PAGE},
}


def _children(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return specs.build_children(
        NAME,
        NAMESPACE,
        validation.validate(spec),
        orderer_image="evb:0.1.0",
        spark_image="evb-spark:0.1.0",
        operator_namespace="evb-system",
        operator_labels={"app.kubernetes.io/name": "evb-operator"},
        labels={"team": "daq"},
    )


def _named(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    found = [ch for ch in children if ch["kind"] == kind and ch["metadata"]["name"] == name]
    assert len(found) <= 1
    return found[0] if found else None


def _app(children: list[dict[str, Any]]) -> dict[str, Any]:
    app = _named(children, "SparkApplication", f"{NAME}-spark")
    assert app is not None
    return app


def _driver_pod_labels(app: Mapping[str, Any]) -> dict[str, str]:
    """The labels the driver pod gets: the SparkApplication's ``driver.labels``, Spark's
    ``spark-role`` and the Spark operator's own (``sparkoperator.k8s.io/app-name``)."""
    return {
        **app["spec"]["driver"]["labels"],
        "spark-role": "driver",
        "sparkoperator.k8s.io/app-name": app["metadata"]["name"],
    }


# ----------------------------------------------------------------------------- the objects


@pytest.mark.parametrize("spec", SHAPES.values(), ids=SHAPES.keys())
def test_every_child_validates_with_and_without_the_page(
    spec: dict[str, Any], validate_spark: Callable[[dict[str, Any]], None]
) -> None:
    for child in _children(spec):
        if child["kind"] == "SparkApplication":
            validate_spark(child)
        else:
            validate_builtin(child)


@pytest.mark.parametrize("orderers", [{}, THREE], ids=["one orderer", "three orderers"])
def test_a_port_gives_the_driver_the_flag_and_the_port_and_a_service_in_front(
    orderers: dict[str, Any],
) -> None:
    children = _children({**orderers, "spark": PAGE})
    app = _app(children)
    service = _named(children, "Service", f"{NAME}-live")
    assert service is not None
    # the job: --ui on every interface of the pod, from the JobConfig the operator builds
    job = JobConfig.from_argv(app["spec"]["arguments"])
    assert job.ui == "0.0.0.0:8080"
    valid = validation.validate({**orderers, "spark": PAGE})
    assert valid.spark is not None
    config = specs_spark.spark_job_config(
        NAME, NAMESPACE, valid.spark, target=specs_common.run_targets(NAME, NAMESPACE, valid)
    )
    assert app["spec"]["arguments"] == config.to_argv()
    # the driver's named port, the executors none
    assert app["spec"]["driver"]["ports"] == [
        {"name": "live-page", "containerPort": 8080, "protocol": "TCP"}
    ]
    assert "ports" not in app["spec"]["executor"]
    # the Service: ClusterIP, on the port, to the driver's port, selecting the driver only
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port == {"name": "live-page", "port": 8080, "targetPort": 8080, "protocol": "TCP"}
    selector = service["spec"]["selector"]
    assert selector.items() <= _driver_pod_labels(app).items()
    executor = {**app["spec"]["executor"]["labels"], "spark-role": "executor"}
    assert not selector.items() <= executor.items()
    assert selector == {
        **specs_common.selector_labels(NAME, "spark"),
        "spark-role": "driver",
    }
    assert service["metadata"]["labels"]["team"] == "daq"  # the owner's labels, as every child's
    assert service["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("orderers", [{}, THREE], ids=["one orderer", "three orderers"])
def test_without_a_port_there_is_no_flag_no_port_and_no_service(orderers: dict[str, Any]) -> None:
    children = _children({**orderers, "spark": SPARK})
    app = _app(children)
    assert "--ui" not in app["spec"]["arguments"]
    assert JobConfig.from_argv(app["spec"]["arguments"]).ui is None
    assert "ports" not in app["spec"]["driver"]
    assert _named(children, "Service", f"{NAME}-live") is None
    # and no Spark section at all: nothing of the page either
    assert _named(_children({**orderers}), "Service", f"{NAME}-live") is None


def _typed_spark(spark: dict[str, Any]) -> Spark:
    """The valid spec's Spark section of ``spark``."""
    typed = validation.validate({"spark": spark}).spark
    assert typed is not None
    return typed


def test_the_page_address_is_the_services() -> None:
    page = specs_live.page_address(NAME, NAMESPACE, _typed_spark({**SPARK, "ui": 9999}))
    assert page is not None
    assert page.url == "http://run1-live.daq.svc:9999/"
    assert page.listen == "0.0.0.0:9999"
    assert specs_live.page_address(NAME, NAMESPACE, _typed_spark(SPARK)) is None
    assert specs_live.page_address(NAME, NAMESPACE, None) is None
    service = _named(_children({"spark": {**SPARK, "ui": 9999}}), "Service", "run1-live")
    assert service is not None
    assert page.url == (
        f"http://{service['metadata']['name']}.{NAMESPACE}.svc:{service['spec']['ports'][0]['port']}/"
    )


def test_the_page_goes_with_the_spark_job_on_deletion() -> None:
    order = specs_common.DELETION_ORDER
    assert order.index(specs_common.LIVE) == order.index(specs_common.SPARKAPPLICATION) + 1


def test_a_new_port_changes_the_sparkapplication_and_the_service() -> None:
    """update_spark patches the SparkApplication's /spec (the Spark operator resubmits the job)
    and the Service's /spec/ports: a new port must change both."""
    before, after = _children({"spark": PAGE}), _children({"spark": {**PAGE, "ui": 8081}})
    assert _app(before)["spec"] != _app(after)["spec"]
    old, new = (_named(ch, "Service", f"{NAME}-live") for ch in (before, after))
    assert old is not None and new is not None
    assert old["spec"]["ports"] != new["spec"]["ports"]
    assert old["spec"]["selector"] == new["spec"]["selector"]


# ----------------------------------------------------------------------------- the CRD


@pytest.mark.parametrize("port", [0, 80, 443, 1023, 65536, 2**31])
def test_a_port_out_of_range_is_refused_naming_the_field(port: int) -> None:
    spec = {"spark": {**SPARK, "ui": port}}
    accepted, why = api_server_accepts(spec)
    assert not accepted and why.startswith("schema:"), why
    # the API server names the field from the error's path (spec.spark.ui: Invalid value: ...)
    full = validation.with_defaults(SPEC_SCHEMA, spec)
    (error,) = jsonschema.Draft4Validator(SPEC_SCHEMA).iter_errors(full)
    assert list(error.path) == ["spark", "ui"]
    with pytest.raises(validation.InvalidSpec) as refused:
        validation.validate(spec)
    assert refused.value.field == "spec.spark.ui"


@pytest.mark.parametrize("port", [4040, 7078, 7079])
def test_a_port_spark_takes_in_the_driver_is_refused_naming_the_field(port: int) -> None:
    spec = {"spark": {**SPARK, "ui": port}}
    accepted, why = api_server_accepts(spec)
    assert not accepted and why.startswith("CEL: ui cannot be one of the ports Spark"), why
    ruled = [(path, e["fieldPath"]) for path, e in _rules(SPEC_SCHEMA) if "self.ui in" in e["rule"]]
    assert ruled == [(("spark",), ".ui")]  # the API server reports it under spec.spark.ui
    with pytest.raises(validation.InvalidSpec) as refused:
        validation.validate(spec)
    assert refused.value.field == "spec.spark.ui"
    assert f"{port} (" in refused.value.message  # the port, with what Spark uses it for


@pytest.mark.parametrize("port", [1024, 4041, 8080, 65535])
def test_a_port_in_range_is_accepted(port: int) -> None:
    spec = {"spark": {**SPARK, "ui": port}}
    assert api_server_accepts(spec) == (True, "")
    assert _typed_spark(spec["spark"]).ui == port


def test_the_field_says_what_it_does() -> None:
    ui = crd.SPEC_SCHEMA["properties"]["spark"]["properties"]["ui"]
    assert (ui["type"], ui["minimum"], ui["maximum"]) == ("integer", 1024, 65535)
    assert "default" not in ui  # unset: no page
    for words in ("live page", "read-only", "NAME-live", "status.spark.ui", "Unset: no page"):
        assert words in ui["description"], words


def _spark(path: str = "s3a://daq/run", **fields: Any) -> dict[str, Any]:
    spark = {"dt": 100, **fields, "output": {"path": path}}
    return validation.with_defaults(SPEC_SCHEMA["properties"]["spark"], spark)


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        (_spark(), _spark(), True),
        (_spark(ui=8080), _spark(ui=8080), True),
        (_spark(ui=8080), _spark(ui=9090), True),  # the port may change
        (_spark(), _spark(ui=8080), False),  # the page's totals are not in the checkpoint
        (_spark(ui=8080), _spark(), False),  # the job would refuse to resume without them
        (_spark(), _spark(path="s3a://daq/again", ui=8080), True),  # built again elsewhere
        (_spark(ui=8080), _spark(path="s3a://daq/again"), True),
    ],
)
def test_the_page_is_set_or_unset_only_with_a_new_output(
    old: dict[str, Any], new: dict[str, Any], allowed: bool
) -> None:
    """The job records that it keeps the page's totals (``liveTotals``) at the run's start and
    refuses to resume otherwise: the CRD's building rule (the generated file's CEL, as the API
    server runs it) and the operator's twin refuse that change, naming ``spec.spark.ui``."""
    (rule,) = [
        e["rule"]
        for path, e in _rules(SPEC_SCHEMA)
        if path == ("spark",) and "oldSelf" in e["rule"]
    ]
    assert _cel(rule, new, SPEC_SCHEMA["properties"]["spark"], old=old) is allowed
    try:
        validation.validate_change({"spark": old}, {"spark": new})
    except validation.InvalidSpec as error:
        assert not allowed
        assert error.field == "spec.spark.ui"
        assert "ui be set or unset" in error.message
    else:
        assert allowed


# ----------------------------------------------------------------------------- the status


VALID_PAGE = validation.validate({"spark": PAGE})
PAGE_ADDRESS = specs_live.page_address(NAME, NAMESPACE, VALID_PAGE.spark)
STATEFULSET = {"metadata": {"name": "run1-orderer"}, "spec": {}, "status": {"readyReplicas": 1}}
RUNNING = {"metadata": {"name": "run1-spark"}, "status": {"applicationState": {"state": "RUNNING"}}}
NOW = "2026-01-01T00:00:00Z"


def _observe(previous: dict[str, Any], **more: Any) -> dict[str, Any]:
    new, _ = evb_status.observe(
        previous,
        valid=more.pop("valid", VALID_PAGE),
        endpoint="e:50051",
        stats=stats_answer(config=OrdererConfig(build_window=5.0)),
        error=None,
        spark=more.pop("spark", RUNNING),
        statefulset=STATEFULSET,
        generation=1,
        now=NOW,
        **more,
    )
    return new


def test_the_status_names_the_page() -> None:
    new = _observe({}, page=PAGE_ADDRESS)
    assert new["spark"] == {"name": "run1-spark", "state": "RUNNING", "ui": "http://run1-live.daq.svc:8080/"}
    checker = jsonschema.Draft4Validator(crd.STATUS_SCHEMA)
    assert not list(checker.iter_errors(new))
    # known from the spec: named before the SparkApplication can be read
    assert _observe({}, page=PAGE_ADDRESS, spark=None)["spark"] == {
        "ui": "http://run1-live.daq.svc:8080/"
    }


def test_a_run_over_three_orderers_names_the_page_too() -> None:
    valid = validation.validate({**THREE, "spark": PAGE})
    stats = stats_answer(config=OrdererConfig(build_window=5.0))
    answers = [evb_status.OrdererAnswer(k, f"o{k}:50051", stats, None) for k in range(3)]
    new, _ = evb_status.observe_orderers(
        {},
        valid=valid,
        endpoint="e:50051",
        answers=answers,
        spark=RUNNING,
        statefulset={**STATEFULSET, "spec": {"replicas": 3}, "status": {"readyReplicas": 3}},
        generation=1,
        now=NOW,
        page=specs_live.page_address(NAME, NAMESPACE, valid.spark),
    )
    assert new["spark"]["ui"] == "http://run1-live.daq.svc:8080/"


def test_without_a_page_the_status_names_none_and_forgets_the_last() -> None:
    valid = validation.validate({"spark": SPARK})
    assert "ui" not in _observe({}, valid=valid)["spark"]
    # the page unset (with a new output.path): the merge patch's null removes the old URL
    previous = {"spark": {"name": "run1-spark", "state": "RUNNING", "ui": "http://x/"}}
    assert _observe(previous, valid=valid)["spark"]["ui"] is None
    assert _observe(previous, valid=valid, spark=None)["spark"] == {"ui": None}


# ----------------------------------------------------------------------------- NetworkPolicy


def _selects(policy: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether ``policy`` applies to a pod of ``namespace`` with ``labels`` (matchLabels; the
    policies here have no matchExpressions)."""
    selector = policy["spec"]["podSelector"]
    assert "matchExpressions" not in selector
    same = policy["metadata"].get("namespace", namespace) == namespace
    return same and selector.get("matchLabels", {}).items() <= labels.items()


@pytest.mark.parametrize("orderers", [{}, THREE], ids=["one orderer", "three orderers"])
def test_no_network_policy_closes_the_pages_port(orderers: dict[str, Any]) -> None:
    """A pod no NetworkPolicy selects takes every connection: the operator's policy selects the
    orderers only and the chart's the operator's pod only, so the driver's page is reachable
    (a policy over the Spark pods would have to admit the page's port: this test says so)."""
    spec = {
        **orderers,
        "networkPolicy": {"enabled": True, "allowedClients": [{"podSelector": {}}]},
        "spark": PAGE,
    }
    children = _children(spec)
    driver = _driver_pod_labels(_app(children))
    policies = [ch for ch in children if ch["kind"] == "NetworkPolicy"]
    assert policies
    policies.append(
        specs_network.build_networkpolicy_spec(NAME, NAMESPACE, validation.validate(spec))
    )
    policies += [o for o in GENERATOR.render_chart(None) if o["kind"] == "NetworkPolicy"]
    policies += [o for o in render(ALL_ON, [MONITORING]) if o["kind"] == "NetworkPolicy"]
    for namespace in (NAMESPACE, GENERATOR.NAMESPACE):  # the chart's, in the operator's own
        assert not [p for p in policies if _selects(p, namespace, driver)]


# ----------------------------------------------------------------------------- the handlers


SPEC: dict[str, Any] = {"sources": [1, 2], "spark": PAGE}


def _common(spec: dict[str, Any], patch: kopf.Patch) -> dict[str, Any]:
    body = {
        "apiVersion": "evb.io/v1alpha1",
        "kind": "EventBuilder",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u-1"},
        "spec": spec,
    }
    return {
        "body": body,
        "spec": spec,
        "name": NAME,
        "namespace": NAMESPACE,
        "labels": {},
        "annotations": {},
        "status": {},
        "patch": patch,
        "logger": logging.getLogger("test"),
    }


def _service_writes(api: Any) -> list[str]:
    """The methods of the writes to Services the emulator received, in order (the orderer's
    Service is created first)."""
    return [
        request.method
        for request in list(api)
        if request.resource is not None
        and request.resource.plural == "services"
        and request.method != "GET"
    ]


def test_the_handlers_make_follow_and_remove_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    async def stats(*_: Any, **__: Any) -> Any:
        return stats_answer(config=OrdererConfig(build_window=20.0))

    monkeypatch.setattr(orderer_client, "get_stats_async", stats)
    monkeypatch.setattr(kopf, "event", lambda *_, **__: None)
    services = "v1/services"
    apps = "sparkoperator.k8s.io/v1beta2/sparkapplications"

    async def scenario() -> None:
        async with emulated() as (api, _):
            await handlers.reconcile(**_common(SPEC, kopf.Patch()))
            service = stored(api, services, NAMESPACE, f"{NAME}-live")
            assert service is not None
            (owner,) = service["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == ("EventBuilder", NAME, "u-1")
            assert owner["controller"] is True
            assert service["spec"]["selector"] == specs_live.driver_selector(NAME)
            assert [p["port"] for p in service["spec"]["ports"]] == [8080]
            app = stored(api, apps, NAMESPACE, f"{NAME}-spark")
            args = app["spec"]["arguments"]
            assert args[args.index("--ui") + 1] == "0.0.0.0:8080"
            assert app["spec"]["driver"]["ports"][0]["containerPort"] == 8080

            patch = kopf.Patch()
            await handlers.refresh_status(**_common(SPEC, patch))
            assert patch["status"]["spark"]["ui"] == "http://run1-live.daq.svc:8080/"

            # a new port: the SparkApplication and the Service follow, the Service kept
            moved = {**SPEC, "spark": {**PAGE, "ui": 9090}}
            await handlers.update_spark(
                **_common(moved, kopf.Patch()),
                reason="update",
                old=SPEC["spark"],
                new=moved["spark"],
            )
            again = stored(api, services, NAMESPACE, f"{NAME}-live")
            assert [p["port"] for p in again["spec"]["ports"]] == [9090]
            assert _service_writes(api) == ["POST", "POST", "PATCH"]  # patched, not recreated
            args = stored(api, apps, NAMESPACE, f"{NAME}-spark")["spec"]["arguments"]
            assert args[args.index("--ui") + 1] == "0.0.0.0:9090"

            # unset with a new output.path (the run built again there): the Service goes
            gone = {**SPEC, "spark": {**SPARK, "output": {"path": "s3a://daq/again"}}}
            await handlers.update_spark(
                **_common(gone, kopf.Patch()),
                reason="update",
                old=moved["spark"],
                new=gone["spark"],
            )
            assert stored(api, services, NAMESPACE, f"{NAME}-live") is None
            assert "--ui" not in stored(api, apps, NAMESPACE, f"{NAME}-spark")["spec"]["arguments"]

            # unset at the same output.path: refused, nothing touched
            with pytest.raises(kopf.PermanentError, match=r"spec\.spark\.ui"):
                await handlers.update_spark(
                    **_common(SPEC, kopf.Patch()),
                    reason="update",
                    old=PAGE,
                    new=SPARK,
                )

            # deletion: the Service goes with the rest
            await handlers.reconcile(**_common(SPEC, kopf.Patch()))
            assert stored(api, services, NAMESPACE, f"{NAME}-live") is not None
            await handlers.delete_children(**_common(SPEC, kopf.Patch()))
            assert stored(api, services, NAMESPACE, f"{NAME}-live") is None
            assert stored(api, apps, NAMESPACE, f"{NAME}-spark") is None

    asyncio.run(scenario())
