"""What every child of an EventBuilder shares: its kind and name, its labels, its manifest's
metadata, the restricted security contexts, and how a client pod of the orderer reaches it
(the orderer's address, the CA, the client certificate, the token).

The children themselves are built by the other modules of :mod:`evb_operator.specs`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evb_operator import constants as c
from evb_operator.typed_spec import Auth
from evb_operator.validation import ValidSpec

__all__ = [
    "CONFIGMAP",
    "DELETION_ORDER",
    "FORWARD",
    "HEADLESS",
    "LIVE",
    "NETWORKPOLICY",
    "RELEASE",
    "RESTRICTED_CONTAINER",
    "RESTRICTED_POD",
    "SERVICE",
    "SPARKAPPLICATION",
    "SPARK_API_VERSION",
    "STATEFULSET",
    "TERMINATION_MESSAGE_POLICY",
    "ChildKind",
    "ClientSecurity",
    "ExtraLabels",
    "client_security",
    "labels_for",
    "manifest",
    "orderer_endpoint",
    "orderer_peers",
    "run_targets",
    "selector_labels",
    "token_volume",
]


SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"


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
HEADLESS = ChildKind("v1", "Service", c.HEADLESS_NAME)
RELEASE = ChildKind("apps/v1", "Deployment", c.RELEASE_NAME)
LIVE = ChildKind("v1", "Service", c.LIVE_NAME)

DELETION_ORDER = (
    SPARKAPPLICATION,
    LIVE,
    FORWARD,
    RELEASE,
    NETWORKPOLICY,
    STATEFULSET,
    HEADLESS,
    SERVICE,
    CONFIGMAP,
)
"""The Spark job first (it stops reading) with its live page's Service, the forwarders (they stop
sending) and the release (it stops ending sources), then the orderers, their configuration
last."""


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


def manifest(
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


def orderer_peers(name: str, namespace: str, orderers: int) -> tuple[str, ...]:
    """The gRPC address of each orderer of a run over several, in index order: the stable name
    of StatefulSet pod k under the headless Service
    (``run-orderer-2.run-orderer-headless.daq.svc:50051``), which follows the pod wherever it is
    scheduled."""
    service = HEADLESS.name(name)
    return tuple(
        c.PEER_ENDPOINT.format(
            pod=f"{STATEFULSET.name(name)}-{index}",
            service=service,
            namespace=namespace,
            port=c.GRPC_PORT,
        )
        for index in range(orderers)
    )


def run_targets(name: str, namespace: str, valid: ValidSpec) -> str:
    """What a client of the whole run is given as its orderers (the Spark job's and ``evb
    release``'s ``--target``): the Service with one orderer; with several, every orderer's own
    address in index order, comma-separated, the form ``evb send --target`` and the source
    client take."""
    if valid.orderers == 1:
        return orderer_endpoint(name, namespace)
    return ",".join(orderer_peers(name, namespace, valid.orderers))


def token_volume(auth: Auth) -> dict[str, Any]:
    """The volume of the bearer token (``spec.auth.tokenSecretRef``), as the file ``token``."""
    ref = auth.token_secret_ref
    return {
        "name": "auth",
        "secret": {
            "secretName": ref.name,
            "items": [{"key": ref.key, "path": c.TOKEN_FILE}],
            "defaultMode": 0o440,
        },
    }


TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""The containers running ``evb``: a start it refuses ends in one line naming the flag and the
values (a data directory whose run began with other sources, a volume it cannot write), and
with this policy the kubelet keeps the log's tail as the container's termination message, so
``kubectl describe pod`` and ``kubectl get events`` say why the pod restarts, not only that it
does."""


@dataclass(frozen=True)
class ClientSecurity:
    """What a client pod of the orderer mounts and sets to reach it (:func:`client_security`)."""

    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    env: list[dict[str, Any]]


def client_security(valid: ValidSpec) -> ClientSecurity:
    """A client pod (the Spark job's, a forwarder's) reaches the orderer like any client: the
    CA (only ``ca.crt`` of the orderer's Secret: its key stays in the orderer pod), the client
    certificate under mutual TLS, the token; found through the ``EVB_TLS_*``/``EVB_TOKEN_FILE``
    variables (the defaults of every client's flags)."""
    tls, auth = valid.tls, valid.auth
    found = ClientSecurity([], [], [])
    if tls is not None:
        found.volumes.append(
            {
                "name": "orderer-ca",
                "secret": {
                    "secretName": tls.secret_name,
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    "defaultMode": 0o440,
                },
            }
        )
        found.mounts.append({"name": "orderer-ca", "mountPath": c.TLS_DIR, "readOnly": True})
        found.env.append({"name": "EVB_TLS_CA", "value": f"{c.TLS_DIR}/ca.crt"})
        if tls.mutual:
            found.volumes.append(
                {
                    "name": "client-tls",
                    "secret": {"secretName": tls.client_secret, "defaultMode": 0o440},
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
        found.volumes.append(token_volume(auth))
        found.mounts.append({"name": "auth", "mountPath": c.AUTH_DIR, "readOnly": True})
        found.env.append({"name": "EVB_TOKEN_FILE", "value": f"{c.AUTH_DIR}/{c.TOKEN_FILE}"})
    return found


def client_container(
    name: str, valid: ValidSpec, image: str, args: list[str], found: ClientSecurity,
    resources: Mapping[str, Any],
) -> dict[str, Any]:
    """A container of the orderer's image running ``evb`` as a client of the run's orderers
    (a forwarder, the release): its credentials, restricted security, a writable /tmp."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": ["evb"],
        "args": args,
        "env": [{"name": "OPENBLAS_NUM_THREADS", "value": "1"}, *copy.deepcopy(found.env)],
        "resources": copy.deepcopy(dict(resources)),
        "securityContext": dict(RESTRICTED_CONTAINER),
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *copy.deepcopy(found.mounts)],
    }
    if valid.orderer_pod.image_pull_policy is not None:
        container["imagePullPolicy"] = valid.orderer_pod.image_pull_policy
    return container


def client_deployment(
    kind: ChildKind, name: str, namespace: str, component: str,
    pod_labels: dict[str, str], replicas: int, containers: list[dict[str, Any]],
    found: ClientSecurity,
) -> dict[str, Any]:
    """A Deployment of client pods (:func:`client_container`): ``Recreate``, so that two of one
    never run at once; no service account token, no service links, restricted security."""
    return manifest(
        kind,
        name,
        namespace,
        pod_labels,
        spec={
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(name, component)},
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
