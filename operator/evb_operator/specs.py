"""Pure ``build_<kind>_spec`` functions: the whole manifest of every child of an EventBuilder.

Called by :mod:`evb_operator.handlers` (which then adopts and creates them) and by the tests,
which validate every object built here against the Kubernetes 1.32 schemas and the
SparkApplication CRD without any API server. No API calls, no clock, no environment: what a
function returns depends on its arguments only.

The children, all named after the EventBuilder (``constants``):

- ConfigMap ``<name>-orderer-config``: the ``evb serve --config`` file, the configuration the run
  *starts* with. It is written once: live changes (``Configure``) are recorded in the orderer's
  arrival log, which a restarted orderer replays from this starting point, so rewriting it would
  make the replay diverge from the ordered log.
- StatefulSet ``<name>-orderer`` of one pod, its logs on a volume claim; the service settings are
  command-line flags (they win over the file), so changing them, the image or the resources
  changes the pod template and rolls the pod.
- Service ``<name>-orderer``: gRPC 50051 (data sources, the Spark job, the operator), metrics 9090.
- SparkApplication ``<name>-spark`` (``sparkoperator.k8s.io/v1beta2``) running the Spark job
  against the Service.
- NetworkPolicy ``<name>-orderer``, when ``spec.networkPolicy.enabled``.
- Deployment ``<name>-forward``, when ``spec.upstreams`` is set: one ``evb forward`` container
  per upstream (:func:`build_forward_spec` says why not in the orderer's pod).

Security (``spec.tls``, ``spec.auth``): the orderer gets ``--tls-cert/--tls-key`` (and
``--tls-client-ca`` under mutual TLS) on the mounted Secret, ``--token-file`` on the mounted
token; they are flags, not ConfigMap keys, because the ConfigMap is never rewritten while a TLS
change must roll the pod. The Spark pods mount only ``ca.crt`` of the orderer's Secret, the
client certificate and the token, and find them through the ``EVB_TLS_*``/``EVB_TOKEN_FILE``
variables (:meth:`orderer.client.ChannelSecurity.from_env`). With TLS on, the kubelet's probes
are TCP probes: its gRPC probe cannot speak TLS.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from evb_operator import constants as c
from evb_operator import crd_output
from evb_operator.crd import SPEC_SCHEMA
from evb_operator.validation import ValidSpec, with_defaults
from orderer.job_config import JobConfig, OutputFormat, TimestampPolicy

__all__ = [
    "CONFIGMAP",
    "DELETION_ORDER",
    "FORWARD",
    "NETWORKPOLICY",
    "SERVICE",
    "SPARKAPPLICATION",
    "STATEFULSET",
    "ChildKind",
    "build_children",
    "build_configmap_spec",
    "build_forward_spec",
    "build_networkpolicy_spec",
    "build_service_spec",
    "build_sparkapplication_spec",
    "build_statefulset_spec",
    "forward_args",
    "labels_for",
    "object_storage_conf",
    "object_storage_env",
    "orderer_endpoint",
    "serve_args",
    "serve_config",
    "spark_job_config",
    "spark_partitions",
]

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
SPARK_SCHEMA = SPEC_SCHEMA["properties"]["spark"]

ExtraLabels = Mapping[str, str] | None
"""The EventBuilder's own labels, which its children carry too (None: none)."""


@dataclass(frozen=True)
class ChildKind:
    """A kind of child: where the API serves it, and the name an EventBuilder's child has."""

    api_version: str
    kind: str
    template: str
    """The child's name, from the EventBuilder's (``{name}-orderer``)."""

    def name(self, owner: str) -> str:
        """The name of the child of the EventBuilder ``owner``."""
        return self.template.format(name=owner)


CONFIGMAP = ChildKind("v1", "ConfigMap", c.CONFIG_NAME)
SERVICE = ChildKind("v1", "Service", c.ORDERER_NAME)
STATEFULSET = ChildKind("apps/v1", "StatefulSet", c.ORDERER_NAME)
NETWORKPOLICY = ChildKind("networking.k8s.io/v1", "NetworkPolicy", c.ORDERER_NAME)
SPARKAPPLICATION = ChildKind(SPARK_API_VERSION, "SparkApplication", c.SPARK_NAME)
FORWARD = ChildKind("apps/v1", "Deployment", c.FORWARD_NAME)

DELETION_ORDER = (SPARKAPPLICATION, FORWARD, NETWORKPOLICY, STATEFULSET, SERVICE, CONFIGMAP)
"""The Spark job first (it stops reading), the forwarders (they stop sending), then the orderer,
its configuration last."""

FORWARD_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}
"""A forwarder's container: it holds at most a few replies of the upstream in memory."""

RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The Pod Security Standard "restricted" for a container, plus a read-only root."""

RESTRICTED_POD: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": c.RUN_AS_USER,
    "runAsGroup": c.RUN_AS_USER,
    "fsGroup": c.RUN_AS_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The pod half of "restricted": fixed non-root ids, RuntimeDefault seccomp."""

SPARK_SCRATCH = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
"""The Spark pods' writable /tmp (their root filesystem is read-only; Spark's local dirs are
emptyDirs the Spark operator adds)."""


def labels_for(name: str, component: str, extra: ExtraLabels = None) -> dict[str, str]:
    """Labels of a child: ``extra`` (the EventBuilder's own labels) under the standard ones."""
    return {
        **(extra or {}),
        **selector_labels(name, component),
        c.LABEL_PART_OF: "evb",
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
    }


def selector_labels(name: str, component: str) -> dict[str, str]:
    return {c.LABEL_NAME: "evb", c.LABEL_INSTANCE: name, c.LABEL_COMPONENT: component}


def _manifest(
    child: ChildKind, name: str, namespace: str, labels: dict[str, str], **fields: Any
) -> dict[str, Any]:
    """The child of kind ``child`` of the EventBuilder ``name``: its metadata, then ``fields``
    (``spec``, ``data``)."""
    metadata = {"name": child.name(name), "namespace": namespace, "labels": labels}
    return {"apiVersion": child.api_version, "kind": child.kind, "metadata": metadata, **fields}


def orderer_endpoint(name: str, namespace: str) -> str:
    """The gRPC address of an EventBuilder's orderer inside the cluster."""
    orderer = c.ORDERER_NAME.format(name=name)
    return c.ENDPOINT.format(orderer=orderer, namespace=namespace, port=c.GRPC_PORT)


# ----------------------------------------------------------------------------- orderer


def serve_config(valid: ValidSpec) -> dict[str, Any]:
    """The ``evb serve --config`` mapping: the orderer's parameters (camelCase, as the CR spells
    them), the number of the run it starts with, and the fixed service settings of the pod.

    ``run`` is here (``evb serve --run N`` in the file's spelling), not a flag: the ConfigMap is
    written once, so the first run keeps the number it was created with. A flag would follow
    ``spec.run`` into the pod template: a raise would then roll the pod (between two runs, when
    the handler's ``BeginRun`` does the work), and a pod rolled before the orderer recorded
    that ``BeginRun`` would relabel the run in progress (only begun runs are in the log, which
    wins over the flag)."""
    ordering = {k: v for k, v in valid.orderer.to_mapping(camel=True).items() if v is not None}
    return {
        **ordering,
        "run": valid.spec["run"],
        "listen": f"[::]:{c.GRPC_PORT}",
        "dataDir": c.DATA_DIR,
        "metricsPort": c.METRICS_PORT,
        "stopGrace": c.STOP_GRACE_SECONDS,
    }


def serve_args(valid: ValidSpec) -> list[str]:
    """``evb serve`` arguments: the config file, then the service settings a user may change
    (flags win over the file; a change rolls the pod)."""
    orderer = valid.spec["orderer"]
    args = [
        "serve",
        "--config",
        f"{c.CONFIG_DIR}/{c.CONFIG_FILE}",
        "--fsync",
        orderer["fsync"],
        "--max-payload-bytes",
        str(orderer["maxPayloadBytes"]),
        "--strict-sources" if orderer["strictSources"] else "--no-strict-sources",
    ]
    if "retentionBytes" in orderer:
        args += ["--retention-bytes", str(orderer["retentionBytes"])]
    if "retentionSeconds" in orderer:
        args += ["--retention-seconds", repr(float(orderer["retentionSeconds"]))]
    tls = valid.spec.get("tls")
    if tls is not None:
        args += ["--tls-cert", f"{c.TLS_DIR}/tls.crt", "--tls-key", f"{c.TLS_DIR}/tls.key"]
        if tls["mutual"]:
            args += ["--tls-client-ca", f"{c.TLS_DIR}/ca.crt"]
    if "auth" in valid.spec:
        args += ["--token-file", f"{c.AUTH_DIR}/{c.TOKEN_FILE}"]
    return args


def _token_volume(valid: ValidSpec) -> dict[str, Any]:
    ref = valid.spec["auth"]["tokenSecretRef"]
    return {
        "name": "auth",
        "secret": {
            "secretName": ref["name"],
            "items": [{"key": ref["key"], "path": c.TOKEN_FILE}],
            "defaultMode": 0o440,
        },
    }


def _probe(tls: bool, service: str = "", **timing: int) -> dict[str, Any]:
    """gRPC health probe of ``service``; a TCP probe under TLS (the kubelet's gRPC probe has
    no TLS)."""
    grpc = {"port": c.GRPC_PORT, **({"service": service} if service else {})}
    check = {"tcpSocket": {"port": "grpc"}} if tls else {"grpc": grpc}
    return {**check, **timing}


TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""The containers running ``evb``: a start it refuses ends in one line naming the flag and the
values (a data directory whose run began with other sources, a volume it cannot write), and
with this policy the kubelet keeps the log's tail as the container's termination message, so
``kubectl describe pod`` and ``kubectl get events`` say why the pod restarts, not only that it
does."""


def build_configmap_spec(
    name: str, namespace: str, valid: ValidSpec, *, labels: ExtraLabels = None
) -> dict[str, Any]:
    text = yaml.safe_dump(serve_config(valid), sort_keys=False, default_flow_style=False)
    return _manifest(
        CONFIGMAP, name, namespace, labels_for(name, "orderer", labels), data={c.CONFIG_FILE: text}
    )


def build_statefulset_spec(
    name: str, namespace: str, valid: ValidSpec, *, default_image: str, labels: ExtraLabels = None
) -> dict[str, Any]:
    """One orderer pod with its logs on a volume claim, restricted security context, gRPC
    health probes, and no Kubernetes API token (the orderer never calls the API)."""
    spec = valid.spec
    orderer_spec = spec["orderer"]
    storage = spec["storage"]
    pod_labels = labels_for(name, "orderer", labels)
    container: dict[str, Any] = {
        "name": "orderer",
        "image": orderer_spec.get("image", default_image),
        "command": ["evb"],
        "args": serve_args(valid),
        "ports": [
            {"name": "grpc", "containerPort": c.GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": c.METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [{"name": "OPENBLAS_NUM_THREADS", "value": "1"}],
        "readinessProbe": _probe("tls" in spec, periodSeconds=5),
        "livenessProbe": _probe(
            "tls" in spec,
            c.LIVENESS_SERVICE,
            initialDelaySeconds=10,
            periodSeconds=10,
            failureThreshold=6,
        ),
        "resources": orderer_spec["resources"],
        "securityContext": dict(RESTRICTED_CONTAINER),
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "volumeMounts": [
            {"name": "config", "mountPath": c.CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": c.DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if "imagePullPolicy" in orderer_spec:
        container["imagePullPolicy"] = orderer_spec["imagePullPolicy"]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": c.CONFIG_NAME.format(name=name)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    if "tls" in spec:
        container["volumeMounts"].append({"name": "tls", "mountPath": c.TLS_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "tls",
                "secret": {"secretName": spec["tls"]["secretName"], "defaultMode": 0o440},
            }
        )
    if "auth" in spec:
        container["volumeMounts"].append(
            {"name": "auth", "mountPath": c.AUTH_DIR, "readOnly": True}
        )
        volumes.append(_token_volume(valid))
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": pod_labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage["size"]}},
        },
    }
    if "storageClassName" in storage:
        claim["spec"]["storageClassName"] = storage["storageClassName"]
    statefulset = _manifest(
        STATEFULSET,
        name,
        namespace,
        pod_labels,
        spec={
            "replicas": 1,
            "serviceName": STATEFULSET.name(name),
            "selector": {"matchLabels": selector_labels(name, "orderer")},
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain" if storage["retainOnDelete"] else "Delete",
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": c.TERMINATION_GRACE_SECONDS,
                    "securityContext": dict(RESTRICTED_POD),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
            "volumeClaimTemplates": [claim],
        },
    )
    statefulset["metadata"]["annotations"] = _orderer_check_skips(valid)
    return statefulset


def _orderer_check_skips(valid: ValidSpec) -> dict[str, str]:
    """The checks of the field (checkov reads these annotations) that do not apply to the
    orderer's StatefulSet, each with its reason, where the object is made."""
    reasons = [
        "CKV_K8S_11=no CPU limit by default: CFS throttling would delay flushes and acks; "
        "spec.orderer.resources may set one",
        "CKV_K8S_43=the image is named by its version tag (spec.orderer.image may give a digest)",
        "CKV_K8S_15=a versioned tag never changes (spec.orderer.imagePullPolicy may say Always)",
    ]
    if not valid.spec["networkPolicy"]["enabled"]:
        reasons.append(
            "CKV2_K8S_6=this EventBuilder turned its NetworkPolicy off (spec.networkPolicy.enabled)"
        )
    return {f"checkov.io/skip{n}": reason for n, reason in enumerate(reasons, start=1)}


def build_service_spec(name: str, namespace: str, *, labels: ExtraLabels = None) -> dict[str, Any]:
    return _manifest(
        SERVICE,
        name,
        namespace,
        labels_for(name, "orderer", labels),
        spec={
            "type": "ClusterIP",
            "selector": selector_labels(name, "orderer"),
            "ports": [
                {
                    "name": "grpc",
                    "port": c.GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                {
                    "name": "metrics",
                    "port": c.METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                    "appProtocol": "http",
                },
            ],
        },
    )


def _operator_peer(
    namespace: str, operator_namespace: str | None, operator_labels: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """The operator's pods (its labels, in its namespace); None when its namespace is unknown."""
    if not operator_namespace:
        return None
    peer: dict[str, Any] = {}
    if operator_namespace != namespace:
        peer["namespaceSelector"] = {
            "matchLabels": {"kubernetes.io/metadata.name": operator_namespace}
        }
    if operator_labels:
        peer["podSelector"] = {"matchLabels": dict(operator_labels)}
    elif not peer:  # same namespace, labels unknown: that namespace's pods
        peer["podSelector"] = {}
    return peer


def build_networkpolicy_spec(
    name: str,
    namespace: str,
    valid: ValidSpec,
    *,
    operator_namespace: str | None = None,
    operator_labels: Mapping[str, str] | None = None,
    labels: ExtraLabels = None,
) -> dict[str, Any]:
    """Ingress to the orderer's gRPC port only from ``spec.networkPolicy.allowedClients``, the
    Spark job's pods (by label) and the operator's pods; to its metrics port only from
    ``metricsFrom``. A policy with no rule for a port closes it."""
    policy = valid.spec["networkPolicy"]
    clients: list[dict[str, Any]] = [dict(peer) for peer in policy.get("allowedClients", [])]
    if valid.has_spark:
        clients.append({"podSelector": {"matchLabels": selector_labels(name, "spark")}})
    operator = _operator_peer(namespace, operator_namespace, operator_labels)
    if operator is not None:
        clients.append(operator)
    rules: list[dict[str, Any]] = []
    if clients:
        rules.append({"from": clients, "ports": [{"protocol": "TCP", "port": c.GRPC_PORT}]})
    if policy.get("metricsFrom"):
        rules.append(
            {
                "from": [dict(peer) for peer in policy["metricsFrom"]],
                "ports": [{"protocol": "TCP", "port": c.METRICS_PORT}],
            }
        )
    return _manifest(
        NETWORKPOLICY,
        name,
        namespace,
        labels_for(name, "orderer", labels),
        spec={
            "podSelector": {"matchLabels": selector_labels(name, "orderer")},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    )


# ----------------------------------------------------------------------------- spark


def spark_partitions(spark: Mapping[str, Any]) -> int:
    """Partitions of a micro-batch: ``spec.spark.partitions``, else one per executor core
    (instances x cores), so that every core the SparkApplication asks for builds events."""
    if "partitions" in spark:
        return int(spark["partitions"])
    executors = spark["executors"]
    return int(executors["instances"]) * int(executors["cores"])


def spark_job_config(name: str, namespace: str, spark: Mapping[str, Any]) -> JobConfig:
    """The Spark job's configuration (``orderer/spark/job.py``): where to read, how to build, how
    to cut micro-batches, where to write; the SparkApplication's arguments are its
    :meth:`~orderer.job_config.JobConfig.to_argv`. Every field of ``spec.spark`` that the job
    reads is a field here. ``spark`` is completed with the CRD's defaults first (a raw section
    will do). The security files are left to the pods' ``EVB_TLS_*``/``EVB_TOKEN_FILE``
    variables (:func:`_client_security`)."""
    spark = with_defaults(SPARK_SCHEMA, spark)
    return JobConfig(
        target=orderer_endpoint(name, namespace),
        no_build=bool(spark["noBuild"]),
        dt=None if spark["noBuild"] else int(spark["dt"]),
        max_fragments=int(spark["maxFragments"]),
        timestamp_policy=TimestampPolicy(spark["timestampPolicy"]),
        partitions=spark_partitions(spark),
        trigger_seconds=float(spark["triggerInterval"]),
        tick_rate=float(spark["tickRate"]),
        output=str(spark["output"]["path"]),
        format=OutputFormat(spark["output"]["format"]),
        glom_source_id=int(spark["glomSourceId"]),
        connect_timeout=float(c.SPARK_CONNECT_TIMEOUT_SECONDS),
        max_fragments_per_trigger=(
            int(spark["maxFragmentsPerTrigger"]) if "maxFragmentsPerTrigger" in spark else None
        ),
        follow_runs=bool(spark["followRuns"]),
    )


def object_storage_conf(storage: Mapping[str, Any]) -> dict[str, str]:
    """The s3a settings of ``spec.spark.objectStorage`` (no credentials: those are environment
    variables from the Secret, :func:`object_storage_env`)."""
    conf = {"spark.hadoop.fs.s3a.path.style.access": str(storage["pathStyleAccess"]).lower()}
    if "endpoint" in storage:
        conf["spark.hadoop.fs.s3a.endpoint"] = storage["endpoint"]
    if "region" in storage:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = storage["region"]
    if "credentialsSecret" in storage:  # those variables only: no instance-metadata fallback
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = c.S3A_ENV_CREDENTIALS_PROVIDER
    return conf


def object_storage_env(storage: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``) of the
    driver and the executors, each a ``secretKeyRef`` to the Secret: the values never appear in
    an object the operator writes."""
    secret = storage.get("credentialsSecret")
    if secret is None:
        return []
    keys = [
        (c.ENV_AWS_ACCESS_KEY_ID, storage["accessKeyIdKey"]),
        (c.ENV_AWS_SECRET_ACCESS_KEY, storage["secretAccessKeyKey"]),
    ]
    if "sessionTokenKey" in storage:
        keys.append((c.ENV_AWS_SESSION_TOKEN, storage["sessionTokenKey"]))
    return [
        {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for variable, key in keys
    ]


def _spark_pod(pod_labels: dict[str, str]) -> dict[str, Any]:
    """What the driver and the executors share: labels, the restricted security contexts and
    the writable /tmp."""
    return {
        "labels": pod_labels,
        "podSecurityContext": dict(RESTRICTED_POD),
        "securityContext": dict(RESTRICTED_CONTAINER),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def build_sparkapplication_spec(
    name: str, namespace: str, valid: ValidSpec, *, default_image: str, labels: ExtraLabels = None
) -> dict[str, Any]:
    """The Spark job as a ``SparkApplication``; it reads the orderer's Service until the end of
    the run, so it finishes by itself once the run ended."""
    spark = valid.spec["spark"]
    pod_labels = labels_for(name, "spark", labels)
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": spark.get("image", default_image),
        "mainApplicationFile": c.SPARK_JOB_FILE,
        "arguments": spark_job_config(name, namespace, spark).to_argv(),
        "sparkVersion": spark["sparkVersion"],
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": 3,
            "onFailureRetryInterval": 10,
            "onSubmissionFailureRetries": 5,
            "onSubmissionFailureRetryInterval": 20,
        },
        "driver": {
            "cores": spark["driver"]["cores"],
            "memory": spark["driver"]["memory"],
            "serviceAccount": spark["serviceAccount"],
            **_spark_pod(pod_labels),
        },
        "executor": {
            "instances": spark["executors"]["instances"],
            "cores": spark["executors"]["cores"],
            "memory": spark["executors"]["memory"],
            **_spark_pod(pod_labels),
        },
        "volumes": [dict(SPARK_SCRATCH)],
    }
    if "imagePullPolicy" in spark:
        spec["imagePullPolicy"] = spark["imagePullPolicy"]
    output = crd_output.output_volume(spark["output"])
    if output is not None:  # a local output's claim, where every pod writes its part
        volume, mount = output
        spec["volumes"].append(volume)
        for role in ("driver", "executor"):
            spec[role]["volumeMounts"].append(dict(mount))
    storage = spark.get("objectStorage")
    if storage is not None:
        _add_env(spec, object_storage_env(storage))
    _spark_security(spec, valid)
    conf = {**(object_storage_conf(storage) if storage else {}), **spark.get("sparkConf", {})}
    if conf:
        spec["sparkConf"] = conf
    return _manifest(SPARKAPPLICATION, name, namespace, pod_labels, spec=spec)


def _add_env(spec: dict[str, Any], env: list[dict[str, Any]]) -> None:
    """``env`` for the driver and the executors alike (deep copies: a dumped manifest has no
    YAML anchors, and a change to one pod's variables is not the other's)."""
    if not env:
        return
    for role in ("driver", "executor"):
        spec[role].setdefault("env", []).extend(copy.deepcopy(env))


@dataclass(frozen=True)
class _ClientSecurity:
    """What a client pod of the orderer mounts and sets to reach it (:func:`_client_security`)."""

    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    env: list[dict[str, Any]]


def _client_security(valid: ValidSpec) -> _ClientSecurity:
    """A client pod (the Spark job's, a forwarder's) reaches the orderer like any client: the
    CA (only ``ca.crt`` of the orderer's Secret: its key stays in the orderer pod), the client
    certificate under mutual TLS, the token; found through the ``EVB_TLS_*``/``EVB_TOKEN_FILE``
    variables (the defaults of every client's flags)."""
    tls, auth = valid.spec.get("tls"), valid.spec.get("auth")
    found = _ClientSecurity([], [], [])
    if tls is not None:
        found.volumes.append(
            {
                "name": "orderer-ca",
                "secret": {
                    "secretName": tls["secretName"],
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    "defaultMode": 0o440,
                },
            }
        )
        found.mounts.append({"name": "orderer-ca", "mountPath": c.TLS_DIR, "readOnly": True})
        found.env.append({"name": "EVB_TLS_CA", "value": f"{c.TLS_DIR}/ca.crt"})
        if tls["mutual"]:
            found.volumes.append(
                {
                    "name": "client-tls",
                    "secret": {"secretName": tls["clientSecretName"], "defaultMode": 0o440},
                }
            )
            found.mounts.append(
                {"name": "client-tls", "mountPath": c.CLIENT_TLS_DIR, "readOnly": True}
            )
            found.env.extend(
                [
                    {"name": "EVB_TLS_CERT", "value": f"{c.CLIENT_TLS_DIR}/tls.crt"},
                    {"name": "EVB_TLS_KEY", "value": f"{c.CLIENT_TLS_DIR}/tls.key"},
                ]
            )
    if auth is not None:
        found.volumes.append(_token_volume(valid))
        found.mounts.append({"name": "auth", "mountPath": c.AUTH_DIR, "readOnly": True})
        found.env.append({"name": "EVB_TOKEN_FILE", "value": f"{c.AUTH_DIR}/{c.TOKEN_FILE}"})
    return found


def _spark_security(spec: dict[str, Any], valid: ValidSpec) -> None:
    """Driver and executors get :func:`_client_security`'s mounts and variables."""
    found = _client_security(valid)
    if not found.volumes:
        return
    spec["volumes"] += found.volumes
    for role in ("driver", "executor"):
        spec[role]["volumeMounts"] += [dict(m) for m in found.mounts]
    _add_env(spec, found.env)


# ----------------------------------------------------------------------------- forwarders


def forward_args(upstream: Mapping[str, Any], orderer: str) -> list[str]:
    """``evb forward`` arguments for one of ``spec.upstreams`` into ``orderer`` (this
    EventBuilder's gRPC address)."""
    args = ["forward", "--from", upstream["target"], "--to", orderer]
    if "asSource" in upstream:
        args += ["--as-source", str(upstream["asSource"])]
    if "consumer" in upstream:
        args += ["--consumer", upstream["consumer"]]
    return args


def build_forward_spec(
    name: str, namespace: str, valid: ValidSpec, *, default_image: str, labels: ExtraLabels = None
) -> dict[str, Any]:
    """The forwarders of ``spec.upstreams``: one Deployment, one ``evb forward`` container per
    upstream, with the orderer's image and restricted security contexts.

    Why a Deployment of its own, not containers in the orderer's pod: a container that is not
    running makes its pod not Ready, and the Service then drops the orderer; an unreachable
    upstream would cut off every source of this EventBuilder, and the forwarders too (they reach
    the orderer through that Service: its certificate names the Service, not localhost). Here a
    forwarder failing restarts alone (the kubelet restarts each container of a pod by itself),
    and a change of ``spec.upstreams`` rolls the forwarders, not the orderer. Restarts lose
    nothing: ``evb forward`` resumes from the offset its consumer committed upstream, and the
    orderer drops what it already holds. ``Recreate``: two pods of one forwarder never run at
    once. A forwarder whose upstream's run ended ends its sources here and exits; the kubelet
    starts it again (with back-off), and it resumes at the upstream's end.

    The forwarders present this EventBuilder's credentials (``spec.tls``, ``spec.auth``) to
    both ends: ``evb forward`` has one set of them, so each upstream must accept them."""
    image = valid.spec["orderer"].get("image", default_image)
    target = orderer_endpoint(name, namespace)
    found = _client_security(valid)
    pod_labels = labels_for(name, "forward", labels)
    containers = []
    for index, upstream in enumerate(valid.spec["upstreams"]):
        container: dict[str, Any] = {
            "name": f"forward-{index}",
            "image": image,
            "command": ["evb"],
            "args": forward_args(upstream, target),
            "env": [{"name": "OPENBLAS_NUM_THREADS", "value": "1"}, *copy.deepcopy(found.env)],
            "resources": copy.deepcopy(FORWARD_RESOURCES),
            "securityContext": dict(RESTRICTED_CONTAINER),
            "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
            "volumeMounts": [
                {"name": "tmp", "mountPath": "/tmp"},
                *copy.deepcopy(found.mounts),
            ],
        }
        if "imagePullPolicy" in valid.spec["orderer"]:
            container["imagePullPolicy"] = valid.spec["orderer"]["imagePullPolicy"]
        containers.append(container)
    return _manifest(
        FORWARD,
        name,
        namespace,
        pod_labels,
        spec={
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(name, "forward")},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": dict(RESTRICTED_POD),
                    "containers": containers,
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}, *found.volumes],
                },
            },
        },
    )


# ----------------------------------------------------------------------------- all of them


def build_children(
    name: str,
    namespace: str,
    valid: ValidSpec,
    *,
    orderer_image: str,
    spark_image: str,
    labels: ExtraLabels = None,
    operator_namespace: str | None = None,
    operator_labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every child, in creation order: configuration before the pod that mounts it, the
    orderer before the job that reads it."""
    children = [
        build_configmap_spec(name, namespace, valid, labels=labels),
        build_service_spec(name, namespace, labels=labels),
        build_statefulset_spec(name, namespace, valid, default_image=orderer_image, labels=labels),
    ]
    if valid.spec["networkPolicy"]["enabled"]:
        children.append(
            build_networkpolicy_spec(
                name,
                namespace,
                valid,
                operator_namespace=operator_namespace,
                operator_labels=operator_labels,
                labels=labels,
            )
        )
    if valid.spec.get("upstreams"):
        children.append(
            build_forward_spec(name, namespace, valid, default_image=orderer_image, labels=labels)
        )
    if valid.has_spark:
        children.append(
            build_sparkapplication_spec(
                name, namespace, valid, default_image=spark_image, labels=labels
            )
        )
    return children
