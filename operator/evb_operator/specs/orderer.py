"""The orderer's children: the ConfigMap of ``evb serve --config`` (written once: the
configuration the run starts with), the StatefulSet of the orderer pods (one, or the N of a run
spread over several: ``spec.orderers``) and their Services (the Service of the run; with N > 1 the
headless Service that names each orderer).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from evb_operator import constants as c
from evb_operator.specs.common import (
    CONFIGMAP,
    HEADLESS,
    RESTRICTED_CONTAINER,
    RESTRICTED_POD,
    SERVICE,
    STATEFULSET,
    TERMINATION_MESSAGE_POLICY,
    ExtraLabels,
    labels_for,
    manifest,
    orderer_peers,
    selector_labels,
    token_volume,
)
from evb_operator.validation import ValidSpec
from orderer.flags.argv import command_arguments
from orderer.flags.serve import ServeCommand, build_parser

__all__ = [
    "ORDERER_INDEX_ARGUMENT",
    "build_configmap_spec",
    "build_headless_service_spec",
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
    wins over the flag).

    A run over several orderers adds N and T (``orderers``, ``sliceTicks``) here, for the same
    reason: they are fixed for the run, the same for every pod, and recorded by each orderer in
    its data directory; the file holds what the run starts with. What differs from pod to pod
    (the index) and the cluster's addresses (the peers, which the orderer does not record) are
    flags (:func:`serve_args`). With one orderer the file is what it always was."""
    ordering = {k: v for k, v in valid.orderer.to_mapping(camel=True).items() if v is not None}
    slicing = (
        {} if valid.orderers == 1 else {"orderers": valid.orderers, "sliceTicks": valid.slice_ticks}
    )
    return {
        **ordering,
        **slicing,
        "run": valid.run,
        "listen": f"[::]:{c.GRPC_PORT}",
        "dataDir": c.DATA_DIR,
        "metricsPort": c.METRICS_PORT,
        "stopGrace": c.STOP_GRACE_SECONDS,
    }


ORDERER_INDEX_ARGUMENT = f"$({c.ENV_ORDERER_INDEX})"
"""The value of ``--orderer-index`` in the pod template: the kubelet replaces it with the
variable's value (the pod's ordinal) before the container starts."""


def serve_args(valid: ValidSpec, peers: tuple[str, ...] = ()) -> list[str]:
    """``evb serve`` arguments: the config file, then the service settings a user may change
    (flags win over the file; a change rolls the pod), as a
    :class:`~orderer.flags.serve.ServeCommand` writes them.

    ``peers``: the orderers of a run over several (:func:`~evb_operator.specs.common.
    orderer_peers`), given as ``--peers`` (``GetStats`` shows them: a source or the Spark job
    given one orderer's address finds the others) and followed by ``--orderer-index
    $(EVB_ORDERER_INDEX)``. Why a variable reference: the StatefulSet has one pod template for
    its N pods, and the kubelet expands ``$(VAR)`` in the arguments from the container's
    variables, here the pod's ordinal (:func:`_ordinal_variable`); no shell, no wrapper, no
    parsing of the pod's name. The flag is written by ``evb serve``'s own parser, as
    ServeCommand writes the others (its field is an integer, this value a reference to one)."""
    pod, tls = valid.orderer_pod, valid.tls
    command = ServeCommand(
        config=Path(c.CONFIG_DIR, c.CONFIG_FILE),
        fsync=pod.fsync,
        max_payload_bytes=pod.max_payload_bytes,
        strict_sources=pod.strict_sources,
        retention_bytes=pod.retention_bytes,
        retention_seconds=pod.retention_seconds,
        tls_cert=None if tls is None else Path(c.TLS_DIR, "tls.crt"),
        tls_key=None if tls is None else Path(c.TLS_DIR, "tls.key"),
        tls_client_ca=Path(c.TLS_DIR, "ca.crt") if tls is not None and tls.mutual else None,
        token_file=Path(c.AUTH_DIR, c.TOKEN_FILE) if valid.auth is not None else None,
        peers=peers or None,
    )
    if not peers:
        return command.to_argv()
    index = command_arguments(None, build_parser(), {"orderer_index": ORDERER_INDEX_ARGUMENT})
    return [*command.to_argv(), *index]


def _ordinal_variable() -> dict[str, Any]:
    """``EVB_ORDERER_INDEX``, the pod's ordinal, from the label the StatefulSet controller sets
    on each pod (``apps.kubernetes.io/pod-index``) through the downward API.

    Why this way: the controller writes the ordinal itself, as a number, on the pod it creates
    (Kubernetes 1.28 and later; the chart asks for 1.29), so nothing derives it from text the
    user chose (the EventBuilder's name can end in ``-3`` too), and the orderer's image needs no
    shell (its root is read-only; an init container would need a volume and a script). A
    cluster without the label leaves the variable empty: ``evb serve`` then refuses to start,
    naming ``--orderer-index`` (the termination message says so), rather than taking a wrong
    index."""
    selector = {"fieldPath": f"metadata.labels['{c.POD_INDEX_LABEL}']"}
    return {"name": c.ENV_ORDERER_INDEX, "valueFrom": {"fieldRef": selector}}


def _spread_over_nodes(name: str) -> dict[str, Any]:
    """At most one orderer of the run per node: a *required* pod anti-affinity on the node.

    Why required, not preferred: the orderers of a run share nothing but what their node gives
    them, and measured on one host the disk binds first (docs/scale-out.md, "Measuring it on a
    many-core host": N independent orderers on one disk reach 0.75, 0.53, 0.29 of N times one
    orderer's rate at N = 2, 4, 8, where on tmpfs they reach 1.00 and 0.88 at N = 2 and 4).
    And a run goes at most N times its slowest orderer's rate (docs/scale-out.md,
    "Back-pressure"): two orderers on one node slow the whole run, not only themselves. A
    preferred rule would place them together silently when nodes are short, giving a run
    slower than asked with nothing to say why; the required one leaves the extra pod Pending
    with a FailedScheduling Event naming the anti-affinity, at creation, where it is seen. The
    price: a cluster with fewer schedulable nodes than orderers cannot run the EventBuilder, and
    an orderer whose node is lost while every other node holds one waits Pending (the run
    waits for it, as it waits for any orderer that is down: docs/scale-out.md, "One orderer
    failing"). ``IgnoredDuringExecution``: pods already running are never evicted for it."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": selector_labels(name, "orderer")},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


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
    health probes, and no Kubernetes API token (the orderer never calls the API).

    A run over several orderers (``spec.orderers`` N > 1): N pods of the one template, pod k
    orderer k (its ordinal, :func:`serve_args`), each with its own claim from the claim
    template (``data-NAME-orderer-k``: an orderer's logs are its share of the run and follow
    its ordinal), one per node (:func:`_spread_over_nodes`), governed by the headless Service
    that gives each its stable name. ``Parallel``: the orderers are independent, so the pods
    are created together rather than each after the one before is ready; a run needs all of
    them, and one pod stuck (its volume, its node) would otherwise keep the ones after it from
    being created at all. Rolling updates still go one pod at a time. (``serviceName`` and the
    policy cannot change on a StatefulSet; N cannot either.) With one orderer the StatefulSet
    is what it always was."""
    orderer_pod, storage, tls = valid.orderer_pod, valid.storage, valid.tls
    pod_labels = labels_for(name, "orderer", labels)
    sliced = valid.orderers > 1
    peers = orderer_peers(name, namespace, valid.orderers) if sliced else ()
    env: list[dict[str, Any]] = [{"name": "OPENBLAS_NUM_THREADS", "value": "1"}]
    if sliced:
        env.append(_ordinal_variable())
    container: dict[str, Any] = {
        "name": "orderer",
        "image": default_image if orderer_pod.image is None else orderer_pod.image,
        "command": ["evb"],
        "args": serve_args(valid, peers),
        "ports": [
            {"name": "grpc", "containerPort": c.GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": c.METRICS_PORT, "protocol": "TCP"},
        ],
        "env": env,
        "readinessProbe": _probe(tls is not None, periodSeconds=5),
        "livenessProbe": _probe(
            tls is not None,
            c.LIVENESS_SERVICE,
            initialDelaySeconds=10,
            periodSeconds=10,
            failureThreshold=6,
        ),
        "resources": copy.deepcopy(dict(orderer_pod.resources)),
        "securityContext": dict(RESTRICTED_CONTAINER),
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "volumeMounts": [
            {"name": "config", "mountPath": c.CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": c.DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if orderer_pod.image_pull_policy is not None:
        container["imagePullPolicy"] = orderer_pod.image_pull_policy
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": c.CONFIG_NAME.format(name=name)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    if tls is not None:
        container["volumeMounts"].append({"name": "tls", "mountPath": c.TLS_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "tls",
                "secret": {"secretName": tls.secret_name, "defaultMode": 0o440},
            }
        )
    if valid.auth is not None:
        container["volumeMounts"].append(
            {"name": "auth", "mountPath": c.AUTH_DIR, "readOnly": True}
        )
        volumes.append(token_volume(valid.auth))
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": pod_labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage.size}},
        },
    }
    if storage.storage_class_name is not None:
        claim["spec"]["storageClassName"] = storage.storage_class_name
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": c.TERMINATION_GRACE_SECONDS,
        "securityContext": dict(RESTRICTED_POD),
        "containers": [container],
        "volumes": volumes,
    }
    if sliced:
        pod["affinity"] = _spread_over_nodes(name)
    statefulset = manifest(
        STATEFULSET,
        name,
        namespace,
        pod_labels,
        spec={
            "replicas": valid.orderers,
            "serviceName": (HEADLESS if sliced else STATEFULSET).name(name),
            "selector": {"matchLabels": selector_labels(name, "orderer")},
            "podManagementPolicy": "Parallel" if sliced else "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain" if storage.retain_on_delete else "Delete",
                "whenScaled": "Retain",
            },
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
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
    if not valid.network_policy.enabled:
        reasons.append(
            "CKV2_K8S_6=this EventBuilder turned its NetworkPolicy off (spec.networkPolicy.enabled)"
        )
    return {f"checkov.io/skip{n}": reason for n, reason in enumerate(reasons, start=1)}


def _grpc_port() -> dict[str, Any]:
    """The orderer's gRPC port, as both its Services expose it."""
    return {
        "name": "grpc",
        "port": c.GRPC_PORT,
        "targetPort": "grpc",
        "protocol": "TCP",
        "appProtocol": "grpc",
    }


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
                _grpc_port(),
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


def build_headless_service_spec(
    name: str, namespace: str, *, labels: ExtraLabels = None
) -> dict[str, Any]:
    """The headless Service of a run over several orderers: it governs the StatefulSet, so that
    each orderer has a stable name (``NAME-orderer-k.NAME-orderer-headless.NAMESPACE.svc``)
    whose DNS record follows its pod, which sources, ``evb release`` and the Spark job reach
    orderer k at. Beside the run's Service (``NAME-orderer``), which still answers for any one
    orderer (``evb stats``, a source given one address and the peers it names).

    Not-ready pods are not published (the default), as the run's Service leaves them out: an
    orderer that is not ready takes no data (recovering, or its volume full), and a client
    waits for its name as it waits for its answer; ``evb release`` then releases nothing, as it
    must while any orderer is down."""
    return manifest(
        HEADLESS,
        name,
        namespace,
        labels_for(name, "orderer", labels),
        spec={
            "clusterIP": "None",
            "selector": selector_labels(name, "orderer"),
            "ports": [_grpc_port()],
        },
    )
