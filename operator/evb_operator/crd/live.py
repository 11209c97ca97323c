"""The Spark job's live page in the ``EventBuilder`` spec (``spec.spark.ui``): the port, its
bounds, and the CEL rule that keeps it off the ports Spark itself takes in the driver. Whether
it is set is part of how a run is built (``crd.BUILDING_PRESENCE`` says why; the CRD's building
rule holds it).

Why a port and nothing else: the page is read-only (GET and HEAD, the run's figures and
histograms: ``orderer/spark/live/page.py``) and the operator decides the rest, the interface the
driver listens on and the Service in front of it (:mod:`evb_operator.specs.live`). Why not below
1024: the driver runs as a non-root user without capabilities, which cannot bind there. Why not
Spark's ports: the job binds the page before Spark starts, so a page on 7078 or 7079 would take
the driver's RPC or block-manager port from Spark (its executors connect there), and one on 4040
would move Spark's own web UI away from the port the Spark operator's UI Service points at.
"""

from __future__ import annotations

from typing import Any

from evb_operator.crd.schema import Rule, _integer
from evb_operator.crd.texts import described

__all__ = ["LIVE_RULES", "MAX_UI_PORT", "MIN_UI_PORT", "SPARK_DRIVER_PORTS", "ui_schema"]

MIN_UI_PORT = 1024
"""The lowest port a process without ``CAP_NET_BIND_SERVICE`` may bind."""
MAX_UI_PORT = 65535
SPARK_DRIVER_PORTS = {
    4040: "Spark's web UI",
    7078: "the driver's RPC port",
    7079: "its block manager",
}
"""The ports Spark takes in a driver pod on Kubernetes (``spark.ui.port``, and the fixed
``spark.driver.port`` and ``spark.driver.blockManager.port`` of spark-submit's Kubernetes
client), with what each is for."""


def ui_schema() -> dict[str, Any]:
    """``spec.spark.ui``: unset, there is no page. Its description is its field's text
    (:attr:`evb_operator.typed_spec.Spark.ui`), which names the bounds and the ports here (a
    test holds them together)."""
    return _integer(described("spark.ui"), minimum=MIN_UI_PORT, maximum=MAX_UI_PORT)


_TAKEN = ", ".join(f"{port} ({what})" for port, what in SPARK_DRIVER_PORTS.items())

LIVE_RULES: tuple[Rule, ...] = (
    Rule(
        path=("spark",),
        cel="!has(self.ui) || !(self.ui in ["
        + ", ".join(str(port) for port in SPARK_DRIVER_PORTS)
        + "])",
        message=f"ui cannot be one of the ports Spark takes in the driver: {_TAKEN}; choose"
        " another port for the live page",
        check=lambda spark: spark.get("ui") not in SPARK_DRIVER_PORTS,
        field_path=".ui",
    ),
)
"""The rule of ``spec.spark.ui`` (``crd.RULES`` holds it with the others)."""
