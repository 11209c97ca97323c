"""The kopf glue of the evb operator: ``kopf run -m evb_operator.handlers`` (importing this
package registers every handler).

Glue only (no manifest and no status is built here): every handler validates
(:mod:`~evb_operator.validation`), builds (:mod:`~evb_operator.specs`, :mod:`~evb_operator.status`),
adopts, creates or patches through :mod:`~evb_operator.kube`, calls the orderer through
:mod:`orderer.client`, and patches the status. Errors are translated to kopf's once, in
:mod:`~evb_operator.handlers.common`.

The modules:

- :mod:`~evb_operator.handlers.registrations`: every handler registered with kopf, in the order
  kopf runs them;
- :mod:`~evb_operator.handlers.common`: what the handlers share: the valid spec or the Invalid
  status, the children built with the operator's environment, the orderer of an EventBuilder
  and how to reach it, the errors translated;
- :mod:`~evb_operator.handlers.activities`: the operator's startup settings, login, readiness
  probe and cleanup;
- :mod:`~evb_operator.handlers.children`: create the children, follow the spec's sections into
  them (one skeleton, :func:`~evb_operator.handlers.children.reapply`), delete them;
- :mod:`~evb_operator.handlers.runs`: the calls to the orderers: live parameters
  (``Configure``), ``spec.run`` (``BeginRun``), ``spec.state: Ended`` (``EndRun``);
- :mod:`~evb_operator.handlers.timer`: the status timer (``GetStats``, the StatefulSet, the
  SparkApplication);
- :mod:`~evb_operator.handlers.control`: the calls to every orderer of a run over several.

What happens when:

- create / resume / update: the children exist (created under fixed names if absent, never
  replaced); an invalid spec is reported instead;
- a live parameter (``spec.buildWindow``, ``startupDelay``, ``barrierTimeout``,
  ``sourceTimeout``, ``latePolicy``: :data:`orderer.config.LIVE_PARAMETERS`) changes:
  ``Configure`` on the live orderer, no child touched;
- ``spec.orderer`` changes (image, resources, service settings): the StatefulSet's pod template
  is patched, which rolls the pod (the orderer recovers its run from its logs);
- ``spec.spark`` changes: the SparkApplication's spec is patched; the live page's Service
  (``spec.spark.ui``) follows: created by ``reconcile`` when the port is set, its port patched
  when it changes, deleted when it goes;
- ``spec.state`` becomes ``Ended``: ``EndRun``; the Spark job reads to the end and finishes;
  the release of a run over several orderers is scaled to 0;
- ``spec.run`` raised: ``EndRun`` (unless the run ended), then ``BeginRun`` with the new
  number; lowered: refused;
- ``spec.upstreams`` changes: the forwarders' Deployment is patched (rolls them), created by
  ``reconcile`` for the first upstream, deleted with the last;
- every ``EVB_STATS_INTERVAL`` seconds: status from ``GetStats``, the orderer's StatefulSet and
  the SparkApplication (the ``Ready`` condition sums them up), and Events for each incomplete
  or heterogeneous barrier in the orderer's barrier log (a few per period, then a summary),
  bursts of late data, an unreachable orderer, Spark's end;
- delete: the SparkApplication first (it stops reading) and its live page's Service, then the
  orderer's children (the garbage collector would too, through the owner references, in no
  particular order).

A run over several orderers (``spec.orderers`` > 1) gets its children from the same builders
(the headless Service and the release's Deployment among them), and every call above goes to
every orderer, each at its own address under the headless Service
(:mod:`~evb_operator.handlers.control`): the status sums their answers and has an entry per
orderer (:mod:`evb_operator.status.orderers`), ``Ready`` only when every orderer answers; a live
edit, ``EndRun`` and ``BeginRun`` reach every orderer, and when one fails the handler is retried
(``kopf.TemporaryError``) without doing again what the others did; ``observedGeneration`` moves
on a live edit only once every orderer applied it.

The handlers themselves are this package's names too (``handlers.reconcile``).
"""

from evb_operator.handlers import registrations  # noqa: F401  (registers every handler)
from evb_operator.handlers.activities import (
    api_reachable,
    close_sessions,
    configure_operator,
    login,
)
from evb_operator.handlers.children import (
    delete_children,
    reconcile,
    roll_orderer,
    update_network_policy,
    update_spark,
    update_upstreams,
)
from evb_operator.handlers.runs import begin_run, configure_live, end_run
from evb_operator.handlers.timer import refresh_status

__all__ = [
    "api_reachable",
    "begin_run",
    "close_sessions",
    "configure_live",
    "configure_operator",
    "delete_children",
    "end_run",
    "login",
    "reconcile",
    "refresh_status",
    "roll_orderer",
    "update_network_policy",
    "update_spark",
    "update_upstreams",
]
