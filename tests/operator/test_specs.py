"""``evb_operator/specs.py`` without an API server: every object the operator builds validates
(built-in kinds against Kubernetes 1.32 with kubernetes-validate, strictly; SparkApplications
against the Spark operator's CRD in ``tests/data/schemas``), the pieces fit together (names,
selectors, mounts, the Spark job's target), and the orderer pod would start: its ConfigMap and
its arguments are accepted by ``evb serve`` itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from evb_operator import constants as c
from evb_operator import specs, validation
from orderer.cli import build_parser
from orderer.service.settings import configs_from_mapping
from tests.operator.conftest import example_files, load_example, validate_builtin

FULL_SPEC: dict[str, Any] = {
    "sources": [1, 2, 3],
    "buildWindow": 2,
    "barrierTimeout": 8,
    "sourceTimeout": 0,
    "latePolicy": "drop",
    "storage": {"size": "20Gi", "storageClassName": "fast", "retainOnDelete": True},
    "orderer": {
        "image": "registry.example/evb:1.2",
        "imagePullPolicy": "Always",
        "fsync": "always",
        "strictSources": True,
        "retentionBytes": 1 << 30,
        "retentionSeconds": 3600,
    },
    "tls": {"secretName": "run-tls", "mutual": True, "clientSecretName": "run-client"},
    "auth": {"tokenSecretRef": {"name": "run-token", "key": "daq"}},
    "networkPolicy": {
        "enabled": True,
        "allowedClients": [
            {"namespaceSelector": {"matchLabels": {"a": "b"}}},
            {"podSelector": {"matchLabels": {"role": "tail"}}},
        ],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
    },
    "spark": {
        "image": "registry.example/evb-spark:1.2",
        "imagePullPolicy": "IfNotPresent",
        "dt": 100,
        "timestampPolicy": "average",
        "output": {"path": "s3a://bucket/run", "format": "json"},
        "sparkConf": {"spark.ui.enabled": "false"},
    },
}


def _children(spec: dict[str, Any], name: str = "run1") -> list[dict[str, Any]]:
    return specs.build_children(
        name,
        "daq",
        validation.validate(spec),
        orderer_image="evb:0.1.0",
        spark_image="evb-spark:0.1.0",
        operator_namespace="evb-system",
        labels={"team": "daq", c.LABEL_INSTANCE: "spoofed"},
    )


SPECS = {
    "minimal": {},
    "full": FULL_SPEC,
    **{path.stem: load_example(path)["spec"] for path in example_files()},
}


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_every_child_validates(
    spec: dict[str, Any], validate_spark: Callable[[dict[str, Any]], None]
) -> None:
    children = _children(spec)
    assert children
    for child in children:
        if child["kind"] == "SparkApplication":
            validate_spark(child)
        else:
            validate_builtin(child)


def _by_kind(children: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {child["kind"]: child for child in children}


def test_the_children_and_their_fixed_names() -> None:
    assert {k: v["metadata"]["name"] for k, v in _by_kind(_children({})).items()} == {
        "ConfigMap": "run1-orderer-config",
        "Service": "run1-orderer",
        "StatefulSet": "run1-orderer",
    }
    assert {k: v["metadata"]["name"] for k, v in _by_kind(_children(FULL_SPEC)).items()} == {
        "ConfigMap": "run1-orderer-config",
        "Service": "run1-orderer",
        "StatefulSet": "run1-orderer",
        "NetworkPolicy": "run1-orderer",
        "SparkApplication": "run1-spark",
    }
    for child in _children(FULL_SPEC):
        assert child["metadata"]["namespace"] == "daq"
        labels = child["metadata"]["labels"]
        assert labels[c.LABEL_INSTANCE] == "run1"  # the standard labels win over the owner's
        assert labels["team"] == "daq"
        assert labels[c.LABEL_MANAGED_BY] == "evb-operator"


def test_the_pieces_fit_together() -> None:
    kinds = _by_kind(_children(FULL_SPEC))
    statefulset, service = kinds["StatefulSet"], kinds["Service"]
    pod = statefulset["spec"]["template"]
    selector = statefulset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"] == selector
    assert kinds["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"] == selector
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    assert volumes["tls"]["secret"]["secretName"] == "run-tls"
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9090}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["config"] + "/" + c.CONFIG_FILE == container["args"][2]
    assert set(mounts) - {"tmp"} == set(volumes) - {"tmp"} | {"data"}
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    assert container["image"] == "registry.example/evb:1.2"
    arguments = kinds["SparkApplication"]["spec"]["arguments"]
    target = arguments[arguments.index("--target") + 1]
    assert target == f"{service['metadata']['name']}.daq.svc:{ports['grpc']}"
    assert target == specs.orderer_endpoint("run1", "daq")


def test_the_orderer_pod_is_locked_down() -> None:
    statefulset = _by_kind(_children({}))["StatefulSet"]
    pod = statefulset["spec"]["template"]["spec"]
    assert statefulset["spec"]["replicas"] == 1
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == "evb:0.1.0"  # the operator's default
    assert pod["terminationGracePeriodSeconds"] > c.STOP_GRACE_SECONDS


def test_liveness_asks_the_health_name_that_a_full_log_volume_leaves_serving() -> None:
    """Readiness follows the overall health (NOT_SERVING while the volume is full); liveness
    only the orderer's failure, since a restart cannot free a volume."""
    from orderer.service.server import LIVENESS_SERVICE

    pod = _by_kind(_children({}))["StatefulSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["grpc"] == {"port": c.GRPC_PORT}
    assert container["livenessProbe"]["grpc"] == {
        "port": c.GRPC_PORT,
        "service": LIVENESS_SERVICE,
    }
    assert c.LIVENESS_SERVICE == LIVENESS_SERVICE


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_evb_serve_accepts_the_configmap_and_the_arguments(
    spec: dict[str, Any], tmp_path: Path
) -> None:
    valid = validation.validate(spec)
    kinds = _by_kind(_children(spec))
    text = kinds["ConfigMap"]["data"][c.CONFIG_FILE]
    config, service = configs_from_mapping(yaml.safe_load(text))
    assert config == valid.orderer  # the run starts with the spec's configuration
    assert service.listen == "[::]:50051" and service.metrics_port == 9090
    assert str(service.data_dir) == c.DATA_DIR
    (container,) = kinds["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["evb"]
    args = build_parser().parse_args(container["args"])
    assert args.fsync == valid.spec["orderer"]["fsync"]
    assert args.strict_sources == valid.spec["orderer"]["strictSources"]


def test_the_full_spec_reaches_the_orderer_and_the_job() -> None:
    valid = validation.validate(FULL_SPEC)
    args = build_parser().parse_args(specs.serve_args(valid))
    assert (args.retention_bytes, args.retention_seconds) == (1 << 30, 3600.0)
    config = yaml.safe_load(_by_kind(_children(FULL_SPEC))["ConfigMap"]["data"][c.CONFIG_FILE])
    assert config["sourceTimeout"] == "off" and config["latePolicy"] == "drop"
    app = _by_kind(_children(FULL_SPEC))["SparkApplication"]["spec"]
    assert app["mainApplicationFile"] == "local:///opt/evb/orderer/spark/job.py"
    assert app["arguments"][app["arguments"].index("--dt") + 1] == "100"
    assert app["arguments"][-6:-2] == ["--output", "s3a://bucket/run", "--format", "json"]
    # the job's own parser takes every argument the operator gives it
    from orderer.spark.job import build_parser as job_parser

    job = job_parser().parse_args(app["arguments"])
    assert job.connect_timeout == c.SPARK_CONNECT_TIMEOUT_SECONDS
    assert app["sparkConf"] == {"spark.ui.enabled": "false"}
    assert app["image"] == "registry.example/evb-spark:1.2"


def _ingress(policy: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """Port -> the peers allowed to it."""
    allowed: dict[int, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            allowed.setdefault(port["port"], []).extend(rule["from"])
    return allowed


def test_the_network_policy_admits_only_the_clients_the_spark_job_and_the_operator() -> None:
    valid = validation.validate(FULL_SPEC)
    policy = specs.build_networkpolicy_spec(
        "run1",
        "daq",
        valid,
        operator_namespace="evb-system",
        operator_labels={"app.kubernetes.io/name": "evb-operator"},
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    allowed = _ingress(policy)
    assert set(allowed) == {c.GRPC_PORT, c.METRICS_PORT}
    spark_pods = _by_kind(_children(FULL_SPEC))["SparkApplication"]["spec"]["driver"]["labels"]
    assert allowed[c.GRPC_PORT] == [
        {"namespaceSelector": {"matchLabels": {"a": "b"}}},
        {"podSelector": {"matchLabels": {"role": "tail"}}},
        {"podSelector": {"matchLabels": specs.selector_labels("run1", "spark")}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "evb-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "evb-operator"}},
        },
    ]
    spark_selector = allowed[c.GRPC_PORT][2]["podSelector"]["matchLabels"]
    assert spark_selector.items() <= spark_pods.items()  # it selects the job's pods
    assert allowed[c.METRICS_PORT] == [
        {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}
    ]
    # nobody else: no empty selector (a whole namespace) anywhere
    assert all(peer.get("podSelector") != {} for peers in allowed.values() for peer in peers)


def test_a_bare_network_policy_admits_the_operator_only_and_closes_the_metrics_port() -> None:
    valid = validation.validate({"networkPolicy": {"enabled": True}})
    same = _ingress(
        specs.build_networkpolicy_spec(
            "r", "daq", valid, operator_namespace="daq", operator_labels={"k": "v"}
        )
    )
    assert same == {c.GRPC_PORT: [{"podSelector": {"matchLabels": {"k": "v"}}}]}
    unknown = specs.build_networkpolicy_spec("r", "daq", valid)
    assert unknown["spec"]["ingress"] == []  # no peer declared: nothing gets in


def test_tls_and_the_token_reach_the_orderer_and_the_spark_pods() -> None:
    valid = validation.validate(FULL_SPEC)
    kinds = _by_kind(_children(FULL_SPEC))
    pod = kinds["StatefulSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert str(args.tls_cert) == f"{mounts['tls']['mountPath']}/tls.crt"
    assert str(args.tls_key) == f"{mounts['tls']['mountPath']}/tls.key"
    assert str(args.tls_client_ca) == f"{mounts['tls']['mountPath']}/ca.crt"
    assert str(args.token_file) == f"{mounts['auth']['mountPath']}/token"
    assert volumes["auth"]["secret"]["secretName"] == "run-token"
    assert volumes["auth"]["secret"]["items"] == [{"key": "daq", "path": "token"}]
    assert all(m["readOnly"] for name, m in mounts.items() if name in ("tls", "auth"))
    assert "tcpSocket" in container["readinessProbe"]  # the kubelet's gRPC probe has no TLS
    app = kinds["SparkApplication"]["spec"]
    spark_volumes = {v["name"]: v for v in app["volumes"]}
    # the Spark pods get the CA only, never the orderer's key
    assert spark_volumes["orderer-ca"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert spark_volumes["client-tls"]["secret"]["secretName"] == "run-client"
    for role in ("driver", "executor"):
        env = {e["name"]: e["value"] for e in app[role]["env"]}
        where = {m["name"]: m["mountPath"] for m in app[role]["volumeMounts"]}
        assert env == {
            "EVB_TLS_CA": f"{where['orderer-ca']}/ca.crt",
            "EVB_TLS_CERT": f"{where['client-tls']}/tls.crt",
            "EVB_TLS_KEY": f"{where['client-tls']}/tls.key",
            "EVB_TOKEN_FILE": f"{where['auth']}/token",
        }
    plain = validation.validate({})
    assert "--tls-cert" not in specs.serve_args(plain)
    assert valid.spec["tls"]["mutual"] is True


def test_building_is_pure() -> None:
    assert _children(FULL_SPEC) == _children(FULL_SPEC)
    assert FULL_SPEC["spark"]["output"] == {"path": "s3a://bucket/run", "format": "json"}
