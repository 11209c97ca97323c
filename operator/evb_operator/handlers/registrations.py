"""Every kopf handler of the operator, registered here, in one place, in the order kopf runs them.

Why one place: kopf runs the handlers an event calls for in the order they were registered, and
that order is part of what they do: ``reconcile`` comes first, so that a live edit's
``configure_live`` can put ``observedGeneration`` back where it was when one orderer failed (it
moved in ``reconcile``), and the field handlers follow in the order they always had (one edit
that changes several sections is handled section by section, in this order). Spread as
decorators over the modules of their concerns, the order would be that in which the modules
happen to be imported. Each handler's id (its function's name, and the field) is what kopf keeps
its progress under, in the EventBuilder's annotations: the names stay.

Every handler an event calls for runs in **one** handling cycle, on that event's body (kopf's
``all_at_once`` lifecycle; its default runs one handler per cycle, each on the body of its own
cycle). One cycle per handler let a change that came in between be folded into the event being
handled: ``reconcile`` created the children from the spec as it was, the field handlers that
follow were then handed the changed spec as a creation (which is theirs to skip), and kopf
recorded the changed spec as handled, so the change reached no child. In one cycle, a change
that comes in meanwhile is the next event, handled as a change.

Imported by :mod:`evb_operator.handlers`, so that ``kopf run -m evb_operator.handlers``
registers them all.
"""

from __future__ import annotations

import logging

import kopf

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
from evb_operator.handlers.common import RESOURCE
from evb_operator.handlers.runs import begin_run, configure_live, end_run
from evb_operator.handlers.timer import STATS_INTERVAL, refresh_status
from orderer.config import LIVE_PARAMETERS, camel_case

__all__: list[str] = []

# kopf warns whenever the default is replaced (it always has one): said once, here, instead
_lifecycles_log = logging.getLogger(kopf.lifecycles.__name__)
_level = _lifecycles_log.level
_lifecycles_log.setLevel(logging.ERROR)
try:
    kopf.set_default_lifecycle(kopf.lifecycles.all_at_once)
finally:
    _lifecycles_log.setLevel(_level)

# ----------------------------------------------------------------------------- activities

kopf.on.startup()(configure_operator)
kopf.on.login()(login)
kopf.on.probe(id="kubernetesApi")(api_reachable)
kopf.on.cleanup()(close_sessions)

# ----------------------------------------------------------------------------- lifecycle

kopf.on.update(*RESOURCE)(reconcile)
kopf.on.create(*RESOURCE)(reconcile)
kopf.on.resume(*RESOURCE)(reconcile)

for _name in LIVE_PARAMETERS:  # one handler per live parameter, each on its own spec field
    kopf.on.field(*RESOURCE, field=f"spec.{camel_case(_name)}", param=camel_case(_name))(
        configure_live
    )

kopf.on.field(*RESOURCE, field="spec.auth")(roll_orderer)
kopf.on.field(*RESOURCE, field="spec.tls")(roll_orderer)
kopf.on.field(*RESOURCE, field="spec.orderer")(roll_orderer)
kopf.on.field(*RESOURCE, field="spec.upstreams")(update_upstreams)
kopf.on.field(*RESOURCE, field="spec.run")(begin_run)
kopf.on.field(*RESOURCE, field="spec.spark")(update_spark)
kopf.on.field(*RESOURCE, field="spec.networkPolicy")(update_network_policy)
kopf.on.field(*RESOURCE, field="spec.state")(end_run)

# ----------------------------------------------------------------------------- the status timer

kopf.timer(*RESOURCE, interval=STATS_INTERVAL, initial_delay=min(STATS_INTERVAL, 2.0))(
    refresh_status
)

# ----------------------------------------------------------------------------- deletion

kopf.on.delete(*RESOURCE, retries=5, backoff=5)(delete_children)
