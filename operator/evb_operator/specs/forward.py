"""The forwarders of ``spec.upstreams``: a Deployment of ``evb forward`` containers, one per
upstream (:func:`build_forward_spec` says why not in the orderer's pod).
"""

from __future__ import annotations

from typing import Any

from evb_operator.specs.common import (
    FORWARD,
    ExtraLabels,
    client_container,
    client_deployment,
    client_security,
    labels_for,
    run_targets,
)
from evb_operator.typed_spec import Upstream
from evb_operator.validation import ValidSpec
from orderer.flags.forward import ForwardCommand

__all__ = [
    "build_forward_spec",
    "forward_args",
]


FORWARD_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}
"""A forwarder's container: it holds at most a few replies of the upstream in memory."""


def forward_args(upstream: Upstream, orderer: str) -> list[str]:
    """``evb forward`` arguments for one of ``spec.upstreams`` into ``orderer`` (this
    EventBuilder's gRPC address; a run over several orderers: each one's, comma-separated, which
    ``evb forward`` routes over as every source does), as a
    :class:`~orderer.flags.forward.ForwardCommand` writes them (its credentials are the pod's
    variables: :func:`build_forward_spec`)."""
    return ForwardCommand(
        upstream=upstream.target,
        downstream=orderer,
        as_source=upstream.as_source,
        consumer=upstream.consumer,
    ).to_argv()


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
    image = default_image if valid.orderer_pod.image is None else valid.orderer_pod.image
    target = run_targets(name, namespace, valid)  # several orderers: each, in index order
    found = client_security(valid)
    pod_labels = labels_for(name, "forward", labels)
    containers = [
        client_container(
            f"forward-{index}", valid, image, forward_args(upstream, target), found,
            FORWARD_RESOURCES,
        )
        for index, upstream in enumerate(valid.upstreams)
    ]
    return client_deployment(FORWARD, name, namespace, "forward", pod_labels, 1, containers, found)
