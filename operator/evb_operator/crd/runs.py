"""The fields of the ``EventBuilder`` spec for runs one after another and hierarchical building:
``resetOnBeginRun``, ``run`` and ``upstreams``, with their CEL rules.

- ``resetOnBeginRun`` is an orderer parameter (``OrdererConfig.reset_on_begin_run``, its property
  generated with the others by :mod:`evb_operator.crd.parameters`; its rule is here) that is not
  live: it is refused once set, like ``sources`` and ``flowControl``, rather than rolling the
  pod. The orderer replays its arrival log from the configuration it started with (the ConfigMap,
  written once), so a restarted orderer with another reset rule would order the replayed
  begin-run barriers differently from the ordered log it already wrote.
- ``run`` is the number of the current run. The orderer starts with it (``run`` in the
  ``evb serve --config`` file, the same as ``evb serve --run N``); raising it on a live
  EventBuilder ends the current run and begins that one (``BeginRun``); lowering it is refused
  (run numbers increase from run to run: the orderer refuses it too), and so is raising it once
  ``state`` is ``Ended`` (an ended EventBuilder begins no more runs).
- ``upstreams``: orderers whose ordered output this one takes in as sources (``evb forward``).
  A target is ``host:port``, checked here with a message that says so (a ``pattern`` would
  answer with the regular expression).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evb_operator.crd.schema import Rule, _integer, _object, _string
from evb_operator.crd.texts import described

__all__ = [
    "MAX_UPSTREAMS",
    "RUN_RULES",
    "TARGET_PATTERN",
    "run_properties",
    "target_problem",
]

MAX_UPSTREAMS = 64
"""Most upstreams of one EventBuilder (a bound the API server needs to cost the CEL rule)."""
MAX_TARGET_LENGTH = 260
"""A DNS name (253) and a port."""
TARGET_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$"
"""``host:port``: a DNS name or an IPv4 address, or an IPv6 address in brackets, then a port
(its range is checked in Python, :func:`target_problem`)."""
_TARGET = re.compile(TARGET_PATTERN)
_TARGET_MESSAGE = (
    "each upstreams[].target must be host:port (a DNS name or an IP address, IPv6 in brackets,"
    " and a port), e.g. daq-top-orderer.daq.svc:50051"
)


def target_problem(target: Any) -> str | None:
    """Why ``target`` is no ``host:port`` an upstream can be reached at, or None."""
    if not isinstance(target, str) or not _TARGET.match(target):
        return (
            f"{target!r} is not host:port (a DNS name or an IP address, IPv6 in brackets,"
            " and a port), e.g. daq-top-orderer.daq.svc:50051"
        )
    port = int(target.rsplit(":", 1)[1])
    if not 1 <= port <= 65535:
        return f"{target!r}: port {port} is not from 1 to 65535"
    return None


def run_properties() -> dict[str, Any]:
    """The spec's properties ``run`` and ``upstreams``, their descriptions their fields' texts
    (:mod:`evb_operator.crd.texts`); an upstream (a list's item, no field) is described here."""
    upstream = _object(
        "An orderer whose ordered output this EventBuilder takes in, forwarded by evb forward"
        " in a Deployment of its own (NAME-forward). It must accept this EventBuilder's"
        " credentials: the CA of spec.tls verifies its certificate, and it accepts the client"
        " certificate and the token of spec.tls and spec.auth.",
        {
            "target": _string(
                described("upstreams.target"), minLength=1, maxLength=MAX_TARGET_LENGTH
            ),
            "asSource": _integer(described("upstreams.asSource"), minimum=0, maximum=2**32 - 1),
            "consumer": _string(
                described("upstreams.consumer"),
                minLength=1,
                maxLength=253,
                pattern=r"^([^-].*|-|-[^-].*|--.+)$",
            ),
        },
        required=["target"],
    )
    return {
        "run": _integer(described("run"), minimum=1, maximum=2**63 - 1, default=1),
        "upstreams": {
            "type": "array",
            "description": described("upstreams"),
            "items": upstream,
            "maxItems": MAX_UPSTREAMS,
        },
    }


def _distinct_upstreams(spec: Mapping[str, Any]) -> bool:
    seen = [(u.get("target"), u.get("consumer")) for u in spec.get("upstreams", [])]
    return len(set(seen)) == len(seen)


RUN_RULES: tuple[Rule, ...] = (
    Rule(
        path=("resetOnBeginRun",),
        cel="self == oldSelf",
        message="resetOnBeginRun cannot change during a run (the orderer replays its log with"
        " the rule it started with); create a new EventBuilder",
    ),
    Rule(
        path=("run",),
        cel="self >= oldSelf",
        message="run cannot be lowered: run numbers increase from run to run",
        message_expression="'run cannot be lowered from ' + string(oldSelf) + ' to '"
        " + string(self) + ': run numbers increase from run to run'",
    ),
    Rule(
        path=(),
        cel="!has(oldSelf.state) || oldSelf.state != 'Ended' || !has(self.run)"
        " || (has(oldSelf.run) && self.run == oldSelf.run)",
        message="an ended EventBuilder begins no more runs (state is Ended): create a new"
        " EventBuilder",
        field_path=".run",
    ),
    Rule(
        path=(),
        cel="!has(self.upstreams) || self.upstreams.all(u, u.target.matches('"
        + TARGET_PATTERN.replace("\\", "\\\\")
        + "'))",
        message=_TARGET_MESSAGE,
        check=lambda spec: all(
            _TARGET.match(str(u.get("target", ""))) for u in spec.get("upstreams", [])
        ),
        field_path=".upstreams",
    ),
    Rule(
        path=(),
        cel="!has(self.upstreams) || self.upstreams.all(u, self.upstreams.exists_one(v,"
        " v.target == u.target && has(v.consumer) == has(u.consumer)"
        " && (!has(v.consumer) || v.consumer == u.consumer)))",
        message="two upstreams with the same target and consumer would forward the same"
        " output twice: give one a consumer of its own",
        check=_distinct_upstreams,
        field_path=".upstreams",
    ),
)
"""The rules of these fields (``crd.RULES`` holds them with the others)."""
