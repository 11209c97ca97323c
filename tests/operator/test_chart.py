"""``charts/evb-operator`` through helm-python-sdk (Helm's Go SDK, no helm binary): it lints
clean, every rendered object validates against Kubernetes 1.32, RBAC grants exactly the verbs the
operator uses, the operator Deployment is a locked-down singleton, every values key is
documented, and ``manifests/`` is the chart's current rendering."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest
import yaml

from tests.operator.conftest import REPO, validate_builtin

helm = pytest.importorskip("helm_python")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate", REPO / "tools" / "generate_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
CHART = GENERATOR.CHART
WATCHED = {"watchNamespaces": ["daq", "daq-test"]}

NAMESPACED_RULES = [
    {"apiGroups": ["evb.io"], "resources": ["eventbuilders"], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["evb.io"], "resources": ["eventbuilders/status"], "verbs": ["patch"]},
    {"apiGroups": ["evb.io"], "resources": ["eventbuilders/finalizers"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {
        "apiGroups": ["apps"],
        "resources": ["statefulsets"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "patch", "delete"]},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["create", "patch", "delete"],
    },
    {
        "apiGroups": ["sparkoperator.k8s.io"],
        "resources": ["sparkapplications"],
        "verbs": ["get", "create", "patch", "delete"],
    },
]
"""Exactly what the operator does: kopf watches and patches EventBuilders (finalizer, progress
annotations, status) and posts Events; the handlers create, patch and delete the children and
read the StatefulSet's ready pods and the SparkApplication's state (a Service is patched only
for the live page's port, spec.spark.ui; a ConfigMap never). update on
eventbuilders/finalizers is what an owner reference with blockOwnerDeletion requires. Secrets
are only read (get), those spec.tls/spec.auth name; nothing reads Pods.
tests/operator/test_rbac.py derives the same set from the code."""
CRD_RULE = {
    "apiGroups": ["apiextensions.k8s.io"],
    "resources": ["customresourcedefinitions"],
    "verbs": ["list", "watch"],
}
NAMESPACE_RULE = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}


def _objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return GENERATOR.render_chart(values)


def _kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


@pytest.mark.parametrize("values", [None, WATCHED], ids=["all-namespaces", "watched"])
def test_the_chart_lints_clean(values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version="v1.32.0")
    assert report["errors"] == []
    findings = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert findings == []
    # what is left is informational only ("icon is recommended")
    assert all(m["severity"] <= 1 for m in report["messages"])


@pytest.mark.parametrize("values", [None, WATCHED], ids=["all-namespaces", "watched"])
def test_every_rendered_object_validates(values: dict[str, Any] | None) -> None:
    objects = _objects(values)
    assert {obj["kind"] for obj in objects} >= {"ServiceAccount", "ClusterRole", "Deployment"}
    for obj in objects + GENERATOR.chart_crds():
        validate_builtin(obj)


def test_rbac_grants_exactly_what_the_operator_uses_cluster_wide() -> None:
    objects = _objects()
    roles = {role["metadata"]["name"]: role["rules"] for role in _kinds(objects, "ClusterRole")}
    assert roles == {"evb-operator": NAMESPACED_RULES, "evb-operator-cluster": [CRD_RULE]}
    bindings = {b["roleRef"]["name"] for b in _kinds(objects, "ClusterRoleBinding")}
    assert bindings == {"evb-operator", "evb-operator-cluster"}
    assert _kinds(objects, "RoleBinding") == [] and _kinds(objects, "Role") == []
    for binding in _kinds(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "evb-operator", "namespace": "evb-system"}
        ]


def test_rbac_is_namespaced_when_namespaces_are_listed() -> None:
    objects = _objects(WATCHED)
    roles = {role["metadata"]["name"]: role["rules"] for role in _kinds(objects, "ClusterRole")}
    assert roles == {
        "evb-operator": NAMESPACED_RULES,
        "evb-operator-cluster": [CRD_RULE, NAMESPACE_RULE],
    }
    assert {b["roleRef"]["name"] for b in _kinds(objects, "ClusterRoleBinding")} == {
        "evb-operator-cluster"
    }
    role_bindings = _kinds(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in role_bindings) == ["daq", "daq-test"]
    assert {b["roleRef"]["name"] for b in role_bindings} == {"evb-operator"}


def _operator_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = _kinds(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, container


def test_the_operator_is_a_locked_down_singleton() -> None:
    deployment, container = _operator_container(_objects())
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["command"][:5] == [
        "kopf",
        "run",
        "-m",
        "evb_operator.handlers",
        "--standalone",
    ]
    assert "--all-namespaces" in container["command"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EVB_ORDERER_IMAGE"] == container["image"] == "evb:0.1.0"
    assert "EVB_ALLOW_ENDPOINT_OVERRIDE" not in env  # never in a deployed operator
    assert (REPO / "operator" / "evb_operator" / "handlers" / "__init__.py").is_file()


def test_the_operators_pod_takes_connections_only_on_its_health_port() -> None:
    deployment, container = _operator_container(_objects())
    (policy,) = _kinds(_objects(), "NetworkPolicy")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # its own connections stay open
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "health", "protocol": "TCP"}]}]
    assert {p["name"] for p in container["ports"]} == {"health"}
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    assert not _kinds(_objects({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_readiness_asks_healthz_and_liveness_only_that_the_operator_answers() -> None:
    """/healthz fails while the operator cannot talk to the API server
    (tests/e2e/test_operator_readiness.py): unready, not restarted over and over."""
    _, container = _operator_container(_objects())
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["command"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["livenessProbe"]["tcpSocket"] == {"port": "health"}
    assert "httpGet" not in container["livenessProbe"]


def test_values_reach_the_deployment() -> None:
    values = {
        **WATCHED,
        "image": {"repository": "registry.example/evb", "tag": "1.2.3"},
        "sparkImage": "registry.example/evb-spark:1.2.3",
        "statsInterval": 30,
        "verbose": True,
    }
    _, container = _operator_container(_objects(values))
    assert container["image"] == "registry.example/evb:1.2.3"
    assert (
        "--namespace=daq" in container["command"] and "--namespace=daq-test" in container["command"]
    )
    assert "--all-namespaces" not in container["command"] and "--verbose" in container["command"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EVB_SPARK_IMAGE"] == "registry.example/evb-spark:1.2.3"
    assert env["EVB_STATS_INTERVAL"] == "30"


def test_every_values_key_has_a_comment() -> None:
    """Top-level keys and the keys of the chart's own groups (image, serviceAccount); the
    Kubernetes structures under resources or securityContext are data."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    own_groups = {"image", "serviceAccount"}
    parent = None
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z]\w*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        if indent == 0:
            parent = key
        elif not (indent == 2 and parent in own_groups):
            continue
        previous = lines[number - 1].strip() if number else ""
        assert previous.startswith("#"), f"values.yaml:{number + 1}: {key} has no comment"
    values = yaml.safe_load("\n".join(lines))
    assert set(values) >= {"image", "resources", "watchNamespaces", "securityContext"}


def test_manifests_are_the_rendered_chart() -> None:
    path = GENERATOR.MANIFESTS
    assert path.read_text() == GENERATOR.manifests_text(), "run python tools/generate_manifests.py"
    objects = list(yaml.safe_load_all(path.read_text()))
    assert [obj["kind"] for obj in objects[:2]] == ["Namespace", "CustomResourceDefinition"]
    for obj in objects:
        validate_builtin(obj)
