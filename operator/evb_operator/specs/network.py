"""The orderer's NetworkPolicy (``spec.networkPolicy.enabled``): who may reach its gRPC and
metrics ports.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from evb_operator import constants as c
from evb_operator.specs.common import (
    NETWORKPOLICY,
    ExtraLabels,
    labels_for,
    manifest,
    selector_labels,
)
from evb_operator.validation import ValidSpec

__all__ = [
    "build_networkpolicy_spec",
]


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
    Spark job's pods (by label), the release's (a run over several orderers) and the operator's
    pods; to its metrics port only from
    ``metricsFrom``. A policy with no rule for a port closes it."""
    policy = valid.network_policy
    clients: list[dict[str, Any]] = [copy.deepcopy(dict(peer)) for peer in policy.allowed_clients]
    if valid.has_spark:
        clients.append({"podSelector": {"matchLabels": selector_labels(name, "spark")}})
    if valid.orderers > 1:  # evb release reads and ends sources at every orderer
        clients.append({"podSelector": {"matchLabels": selector_labels(name, "release")}})
    operator = _operator_peer(namespace, operator_namespace, operator_labels)
    if operator is not None:
        clients.append(operator)
    rules: list[dict[str, Any]] = []
    if clients:
        rules.append({"from": clients, "ports": [{"protocol": "TCP", "port": c.GRPC_PORT}]})
    if policy.metrics_from:
        rules.append(
            {
                "from": [copy.deepcopy(dict(peer)) for peer in policy.metrics_from],
                "ports": [{"protocol": "TCP", "port": c.METRICS_PORT}],
            }
        )
    return manifest(
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
