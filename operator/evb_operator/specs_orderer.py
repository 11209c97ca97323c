"""The orderer's children: the ConfigMap of ``evb serve --config`` (written once: the
configuration the run starts with), the StatefulSet of one orderer pod and its Service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from evb_operator import constants as c
from evb_operator.specs_common import (
    CONFIGMAP,
    RESTRICTED_CONTAINER,
    RESTRICTED_POD,
    SERVICE,
    STATEFULSET,
    TERMINATION_MESSAGE_POLICY,
    ExtraLabels,
    labels_for,
    manifest,
    selector_labels,
    token_volume,
)
from evb_operator.validation import ValidSpec
from orderer.flags.serve import ServeCommand

__all__ = [
    "build_configmap_spec",
    "build_service_spec",
    "build_statefulset_spec",
    "serve_args",
    "serve_config",
]


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
    (flags win over the file; a change rolls the pod), as a
    :class:`~orderer.flags.serve.ServeCommand` writes them."""
    orderer = valid.spec["orderer"]
    tls = valid.spec.get("tls")
    size_kept, age_kept = orderer.get("retentionBytes"), orderer.get("retentionSeconds")
    return ServeCommand(
        config=Path(c.CONFIG_DIR, c.CONFIG_FILE),
        fsync=orderer["fsync"],
        max_payload_bytes=int(orderer["maxPayloadBytes"]),
        strict_sources=bool(orderer["strictSources"]),
        retention_bytes=None if size_kept is None else int(size_kept),
        retention_seconds=None if age_kept is None else float(age_kept),
        tls_cert=None if tls is None else Path(c.TLS_DIR, "tls.crt"),
        tls_key=None if tls is None else Path(c.TLS_DIR, "tls.key"),
        tls_client_ca=Path(c.TLS_DIR, "ca.crt") if tls is not None and tls["mutual"] else None,
        token_file=Path(c.AUTH_DIR, c.TOKEN_FILE) if "auth" in valid.spec else None,
    ).to_argv()


def _probe(tls: bool, service: str = "", **timing: int) -> dict[str, Any]:
    """gRPC health probe of ``service``; a TCP probe under TLS (the kubelet's gRPC probe has
    no TLS)."""
    grpc = {"port": c.GRPC_PORT, **({"service": service} if service else {})}
    check = {"tcpSocket": {"port": "grpc"}} if tls else {"grpc": grpc}
    return {**check, **timing}


def build_configmap_spec(
    name: str, namespace: str, valid: ValidSpec, *, labels: ExtraLabels = None
) -> dict[str, Any]:
    text = yaml.safe_dump(serve_config(valid), sort_keys=False, default_flow_style=False)
    return manifest(
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
        volumes.append(token_volume(valid))
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": pod_labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage["size"]}},
        },
    }
    if "storageClassName" in storage:
        claim["spec"]["storageClassName"] = storage["storageClassName"]
    statefulset = manifest(
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
    return manifest(
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
