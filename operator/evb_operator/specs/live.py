"""The Spark job's live page (``spec.spark.ui``): where it is (:class:`PageAddress`: the job's
``--ui``, the driver's container port, the URL the status names) and the ``Service`` in front
of it (:func:`build_live_service_spec`).

Why a Service of its own: the page is served by the Spark driver, a pod the Spark operator
creates, again with every submission (a change of ``spec.spark``, a retry after a failure), each
time with a new name and address; a Service gives it one name for the run. It selects the driver
alone by the Spark job's labels (the SparkApplication gives them to the driver and the
executors) and the label Spark puts on the driver, ``spark-role: driver``: the executors serve
no page. ClusterIP only: the page is for the people on shift, reached in the cluster or through
``kubectl port-forward``; exposing it further is the cluster's business (an Ingress).

Without ``spec.spark.ui`` none of this exists: no flag, no port, no Service, no URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evb_operator import constants as c
from evb_operator.specs.common import LIVE, ExtraLabels, labels_for, manifest, selector_labels
from evb_operator.typed_spec import Spark
from evb_operator.validation import ValidSpec

__all__ = ["PageAddress", "build_live_service_spec", "driver_selector", "page_address"]


@dataclass(frozen=True)
class PageAddress:
    """Where an EventBuilder's live page is served."""

    service: str
    """The Service's name (``NAME-live``)."""
    namespace: str
    port: int
    """``spec.spark.ui``: the driver's port and the Service's."""

    @property
    def listen(self) -> str:
        """The job's ``--ui``: every interface of the driver pod, so that the Service reaches
        it (the job alone would listen on loopback)."""
        return c.LIVE_LISTEN.format(port=self.port)

    @property
    def url(self) -> str:
        """The page inside the cluster (``status.spark.ui``)."""
        return c.LIVE_URL.format(service=self.service, namespace=self.namespace, port=self.port)

    def container_port(self) -> dict[str, Any]:
        """The driver's port, named (the SparkApplication's ``driver.ports``): what the pod
        serves, for ``kubectl describe`` and a NetworkPolicy that names it."""
        return {"name": c.LIVE_PORT_NAME, "containerPort": self.port, "protocol": "TCP"}


def page_address(name: str, namespace: str, spark: Spark | None) -> PageAddress | None:
    """The live page of the EventBuilder ``name`` with Spark section ``spark``; None without
    ``spark.ui`` (or without a Spark section)."""
    if spark is None or spark.ui is None:
        return None
    return PageAddress(LIVE.name(name), namespace, spark.ui)


def driver_selector(name: str) -> dict[str, str]:
    """The labels of the Spark job's driver pod: the job's (the SparkApplication's
    ``driver.labels``) and Spark's ``spark-role: driver``."""
    return {**selector_labels(name, "spark"), c.SPARK_ROLE_LABEL: c.SPARK_DRIVER_ROLE}


def build_live_service_spec(
    name: str, namespace: str, valid: ValidSpec, *, labels: ExtraLabels = None
) -> dict[str, Any] | None:
    """The ClusterIP Service of the live page, on ``spec.spark.ui`` to the same port of the
    driver; None without ``spec.spark.ui``. The target is the number, not the port's name: the
    Spark operator puts ``driver.ports`` on the pod through its admission webhook, and a named
    target would leave the Service without endpoints where that webhook is off."""
    page = page_address(name, namespace, valid.spark)
    if page is None:
        return None
    return manifest(
        LIVE,
        name,
        namespace,
        labels_for(name, "spark", labels),
        spec={
            "type": "ClusterIP",
            "selector": driver_selector(name),
            "ports": [
                {
                    "name": c.LIVE_PORT_NAME,
                    "port": page.port,
                    "targetPort": page.port,
                    "protocol": "TCP",
                }
            ],
        },
    )
