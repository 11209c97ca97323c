"""The chart's observability (charts/evb-operator/templates/podmonitor.yaml, dashboard.yaml,
prometheusrule.yaml): off by default; with the switches on and the cluster serving
monitoring.coreos.com/v1 the objects validate against prometheus-operator's schemas (copied in
tests/data/schemas/) and select the orderer pods the operator creates; and every PromQL
expression of the dashboard and the alerts names only metrics a live ``evb serve`` exports."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from evb_operator.specs import common as specs_common
from evb_operator.specs import orderer as specs_orderer
from orderer import OrdererConfig
from tests.operator.conftest import REPO, unknown_fields, validate_builtin
from tests.service.harness import run, serving

helm = pytest.importorskip("helm_python")
from helm_python import _native  # noqa: E402  (render options the wrapper does not expose)

CHART = REPO / "charts" / "evb-operator"
SCHEMAS = REPO / "tests" / "data" / "schemas"
MONITORING = "monitoring.coreos.com/v1"
ALL_ON = {
    "monitoring": {
        "podMonitor": {"enabled": True},
        "dashboard": {"enabled": True},
        "prometheusRule": {"enabled": True},
    }
}


def render(values: dict[str, Any] | None, api_versions: list[str]) -> list[dict[str, Any]]:
    """The chart rendered as ``helm template --api-versions`` would (helm-python-sdk's native
    render takes ``api_versions``; its Python wrapper does not pass it)."""
    options = {"name": "evb", "namespace": "evb-system", "is_install": True}
    with helm.Chart.load(CHART) as chart:
        text = _native.call_string(
            "helm_render",
            chart._raw(),
            json.dumps(values or {}),
            json.dumps({**options, "api_versions": api_versions}),
        )
    objects: list[dict[str, Any]] = []
    for path, manifest in sorted(json.loads(text).items()):
        if path.endswith(".yaml"):
            objects += [doc for doc in yaml.safe_load_all(manifest) if doc]
    return objects


def _kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SCHEMAS / name).read_text())
    return loaded


def _dashboard(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [o for o in _kind(objects, "ConfigMap") if o["metadata"]["name"].endswith(
        "-dashboard"
    )]
    loaded: dict[str, Any] = json.loads(config_map["data"]["evb.json"])
    return loaded


def test_everything_is_off_by_default_and_without_the_api() -> None:
    kinds = {obj["kind"] for obj in render(None, [MONITORING])}
    assert not kinds & {"PodMonitor", "PrometheusRule"}
    assert not [o for o in render(None, [MONITORING]) if o["metadata"]["name"].endswith(
        "-dashboard"
    )]
    kinds = {obj["kind"] for obj in render(ALL_ON, [])}  # switched on, but no such API
    assert not kinds & {"PodMonitor", "PrometheusRule"}


def test_the_objects_validate_and_select_the_orderer_pods() -> None:
    objects = render(ALL_ON, [MONITORING])
    (monitor,) = _kind(objects, "PodMonitor")
    (rule,) = _kind(objects, "PrometheusRule")
    for obj, name in ((monitor, "podmonitor"), (rule, "prometheusrule")):
        schema = _schema(f"{name}-monitoring-v1.yaml")
        # the schema's patterns are Go regexps ("(?i)" inside), which the metaschema check
        # refuses; the instance is validated all the same, and nothing may be pruned
        jsonschema.Draft7Validator(schema).validate(obj)
        assert unknown_fields(obj, schema) == []
    pod_labels = specs_common.labels_for("run-1", "orderer")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    statefulset = specs_orderer.build_statefulset_spec(
        "run-1", "daq", _valid_spec(), default_image="evb:0.1.0"
    )
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    ports = {port["name"] for port in container["ports"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    watched = render({**ALL_ON, "watchNamespaces": ["daq"]}, [MONITORING])
    assert _kind(watched, "PodMonitor")[0]["spec"]["namespaceSelector"] == {"matchNames": ["daq"]}
    for config_map in _kind(objects, "ConfigMap"):
        validate_builtin(config_map)
    dashboard_map = [o for o in _kind(objects, "ConfigMap") if "evb.json" in o.get("data", {})]
    assert dashboard_map[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert _dashboard(objects)["panels"]


def _valid_spec() -> Any:
    from evb_operator.validation import validate

    return validate({"sources": [1, 2]})


_NAME = re.compile(r"\bevb_[a-z_]+")
_SUFFIXES = ("_bucket", "_sum", "_count")


def _expressions(objects: list[dict[str, Any]]) -> list[str]:
    (rule,) = _kind(objects, "PrometheusRule")
    found = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    dashboard = _dashboard(objects)
    found += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    found += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return found


def _exported(data_dir: Path) -> set[str]:
    """Sample names a live server exports (histograms as _bucket/_sum/_count, counters as
    _total), after a little input so that every per-source family has samples."""
    from tests.service.test_metrics import submit

    async def body() -> str:
        import grpc

        config = OrdererConfig(build_window=0.05, startup_delay=0.0, sources=(1, 2))
        async with serving(data_dir, config, metrics_port=0) as running:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                await submit(channel, 1, [1, 2, 3])
                from orderer._proto.evb.v1 import orderer_pb2 as pb
                from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc

                await pb_grpc.OrdererStub(channel).EndRun(pb.EndRunRequest())
                await pb_grpc.OrdererStub(channel).Commit(
                    pb.CommitRequest(consumer="spark", offset=1)
                )
            url = f"http://127.0.0.1:{running.metrics_port}/metrics"

            def get() -> str:
                with urllib.request.urlopen(url, timeout=10) as reply:
                    return str(reply.read().decode())

            return await asyncio.to_thread(get)

    text = run(body())
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line[:1] not in "#"}


def test_every_expression_names_only_metrics_a_live_server_exports(tmp_path: Path) -> None:
    exported = _exported(tmp_path)
    assert "evb_emission_latency_seconds_bucket" in exported  # the scrape is whole
    expressions = _expressions(render(ALL_ON, [MONITORING]))
    named = {name for expr in expressions for name in _NAME.findall(expr)}
    assert len(named) >= 15
    unknown = sorted(name for name in named if name not in exported)
    assert unknown == [], f"not exported by evb serve: {unknown}"
    # the alerts cover what the chart promises
    (rule,) = _kind(render(ALL_ON, [MONITORING]), "PrometheusRule")
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts >= {
        "EvbSourceDead", "EvbSourceStalled", "EvbLateBurst", "EvbIncompleteBarriers",
        "EvbConsumerLag", "EvbLogVolumeDegraded", "EvbLogVolumeNearlyFull", "EvbSourceNeverSeen",
        "EvbOrdererDown", "EvbOrdererLagging",
    }


def test_a_declared_source_never_heard_from_has_an_alert_on_exported_series(
    tmp_path: Path,
) -> None:
    """A digitizer that never connected was silent: it had no idle series and is never dead by
    timeout. EvbSourceNeverSeen selects a source by the series a live server exports for every
    declared source from the start (evb_source_arrived 0, its idle time since the run's start),
    its threshold is the chart's value, and EvbSourceStalled leaves such a source to it (one
    alert per failure). tests/system/test_alerts.py makes both fire on a real Prometheus."""
    exported = _exported(tmp_path)
    (rule,) = _kind(render(ALL_ON, [MONITORING]), "PrometheusRule")
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    never_seen = rules["EvbSourceNeverSeen"]
    named = set(_NAME.findall(never_seen["expr"]))
    assert {"evb_source_arrived", "evb_source_idle_seconds"} <= named <= exported
    assert re.search(r"\(evb_source_arrived\) == 0", never_seen["expr"])
    assert re.search(r"\(evb_source_arrived\) == 1", rules["EvbSourceStalled"]["expr"])
    assert never_seen["labels"]["severity"] == "critical"
    (values_rule,) = _kind(
        render({"monitoring": {"prometheusRule": {"enabled": True, "neverSeenSeconds": 7}}},
               [MONITORING]),
        "PrometheusRule",
    )
    (changed,) = [r for g in values_rule["spec"]["groups"] for r in g["rules"]
                  if r.get("alert") == "EvbSourceNeverSeen"]
    assert "(evb_source_idle_seconds) > 7" in changed["expr"]


_RUN_ALERTS = (
    "EvbSourceDead", "EvbSourceStalled", "EvbSourceNeverSeen", "EvbLateBurst",
    "EvbIncompleteBarriers", "EvbConsumerLag", "EvbOrdererDown",
)
"""Alerts whose cause is the run's (its sources, barriers, consumer, orderers): every orderer
of a run over several sees it, so each must fire once per run, not once per orderer."""
_ORDERER_ALERTS = ("EvbLogVolumeDegraded", "EvbLogVolumeNearlyFull", "EvbOrdererLagging")
"""Alerts whose cause is one orderer's (its volume, its lag): once per orderer pod."""
_BY = re.compile(r"\bby \(([^)]*)\)")


def test_each_alert_groups_by_its_causes_owner_and_the_pod_monitor_names_the_run() -> None:
    """Every aggregation of a run's alert keeps the run (namespace, eventbuilder) and, at its
    outermost level, not the pod, so the N orderers of a run give one alert; an orderer's
    alert keeps the pod. The ``eventbuilder`` label comes from the PodMonitor, out of the pod
    label the operator sets to the EventBuilder's name. tests/system/test_alerts.py fires them
    on a real Prometheus over runs of 3 orderers."""
    objects = render(ALL_ON, [MONITORING])
    (rule,) = _kind(objects, "PrometheusRule")
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert sorted(rules) == sorted(_RUN_ALERTS + _ORDERER_ALERTS)
    for name, entry in rules.items():
        groupings = [
            {label.strip() for label in by.split(",")} for by in _BY.findall(entry["expr"])
        ]
        assert groupings, name
        assert all({"namespace", "eventbuilder"} <= labels for labels in groupings), name
        outer = groupings[0]
        if name in _RUN_ALERTS:
            assert "pod" not in outer and "orderer" not in outer, (name, outer)
            assert "$labels.pod" not in str(entry["annotations"]), name
        else:
            assert "pod" in outer, (name, outer)
    (monitor,) = _kind(objects, "PodMonitor")
    (relabel,) = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert relabel["targetLabel"] == "eventbuilder"
    label = relabel["sourceLabels"][0].removeprefix("__meta_kubernetes_pod_label_")
    instance = "app.kubernetes.io/instance"
    assert specs_common.labels_for("run-1", "orderer")[instance] == "run-1"
    assert label == re.sub(r"[^a-zA-Z0-9_]", "_", instance)
    lagging = rules["EvbOrdererLagging"]["expr"]
    assert "evb_high_water_mark offset 300s" in lagging  # the chart's default, in seconds
    assert "evb_orderers" in rules["EvbOrdererDown"]["expr"]
    dashboard = _dashboard(objects)
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables.index("eventbuilder") < variables.index("pod")
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert all('eventbuilder=~"$eventbuilder"' in e for e in exprs)
    assert any("by (eventbuilder)" in e for e in exprs)  # per run
    assert any("by (eventbuilder, pod)" in e for e in exprs)  # per orderer
