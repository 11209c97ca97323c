"""The ``EventBuilder`` CustomResourceDefinition as Python data: the one source of truth.

``charts/evb-operator/crds/eventbuilders.evb.io.yaml`` is generated from :func:`build_crd`
(``python tools/generate_manifests.py``; a test fails when the file is stale), and the operator
reads the same :data:`SPEC_SCHEMA` at run time to complete a spec with its defaults and check it
(:mod:`evb_operator.validation`), so a spec the operator accepts is one the API server accepts.

Every CEL rule (``x-kubernetes-validations``) is declared as a :class:`Rule` together with its
Python twin, evaluated by the operator on the defaulted spec: the API server enforces the CEL,
the operator enforces the twin where no API server did (and tests hold the two to the same cases).
Transition rules (those that read ``oldSelf``) have no twin: only the API server sees the old
object.

The orderer's parameters are generated from the fields of :class:`orderer.config.OrdererConfig`
(:mod:`evb_operator.crd.parameters`): their defaults, bounds and descriptions are written there
once. The status schema and the printer columns come from :mod:`evb_operator.crd.status`; the
fields of runs and upstreams from :mod:`evb_operator.crd.runs`; those of one run over several
orderers (``orderers``, ``sliceTicks``) from :mod:`evb_operator.crd.slicing`; the Spark job's
section from :mod:`evb_operator.crd.spark` (its live page from :mod:`evb_operator.crd.live`);
the property builders and :class:`Rule` from :mod:`evb_operator.crd.schema`. Every field's
description is its text, written once beside the field (:mod:`evb_operator.crd.texts` says
where); what no field holds (the spec itself, the insides of the Kubernetes objects it passes on)
is described where it is built.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from evb_operator.crd.live import LIVE_RULES
from evb_operator.crd.output import OUTPUT_RULES
from evb_operator.crd.parameters import orderer_properties
from evb_operator.crd.runs import RUN_RULES, run_properties
from evb_operator.crd.schema import (
    MAX_SECONDS,
    Rule,
    _image,
    _integer,
    _number,
    _object,
    _quantity,
    _resources,
    _string,
)
from evb_operator.crd.slicing import SLICING_RULES, slicing_properties
from evb_operator.crd.spark import spark_schema
from evb_operator.crd.status import PRINTER_COLUMNS, STATUS_SCHEMA
from evb_operator.crd.texts import described
from evb_operator.phases import REQUESTED_STATES, RunPhase

__all__ = [
    "BUILDING_FIELDS",
    "BUILDING_PRESENCE",
    "GROUP",
    "KIND",
    "PLURAL",
    "RULES",
    "SHORT_NAME",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "VERSION",
    "Rule",
    "build_crd",
]

GROUP = "evb.io"
VERSION = "v1alpha1"
KIND = "EventBuilder"
PLURAL = "eventbuilders"
SINGULAR = "eventbuilder"
SHORT_NAME = "evb"



# ----------------------------------------------------------------------------- CEL rules


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def _compare(path: tuple[str, ...], field: str, op: str, other: str, message: str) -> Rule:
    """``field op other`` when both are set, reported under ``field``."""
    return Rule(
        path=path,
        cel=f"!has(self.{field}) || !has(self.{other}) || self.{field} {op} self.{other}",
        message=message,
        check=lambda obj: (
            field not in obj or other not in obj or _COMPARE[op](obj[field], obj[other])
        ),
        field_path=f".{field}",
    )


BUILDING_FIELDS = (
    "dt", "noBuild", "maxFragments", "timestampPolicy", "output.format", "glomSourceId",
    "followRuns", "stages",
)
"""How the Spark job builds a run's events, under ``spec.spark``: the job records them at the
run's start and refuses to resume its checkpoint with others (``orderer/spark/driver/job.py``,
``BUILDING_FLAGS``; a test holds the two together)."""


BUILDING_PRESENCE = ("ui",)
"""Under ``spec.spark``, fields that are part of how a run is built by being set at all, whatever
their value: with a live page (``ui``) the job keeps the page's running totals in the run's
checkpoint from its start, records so (``liveTotals``, ``orderer/spark/driver/resume.py``) and
refuses to resume without the page, or with it where the run began without; the page's port may
change."""


def _get(obj: Mapping[str, Any], dotted: str) -> Any:
    for name in dotted.split("."):
        obj = obj.get(name, {}) if isinstance(obj, Mapping) else {}
    return obj if obj != {} else None


def _building_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if _get(old, "output.path") != _get(new, "output.path"):
        return None  # a new place: a new checkpoint, the whole run built again there
    changed = [f for f in BUILDING_FIELDS if _get(old, f) != _get(new, f)]
    changed += [f for f in BUILDING_PRESENCE if (_get(old, f) is None) != (_get(new, f) is None)]
    return f".{changed[0]}" if changed else None


def _same(field: str) -> str:
    """CEL: ``self.<field>`` equals ``oldSelf.<field>``, set or unset alike."""
    *parents, leaf = field.split(".")
    here, before = ".".join(["self", *parents]), ".".join(["oldSelf", *parents])
    return (
        f"(has({here}.{leaf}) == has({before}.{leaf})"
        f" && (!has({here}.{leaf}) || {here}.{leaf} == {before}.{leaf}))"
    )


def _building_rule() -> Rule:
    """A SparkApplication rolled with another building would resume its checkpoint and be
    refused by the job (exit status 2, then Spark's retries, then FAILED): the API server
    refuses the change instead, and says what to do."""
    return Rule(
        path=("spark",),
        cel="self.output.path != oldSelf.output.path || ("
        + " && ".join(
            [_same(f) for f in BUILDING_FIELDS]
            + [f"has(self.{f}) == has(oldSelf.{f})" for f in BUILDING_PRESENCE]
        )
        + ")",
        message="the event building (" + ", ".join(BUILDING_FIELDS) + ") cannot change while"
        " output.path stays, nor can " + ", ".join(BUILDING_PRESENCE) + " be set or unset (the"
        " live page's running totals are kept in the checkpoint from the run's start; its port"
        " may change): the Spark job resumes the run from its checkpoint there, and a run is"
        " built one way; change output.path too (the whole run is built again there) or create"
        " a new EventBuilder",
        changed=_building_changed,
    )


def _immutable(field: str, message: str) -> Rule:
    """``spec.<field>`` keeps the value it was created with (a transition rule: no twin)."""
    return Rule(path=(field,), cel="self == oldSelf", message=message)


RULES: tuple[Rule, ...] = (
    _compare(
        (),
        "barrierTimeout",
        ">=",
        "buildWindow",
        "barrierTimeout must be >= buildWindow (a barrier waits at least one window)",
    ),
    _compare(("flowControl",), "globalXon", "<=", "globalXoff", "globalXon must be <= globalXoff"),
    _compare(("flowControl",), "queueXon", "<=", "queueXoff", "queueXon must be <= queueXoff"),
    Rule(
        path=(),
        cel="!has(self.auth) || has(self.tls)",
        message="auth needs tls: a bearer token must not travel in clear",
        check=lambda spec: "auth" not in spec or "tls" in spec,
        field_path=".auth",
    ),
    Rule(
        path=("tls",),
        cel="!self.mutual || has(self.clientSecretName)",
        message="mutual TLS needs clientSecretName: the operator and the Spark job must present"
        " a client certificate",
        check=lambda tls: not tls.get("mutual") or "clientSecretName" in tls,
        field_path=".clientSecretName",
    ),
    _immutable(
        "flowControl",
        "flowControl cannot change during a run (the orderer replays its log with it)",
    ),
    _immutable("sources", "sources cannot change during a run; create a new EventBuilder"),
    Rule(
        path=("state",),
        cel=f"oldSelf != '{RunPhase.ENDED}' || self == '{RunPhase.ENDED}'",
        message="an ended run cannot be resumed; create a new EventBuilder",
    ),
    _immutable("storage", "storage cannot change (a StatefulSet's volume claims are immutable)"),
    Rule(
        path=("spark",),
        cel="has(self.dt) || self.noBuild",
        message="dt is required unless noBuild (one event per fragment)",
        check=lambda spark: "dt" in spark or bool(spark.get("noBuild")),
        field_path=".dt",
    ),
    Rule(
        path=("spark",),
        cel="!has(self.dt) || !self.noBuild",
        message="dt has no meaning with noBuild (one event per fragment): unset one of them",
        check=lambda spark: "dt" not in spark or not spark.get("noBuild"),
        field_path=".noBuild",
    ),
    _building_rule(),
    *RUN_RULES,
    *SLICING_RULES,
    *OUTPUT_RULES,
    *LIVE_RULES,
)


# ----------------------------------------------------------------------------- the schema


def _label_selector(description: str) -> dict[str, Any]:
    """A Kubernetes LabelSelector; its parts are described here (Kubernetes' object, passed on
    verbatim: no field of the typed spec holds them)."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "matchLabels": {
                "type": "object",
                "description": "Labels the objects must have.",
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "type": "array",
                "description": "Label requirements (all must hold).",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": _string("Label key.", minLength=1),
                        "operator": _string(
                            "How the label relates to values.",
                            enum=["In", "NotIn", "Exists", "DoesNotExist"],
                        ),
                        "values": {
                            "type": "array",
                            "description": "Label values (In, NotIn).",
                            "items": {"type": "string"},
                        },
                    },
                },
            },
        },
    }


def _peer_schema() -> dict[str, Any]:
    """A NetworkPolicyPeer without ipBlock (clients are pods): at least one selector."""
    return {
        "type": "object",
        "description": "A podSelector, a namespaceSelector, or both.",
        "minProperties": 1,
        "properties": {
            "podSelector": _label_selector("Pods (of this namespace, or of the selected ones)."),
            "namespaceSelector": _label_selector("Namespaces."),
        },
    }


def _orderer_pod() -> dict[str, Any]:
    """``spec.orderer``: the orderer's pod."""
    return _object(
        described("orderer"),
        {
            **_image("orderer"),
            "resources": _resources(
                described("orderer.resources"),
                default={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            ),
            "fsync": _string(
                described("orderer.fsync"), enum=["always", "batch", "never"], default="batch"
            ),
            "maxPayloadBytes": _integer(
                described("orderer.maxPayloadBytes"),
                minimum=1,
                maximum=4_194_188,  # orderer.wire.limits.MAX_PAYLOAD_BYTES (a test checks)
                default=1 << 20,
            ),
            "strictSources": {
                "type": "boolean",
                "description": described("orderer.strictSources"),
                "default": False,
            },
            "retentionBytes": _integer(described("orderer.retentionBytes"), minimum=1),
            "retentionSeconds": _number(
                described("orderer.retentionSeconds"),
                minimum=0,
                exclusive=True,
                maximum=365 * MAX_SECONDS,
            ),
        },
        default={},
    )


def _storage() -> dict[str, Any]:
    """``spec.storage``: the volume of the logs."""
    return _object(
        described("storage"),
        {
            "size": _quantity(described("storage.size"), default="10Gi"),
            "storageClassName": _string(described("storage.storageClassName"), minLength=1),
            "retainOnDelete": {
                "type": "boolean",
                "description": described("storage.retainOnDelete"),
                "default": False,
            },
        },
        default={},
    )


def _tls() -> dict[str, Any]:
    """``spec.tls``."""
    return _object(
        described("tls"),
        {
            "secretName": _string(described("tls.secretName"), minLength=1),
            "mutual": {
                "type": "boolean",
                "description": described("tls.mutual"),
                "default": False,
            },
            "clientSecretName": _string(described("tls.clientSecretName"), minLength=1),
        },
        required=["secretName"],
    )


def _auth() -> dict[str, Any]:
    """``spec.auth``."""
    return _object(
        described("auth"),
        {
            "tokenSecretRef": _object(
                described("auth.tokenSecretRef"),
                {
                    "name": _string(described("auth.tokenSecretRef.name"), minLength=1),
                    "key": _string(
                        described("auth.tokenSecretRef.key"), minLength=1, default="token"
                    ),
                },
                required=["name"],
            ),
        },
        required=["tokenSecretRef"],
    )


def _network_policy() -> dict[str, Any]:
    """``spec.networkPolicy``; its peers are Kubernetes' NetworkPolicyPeers, described by
    :func:`_peer_schema`."""
    return _object(
        described("networkPolicy"),
        {
            "enabled": {
                "type": "boolean",
                "description": described("networkPolicy.enabled"),
                "default": False,
            },
            "allowedClients": {
                "type": "array",
                "description": described("networkPolicy.allowedClients"),
                "items": _peer_schema(),
            },
            "metricsFrom": {
                "type": "array",
                "description": described("networkPolicy.metricsFrom"),
                "items": _peer_schema(),
            },
        },
        default={},
    )


def _alerts() -> dict[str, Any]:
    """``spec.alerts``."""
    return _object(
        described("alerts"),
        {
            "lateBurst": _integer(described("alerts.lateBurst"), minimum=1, default=1000),
        },
        default={},
    )


def _spec_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {
        "state": _string(
            described("state"),
            enum=[state.value for state in REQUESTED_STATES],
            default=RunPhase.RUNNING.value,
        ),
        **orderer_properties(),
        **run_properties(),
        **slicing_properties(),
        "storage": _storage(),
        "orderer": _orderer_pod(),
        "tls": _tls(),
        "auth": _auth(),
        "networkPolicy": _network_policy(),
        "alerts": _alerts(),
        "spark": spark_schema(),
    }
    schema = _object(
        "An event builder: one orderer merging the data sources by timestamp, and the Spark job"
        " building events from its output.",
        properties,
        default={},
    )
    _attach_rules(schema)
    return schema


def _attach_rules(spec_schema: dict[str, Any]) -> None:
    for rule in RULES:
        node = spec_schema
        for name in rule.path:
            node = node["properties"][name]
        node.setdefault("x-kubernetes-validations", []).append(rule.entry())


SPEC_SCHEMA: dict[str, Any] = _spec_schema()


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition manifest."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "evb"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["evb"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "EventBuilder: a Kubernetes-native event builder.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": copy.deepcopy(SPEC_SCHEMA),
                                "status": copy.deepcopy(STATUS_SCHEMA),
                            },
                        }
                    },
                }
            ],
        },
    }
