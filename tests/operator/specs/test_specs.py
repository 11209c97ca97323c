"""``evb_operator/specs/`` without an API server: every object the operator builds validates
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
from evb_operator.specs import common as specs_common
from evb_operator.specs import network as specs_network
from evb_operator.specs import orderer as specs_orderer
from evb_operator.specs import spark as specs_spark
from orderer.cli import build_parser
from orderer.service.settings import configs_from_mapping
from tests.operator.conftest import (
    example_files,
    kubelet_args,
    load_example,
    pod_of,
    validate_builtin,
)

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
        "maxFragments": 64,
        "partitions": 12,
        "maxFragmentsPerTrigger": 500_000,
        "triggerInterval": 2.5,
        "tickRate": 1e9,
        "output": {"path": "s3a://bucket/run", "format": "json"},
        "objectStorage": {
            "credentialsSecret": "run-s3",
            "sessionTokenKey": "token",
            "endpoint": "http://minio.storage.svc:9000",
            "region": "eu-west-1",
            "pathStyleAccess": True,
        },
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


STAGES = {"configMap": "my-analysis", "key": "implant_decay.py"}
"""spec.spark.stages: the ConfigMap of ``kubectl create configmap my-analysis
--from-file=implant_decay.py``."""

SPECS = {
    "minimal": {},
    "full": FULL_SPEC,
    "stages": {**FULL_SPEC, "spark": {**FULL_SPEC["spark"], "stages": STAGES}},
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
    assert target == specs_common.orderer_endpoint("run1", "daq")


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


def test_a_refused_start_is_the_termination_message_of_every_evb_container() -> None:
    """evb serve or evb forward refusing to start (one line naming the flag) is what
    ``kubectl describe pod`` shows as the last state's message, not only a restart count."""
    kinds = _by_kind(_children({"upstreams": [{"target": "upstream.daq.svc:50051"}]}))
    containers = [
        container
        for kind in ("StatefulSet", "Deployment")
        for container in kinds[kind]["spec"]["template"]["spec"]["containers"]
    ]
    assert [c["command"] for c in containers] == [["evb"], ["evb"]]
    for container in containers:
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


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
    statefulset = kinds["StatefulSet"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["evb"]
    for ordinal in range(statefulset["spec"]["replicas"]):  # each pod, as the kubelet starts it
        args = build_parser().parse_args(kubelet_args(pod_of(statefulset, ordinal), container))
        assert args.fsync == valid.orderer_pod.fsync
        assert args.strict_sources == valid.orderer_pod.strict_sources


def test_the_full_spec_reaches_the_orderer_and_the_job() -> None:
    valid = validation.validate(FULL_SPEC)
    args = build_parser().parse_args(specs_orderer.serve_args(valid))
    assert (args.retention_bytes, args.retention_seconds) == (1 << 30, 3600.0)
    config = yaml.safe_load(_by_kind(_children(FULL_SPEC))["ConfigMap"]["data"][c.CONFIG_FILE])
    assert config["sourceTimeout"] == "off" and config["latePolicy"] == "drop"
    app = _by_kind(_children(FULL_SPEC))["SparkApplication"]["spec"]
    assert app["mainApplicationFile"] == "local:///opt/evb/orderer/spark/driver/job.py"
    assert app["arguments"][app["arguments"].index("--dt") + 1] == "100"
    # the job's own parser takes every argument the operator gives it
    from orderer.job_config import JobConfig

    job = JobConfig.from_argv(app["arguments"])
    assert (job.output, job.format) == ("s3a://bucket/run", "json")
    assert job.connect_timeout == c.SPARK_CONNECT_TIMEOUT_SECONDS
    assert app["sparkConf"]["spark.ui.enabled"] == "false"
    assert app["image"] == "registry.example/evb-spark:1.2"
    assert not job.follow_runs  # one run, the default


def test_follow_runs_makes_the_job_build_every_run() -> None:
    """``spec.spark.followRuns``: raising spec.run begins the next run on the same orderer; the
    job follows it (``--follow-runs``) instead of finishing at the first run's end."""
    from orderer.job_config import JobConfig

    spec = {**FULL_SPEC, "spark": {**FULL_SPEC["spark"], "followRuns": True}}
    app = _by_kind(_children(spec))["SparkApplication"]["spec"]
    job = JobConfig.from_argv(app["arguments"])
    assert job.follow_runs and job.run is None


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
    policy = specs_network.build_networkpolicy_spec(
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
        {"podSelector": {"matchLabels": specs_common.selector_labels("run1", "spark")}},
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
        specs_network.build_networkpolicy_spec(
            "r", "daq", valid, operator_namespace="daq", operator_labels={"k": "v"}
        )
    )
    assert same == {c.GRPC_PORT: [{"podSelector": {"matchLabels": {"k": "v"}}}]}
    unknown = specs_network.build_networkpolicy_spec("r", "daq", valid)
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
        env = {e["name"]: e["value"] for e in app[role]["env"] if e["name"].startswith("EVB_")}
        where = {m["name"]: m["mountPath"] for m in app[role]["volumeMounts"]}
        assert env == {
            "EVB_TLS_CA": f"{where['orderer-ca']}/ca.crt",
            "EVB_TLS_CERT": f"{where['client-tls']}/tls.crt",
            "EVB_TLS_KEY": f"{where['client-tls']}/tls.key",
            "EVB_TOKEN_FILE": f"{where['auth']}/token",
        }
    plain = validation.validate({})
    assert "--tls-cert" not in specs_orderer.serve_args(plain)
    assert valid.tls is not None and valid.tls.mutual is True


def test_building_is_pure() -> None:
    assert _children(FULL_SPEC) == _children(FULL_SPEC)
    assert FULL_SPEC["spark"]["output"] == {"path": "s3a://bucket/run", "format": "json"}


# ----------------------------------------------------------------------------- the Spark stage


def _job_args(spark: dict[str, Any]) -> Any:
    """The SparkApplication's arguments as the job's own parser and checks take them."""
    from orderer.job_config import JobConfig
    from orderer.spark.driver.checks import check_arguments

    spec = {"spark": {"output": {"path": "s3a://bucket/run"}, **spark}}
    app = _by_kind(_children(spec))["SparkApplication"]["spec"]
    args = JobConfig.from_argv(app["arguments"])
    check_arguments(args)  # what the job would refuse before Spark starts
    return args


def test_every_spark_field_reaches_the_job_as_its_flag() -> None:
    args = _job_args(FULL_SPEC["spark"])
    assert (args.dt, args.no_build, args.max_fragments) == (100, False, 64)
    assert (args.timestamp_policy, args.format) == ("average", "json")
    assert (args.partitions, args.max_fragments_per_trigger) == (12, 500_000)
    assert (args.trigger_seconds, args.tick_rate) == (2.5, 1e9)
    assert args.target == specs_common.orderer_endpoint("run1", "daq")


def test_the_sparkapplication_arguments_are_a_job_configurations() -> None:
    """The operator spells out no flag of the job: the SparkApplication's arguments are the
    ``to_argv`` of the JobConfig it builds from the spec, which the job reads back into that
    JobConfig (tests/orderer/test_job_config.py holds it for every configuration)."""
    from orderer.job_config import JobConfig

    valid = validation.validate(FULL_SPEC)
    app = _by_kind(_children(FULL_SPEC))["SparkApplication"]["spec"]
    assert valid.spark is not None
    config = specs_spark.spark_job_config("run1", "daq", valid.spark)
    assert app["arguments"] == config.to_argv()
    assert JobConfig.from_argv(app["arguments"]) == config
    assert config.output == "s3a://bucket/run" and config.target == specs_common.orderer_endpoint(
        "run1", "daq"
    )


def test_the_job_gets_the_crd_defaults_which_are_its_own() -> None:
    from orderer.job_config import JobConfig

    given = _job_args({"dt": 5})
    defaults = JobConfig.from_argv(["--target", "h:1", "--output", "o"])
    for flag in ("max_fragments", "timestamp_policy", "trigger_seconds", "tick_rate", "format"):
        assert getattr(given, flag) == getattr(defaults, flag), flag
    assert given.max_fragments_per_trigger is None  # unset: no cap


@pytest.mark.parametrize(
    ("executors", "partitions", "expected"),
    [
        ({}, None, 2),  # 2 executors x 1 core
        ({"instances": 4, "cores": 2}, None, 8),
        ({"instances": 1000, "cores": 64}, None, 64_000),
        ({"instances": 4, "cores": 2}, 3, 3),
    ],
)
def test_partitions_default_to_one_per_executor_core(
    executors: dict[str, int], partitions: int | None, expected: int
) -> None:
    """Executors added beyond one core pair must build: the job gets a partition per core."""
    spark: dict[str, Any] = {"dt": 5, "executors": executors}
    if partitions is not None:
        spark["partitions"] = partitions
    assert _job_args(spark).partitions == expected


def test_no_build_gives_one_event_per_fragment() -> None:
    args = _job_args({"noBuild": True})
    assert args.no_build and args.dt is None


def test_object_storage_credentials_come_from_the_secret_only() -> None:
    kinds = _by_kind(_children(FULL_SPEC))
    app = kinds["SparkApplication"]["spec"]
    secret = {
        "AWS_ACCESS_KEY_ID": {"name": "run-s3", "key": "AWS_ACCESS_KEY_ID"},
        "AWS_SECRET_ACCESS_KEY": {"name": "run-s3", "key": "AWS_SECRET_ACCESS_KEY"},
        "AWS_SESSION_TOKEN": {"name": "run-s3", "key": "token"},
    }
    for role in ("driver", "executor"):
        env = app[role]["env"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
        assert refs == secret
        assert "EVB_TLS_CA" in {e["name"] for e in env}  # TLS variables kept alongside
    assert app["driver"]["env"] is not app["executor"]["env"]
    assert app["sparkConf"] == {
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint": "http://minio.storage.svc:9000",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider": c.S3A_ENV_CREDENTIALS_PROVIDER,
        "spark.ui.enabled": "false",
    }
    # the operator never holds a credential: no object it writes names one but by reference
    text = yaml.safe_dump(list(kinds.values()))
    assert "run-s3" not in yaml.safe_dump(kinds["ConfigMap"])
    assert text.count("run-s3") == 6  # three references, driver and executors


def test_object_storage_without_a_secret_uses_the_default_chain_and_sparkconf_wins() -> None:
    spark = {
        "dt": 5,
        "output": {"path": "s3a://b/r"},
        "objectStorage": {},
        "sparkConf": {"spark.hadoop.fs.s3a.path.style.access": "true"},
    }
    app = _by_kind(_children({"spark": spark}))["SparkApplication"]["spec"]
    assert app["sparkConf"] == {"spark.hadoop.fs.s3a.path.style.access": "true"}
    assert "env" not in app["driver"] and "env" not in app["executor"]


def test_a_spark_change_changes_the_sparkapplication_spec() -> None:
    """update_spark patches the SparkApplication's /spec with the rebuilt one (the Spark operator
    then resubmits the job): every new field must change it."""
    base = {"dt": 5, "output": {"path": "s3a://b/r"}}
    before = _by_kind(_children({"spark": base}))["SparkApplication"]["spec"]
    for change in (
        {"partitions": 7},
        {"maxFragmentsPerTrigger": 10},
        {"triggerInterval": 1},
        {"tickRate": 1e6},
        {"objectStorage": {"credentialsSecret": "s"}},
        {"objectStorage": {"endpoint": "http://m:9000"}},
        {"stages": STAGES},
        {"stages": {**STAGES, "key": "other.py"}},
    ):
        after = _by_kind(_children({"spark": {**base, **change}}))["SparkApplication"]["spec"]
        assert after != before, change


@pytest.mark.parametrize(
    ("path", "mounted"),
    [("file:///events", "/events"), ("/data/run-1/", "/data/run-1"), ("file:/out", "/out")],
)
def test_a_local_output_gets_its_claim_mounted_in_every_spark_pod(path: str, mounted: str) -> None:
    """The events, the summary and the checkpoint of a local output go to the claim, which the
    driver and every executor mount at the output path (each writes its own partitions)."""
    spark = {"dt": 5, "output": {"path": path, "volumeClaim": "run-events"}}
    (app,) = [
        child for child in _children({"spark": spark}) if child["kind"] == "SparkApplication"
    ]
    volumes = {volume["name"]: volume for volume in app["spec"]["volumes"]}
    assert volumes["output"] == {
        "name": "output",
        "persistentVolumeClaim": {"claimName": "run-events"},
    }
    for role in ("driver", "executor"):
        mounts = app["spec"][role]["volumeMounts"]
        assert {"name": "output", "mountPath": mounted} in mounts
        assert {"name": "tmp", "mountPath": "/tmp"} in mounts
    assert app["spec"]["arguments"][app["spec"]["arguments"].index("--output") + 1] == path


def test_object_storage_mounts_no_output_volume() -> None:
    spark = {"dt": 5, "output": {"path": "s3a://bucket/run"}}
    (app,) = [
        child for child in _children({"spark": spark}) if child["kind"] == "SparkApplication"
    ]
    assert "output" not in {volume["name"] for volume in app["spec"]["volumes"]}


# ----------------------------------------------------------------------------- analysis stages


BASE_SPARK: dict[str, Any] = {"dt": 5, "output": {"path": "s3a://bucket/run"}}


def _spark_app(spark: dict[str, Any]) -> dict[str, Any]:
    """The SparkApplication's spec of BASE_SPARK with ``spark``'s fields."""
    spec = {"spark": {**BASE_SPARK, **spark}}
    return _by_kind(_children(spec))["SparkApplication"]["spec"]  # type: ignore[no-any-return]


def test_the_stages_configmap_is_mounted_on_the_driver_and_given_as_stages() -> None:
    """``spec.spark.stages``: the ConfigMap's key, read-only, in the driver alone (it loads the
    module; the executors get the stages pickled by value), and ``--stages`` naming that file,
    from the JobConfig's own arguments."""
    from orderer.job_config import JobConfig

    app = _spark_app({"stages": STAGES})
    volumes = {volume["name"]: volume for volume in app["volumes"]}
    assert volumes["stages"] == {
        "name": "stages",
        "configMap": {
            "name": "my-analysis",
            "items": [{"key": "implant_decay.py", "path": "implant_decay.py"}],
            "defaultMode": 0o440,
        },
    }
    (mount,) = [m for m in app["driver"]["volumeMounts"] if m["name"] == "stages"]
    assert mount == {"name": "stages", "mountPath": c.STAGES_DIR, "readOnly": True}
    assert "stages" not in {m["name"] for m in app["executor"]["volumeMounts"]}
    job = JobConfig.from_argv(app["arguments"])
    assert job.stages == Path("/etc/evb/stages/implant_decay.py")
    (item,) = volumes["stages"]["configMap"]["items"]
    assert job.stages == Path(mount["mountPath"]) / item["path"]  # the file the kubelet writes
    assert not job.explain
    spark = validation.validate({"spark": {**BASE_SPARK, "stages": STAGES}}).spark
    assert spark is not None
    config = specs_spark.spark_job_config("run1", "daq", spark)
    assert app["arguments"] == config.to_argv()  # no flag of the operator's own


def test_no_stages_no_volume_and_no_flag() -> None:
    from orderer.job_config import JobConfig

    app = _spark_app({})
    assert "stages" not in {volume["name"] for volume in app["volumes"]}
    for role in ("driver", "executor"):
        assert "stages" not in {m["name"] for m in app[role]["volumeMounts"]}
    assert "--stages" not in app["arguments"]
    assert JobConfig.from_argv(app["arguments"]).stages is None


def test_the_stages_mount_keeps_the_other_driver_mounts() -> None:
    """With TLS, a token and a local output, the driver has each mount once, the stages' too,
    and the executors theirs without the stages'."""
    spark = {"output": {"path": "file:///events", "volumeClaim": "run-events"}, "stages": STAGES}
    spec = {**FULL_SPEC, "spark": {**FULL_SPEC["spark"], **spark}}
    app = _by_kind(_children(spec))["SparkApplication"]["spec"]
    driver = [m["name"] for m in app["driver"]["volumeMounts"]]
    executor = [m["name"] for m in app["executor"]["volumeMounts"]]
    assert sorted(driver) == sorted({*executor, "stages"})
    assert len(driver) == len(set(driver)) and "stages" not in executor
    assert {v["name"] for v in app["volumes"]} == set(driver)
