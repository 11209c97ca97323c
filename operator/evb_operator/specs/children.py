"""Every child of an EventBuilder (:func:`build_children`): the whole manifest of each, from the
pure ``build_<kind>_spec`` functions of :mod:`~evb_operator.specs.orderer` (ConfigMap,
StatefulSet, Services), :mod:`~evb_operator.specs.network` (NetworkPolicy),
:mod:`~evb_operator.specs.forward` (the forwarders), :mod:`~evb_operator.specs.release` (the
release), :mod:`~evb_operator.specs.spark` (the SparkApplication) and
:mod:`~evb_operator.specs.live` (the live page's Service); what they share (kinds, labels,
security contexts) is :mod:`~evb_operator.specs.common`'s.

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
- Service ``<name>-live``, when ``spec.spark.ui`` is set: the Spark driver's live page
  (``evb spark-job --ui``), on that port.
- NetworkPolicy ``<name>-orderer``, when ``spec.networkPolicy.enabled``.
- Deployment ``<name>-forward``, when ``spec.upstreams`` is set: one ``evb forward`` container
  per upstream (:func:`build_forward_spec` says why not in the orderer's pod).

A run over several orderers (``spec.orderers`` N > 1, ``spec.sliceTicks`` T; docs/scale-out.md)
differs in these, and with N = 1 every object is what it was before N existed:

- the ConfigMap holds N and T too;
- the StatefulSet has N pods, pod k orderer k, each with its own claim, one per node
  (:func:`~evb_operator.specs.orderer.build_statefulset_spec`);
- Service ``<name>-orderer-headless`` (headless) governs it: orderer k is
  ``<name>-orderer-k.<name>-orderer-headless.<namespace>.svc:50051``;
- Deployment ``<name>-release``: ``evb release`` over every orderer
  (:func:`~evb_operator.specs.release.build_release_spec`);
- the SparkApplication's ``--target`` names every orderer, in index order;
- the NetworkPolicy lets the release in too.

Security (``spec.tls``, ``spec.auth``): the orderer gets ``--tls-cert/--tls-key`` (and
``--tls-client-ca`` under mutual TLS) on the mounted Secret, ``--token-file`` on the mounted
token; they are flags, not ConfigMap keys, because the ConfigMap is never rewritten while a TLS
change must roll the pod. The Spark pods mount only ``ca.crt`` of the orderer's Secret, the
client certificate and the token, and find them through the ``EVB_TLS_*``/``EVB_TOKEN_FILE``
variables (:meth:`orderer.client.ChannelSecurity.from_env`). With TLS on, the kubelet's probes
are TCP probes: its gRPC probe cannot speak TLS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evb_operator.specs.common import ExtraLabels
from evb_operator.specs.forward import build_forward_spec
from evb_operator.specs.live import build_live_service_spec
from evb_operator.specs.network import build_networkpolicy_spec
from evb_operator.specs.orderer import (
    build_configmap_spec,
    build_headless_service_spec,
    build_service_spec,
    build_statefulset_spec,
)
from evb_operator.specs.release import build_release_spec
from evb_operator.specs.spark import build_sparkapplication_spec
from evb_operator.validation import ValidSpec

__all__ = ["build_children"]


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
    ]
    if valid.orderers > 1:  # before the StatefulSet it governs
        children.append(build_headless_service_spec(name, namespace, labels=labels))
    children.append(
        build_statefulset_spec(name, namespace, valid, default_image=orderer_image, labels=labels)
    )
    if valid.network_policy.enabled:
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
    if valid.upstreams:
        children.append(
            build_forward_spec(name, namespace, valid, default_image=orderer_image, labels=labels)
        )
    if valid.orderers > 1:
        children.append(
            build_release_spec(name, namespace, valid, default_image=orderer_image, labels=labels)
        )
    if valid.has_spark:
        children.append(
            build_sparkapplication_spec(
                name, namespace, valid, default_image=spark_image, labels=labels
            )
        )
        page = build_live_service_spec(name, namespace, valid, labels=labels)
        if page is not None:
            children.append(page)
    return children
