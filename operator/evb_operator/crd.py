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

The orderer's parameters are named as :meth:`orderer.config.OrdererConfig.to_mapping` spells them
with ``camel=True``; ``tests/operator/test_crd.py`` checks the schema against the dataclass fields.
The status schema and the printer columns come from :mod:`evb_operator.crd_status`; the fields
of runs and upstreams from :mod:`evb_operator.crd_runs`; the property builders and :class:`Rule`
from :mod:`evb_operator.crd_schema`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from evb_operator.crd_output import OUTPUT_RULES, output_schema
from evb_operator.crd_runs import RUN_RULES, run_properties
from evb_operator.crd_schema import (
    MAX_SECONDS,
    Rule,
    _image,
    _integer,
    _number,
    _object,
    _quantity,
    _resources,
    _spark_pod,
    _string,
)
from evb_operator.crd_status import PRINTER_COLUMNS, STATUS_SCHEMA
from evb_operator.phases import REQUESTED_STATES, RunPhase

__all__ = [
    "BUILDING_FIELDS",
    "GROUP",
    "KIND",
    "LIVE_FIELDS",
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

LIVE_FIELDS = ("buildWindow", "startupDelay", "barrierTimeout", "sourceTimeout", "latePolicy")
"""Spec fields the operator pushes to a running orderer through ``Configure`` (no restart)."""

MAX_PARTITIONS = 65536
"""Upper bound of spec.spark.partitions, above the largest default (1000 executors x 64 cores)."""
MAX_FRAGMENTS_PER_TRIGGER = 10**12
"""Upper bound of spec.spark.maxFragmentsPerTrigger: more in one micro-batch is a typo."""
MAX_TICK_RATE = 1e15
"""Upper bound of spec.spark.tickRate (femtosecond ticks): more is a typo."""


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
    "followRuns",
)
"""How the Spark job builds a run's events, under ``spec.spark``: the job records them at the
run's start and refuses to resume its checkpoint with others (``orderer/spark/job.py``,
``BUILDING_FLAGS``; a test holds the two together)."""


def _get(obj: Mapping[str, Any], dotted: str) -> Any:
    for name in dotted.split("."):
        obj = obj.get(name, {}) if isinstance(obj, Mapping) else {}
    return obj if obj != {} else None


def _building_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if _get(old, "output.path") != _get(new, "output.path"):
        return None  # a new place: a new checkpoint, the whole run built again there
    return next((f".{f}" for f in BUILDING_FIELDS if _get(old, f) != _get(new, f)), None)


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
        + " && ".join(_same(f) for f in BUILDING_FIELDS)
        + ")",
        message="the event building (" + ", ".join(BUILDING_FIELDS) + ") cannot change while"
        " output.path stays: the Spark job resumes the run from its checkpoint there, and a run"
        " is built one way; change output.path too (the whole run is built again there) or"
        " create a new EventBuilder",
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
    *OUTPUT_RULES,
)


# ----------------------------------------------------------------------------- the schema


def _label_selector(description: str) -> dict[str, Any]:
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


def _spec_schema() -> dict[str, Any]:
    flow_control = _object(
        "Bounded memory: when sources are paused (XOFF) and resumed (XON), in queued fragments."
        " Defaults are NSCLDAQ's.",
        {
            "globalXoff": _integer(
                "Pause sources above this many fragments queued in all.",
                minimum=1,
                default=4_000_000,
            ),
            "globalXon": _integer(
                "... and resume them below this many.", minimum=1, default=3_000_000
            ),
            "queueXoff": _integer(
                "Pause a source whose own queue holds more than this many fragments.",
                minimum=1,
                default=400_000,
            ),
            "queueXon": _integer("... and resume it below this many.", minimum=1, default=50_000),
        },
        default={},
    )
    orderer = _object(
        "The orderer's pod: image, resources and service settings. A change rolls the pod (the"
        " orderer recovers its run from its logs).",
        {
            **_image("Orderer image; default: the operator's own image (one image holds both)."),
            "resources": _resources(
                "Orderer container resources.",
                default={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            ),
            "fsync": _string(
                "When the logs are forced to disk: always, batch (group commit before acks),"
                " never.",
                enum=["always", "batch", "never"],
                default="batch",
            ),
            "maxPayloadBytes": _integer(
                "Largest payload of one fragment; larger ones are refused. At most 4 MiB less"
                " a reply's framing, so that a reader with gRPC's default 4 MiB message limit"
                " can read any fragment.",
                minimum=1,
                maximum=4_194_188,  # orderer.wire.convert.MAX_PAYLOAD_BYTES (a test checks)
                default=1 << 20,
            ),
            "strictSources": {
                "type": "boolean",
                "description": "Refuse data from sources not listed in spec.sources.",
                "default": False,
            },
            "retentionBytes": _integer(
                "Ordered-log retention by size, in bytes; unset keeps everything.", minimum=1
            ),
            "retentionSeconds": _number(
                "Ordered-log retention by age, in seconds; unset keeps everything.",
                minimum=0,
                exclusive=True,
                maximum=365 * MAX_SECONDS,
            ),
        },
        default={},
    )
    storage = _object(
        "The volume of the orderer's arrival and ordered logs (immutable).",
        {
            "size": _quantity("Size of the volume claim.", default="10Gi"),
            "storageClassName": _string(
                "Storage class of the claim; unset: the cluster's default.", minLength=1
            ),
            "retainOnDelete": {
                "type": "boolean",
                "description": "Keep the volume claim (and the logs) when the EventBuilder is"
                " deleted.",
                "default": False,
            },
        },
        default={},
    )
    spark = _object(
        "The Spark job that reads the ordered output from the orderer's Service and builds"
        " events. Unset: no SparkApplication (the orderer runs alone).",
        {
            **_image("Spark job image (evb installed on a Spark base); default: the operator's."),
            "sparkVersion": _string("Spark version of the image.", minLength=1, default="4.3.0"),
            "serviceAccount": _string(
                "Service account of the driver (it creates the executor pods).",
                minLength=1,
                default="spark",
            ),
            "dt": _integer(
                "Glom window in timestamp ticks: fragments within dt of an event's first one"
                " are built into it. Required unless noBuild. Building.",
                minimum=1,
            ),
            "noBuild": {
                "type": "boolean",
                "description": "One event per fragment (no glom); dt must then be unset. Building.",
                "default": False,
            },
            "maxFragments": _integer(
                "glom's --maxfragments: an event holds at most maxFragments + 1 fragments"
                " (glom checks the count before it adds a fragment), a longer one is cut"
                " there; 0: one fragment per event. Building.",
                minimum=0,
                maximum=2**31 - 1,
                default=1000,  # orderer.spark.glom.GlomConfig's (a test checks)
            ),
            "timestampPolicy": _string(
                "Timestamp of a built event: its earliest, latest or average fragment's. Building.",
                enum=["earliest", "latest", "average"],
                default="earliest",
            ),
            "followRuns": {
                "type": "boolean",
                "description": "Build every run of the orderer (spec.run raised: the next run),"
                " each under its run number (events/run=<number>/), the job running until"
                " the EventBuilder goes; false: one run, under the EventBuilder's name, the job"
                " finishing when it ends. Building.",
                "default": False,
            },
            "glomSourceId": _integer(
                "Source id in the body header of every built event with output.format"
                " nscldaq, as glom's --sourceid. Building.",
                minimum=0,
                maximum=2**32 - 1,
                default=0,
            ),
            "partitions": _integer(
                "Partitions of a micro-batch: how many executor cores build events at once;"
                " unset: executors.instances x executors.cores (one partition per core).",
                minimum=1,
                maximum=MAX_PARTITIONS,
            ),
            "maxFragmentsPerTrigger": _integer(
                "Cap on a micro-batch, in fragments (an event longer than the cap still goes"
                " whole); unset: everything available.",
                minimum=1,
                maximum=MAX_FRAGMENTS_PER_TRIGGER,
            ),
            "triggerInterval": _number(
                "Seconds between the starts of two micro-batches; 0: the next one starts as"
                " soon as the last is done (Spark's default).",
                minimum=0,
                default=0.0,
            ),
            "tickRate": _number(
                "Timestamp ticks per second: the run summary's and the report's times and rates.",
                minimum=0,
                exclusive=True,
                maximum=MAX_TICK_RATE,
                default=1e8,
            ),
            "driver": _object(
                "Spark driver size.",
                _spark_pod("Driver cores.", "Driver memory (Spark notation: 512m, 2g).", "1g"),
                default={},
            ),
            "executors": _object(
                "Spark executors.",
                {
                    "instances": _integer(
                        "Number of executors.", minimum=1, maximum=1000, default=2
                    ),
                    **_spark_pod(
                        "Cores per executor.",
                        "Memory per executor (Spark notation: 512m, 2g).",
                        "2g",
                    ),
                },
                default={},
            ),
            "output": output_schema(),
            "objectStorage": _object(
                "S3-compatible object storage for an s3a:// output.path (the Spark image carries"
                " hadoop-aws). Credentials come from a Secret, as environment variables of the"
                " driver and the executors: never in sparkConf or a ConfigMap.",
                {
                    "credentialsSecret": _string(
                        "Secret holding the access key id and the secret access key (and a"
                        " session token, if temporary); unset: s3a's default credential chain"
                        " (e.g. a pod identity).",
                        minLength=1,
                    ),
                    "accessKeyIdKey": _string(
                        "Key of the access key id in the Secret.",
                        minLength=1,
                        default="AWS_ACCESS_KEY_ID",
                    ),
                    "secretAccessKeyKey": _string(
                        "Key of the secret access key in the Secret.",
                        minLength=1,
                        default="AWS_SECRET_ACCESS_KEY",
                    ),
                    "sessionTokenKey": _string(
                        "Key of a session token in the Secret; unset: none.", minLength=1
                    ),
                    "endpoint": _string(
                        "Endpoint URL (MinIO, Ceph: http://minio.storage.svc:9000); unset: AWS S3.",
                        pattern=r"^https?://[^\s/]+(/.*)?$",
                    ),
                    "region": _string("Region of the bucket; unset: s3a's default.", minLength=1),
                    "pathStyleAccess": {
                        "type": "boolean",
                        "description": "Path-style requests (endpoint/bucket/key), as MinIO"
                        " and most S3-compatible stores need.",
                        "default": False,
                    },
                },
            ),
            "sparkConf": {
                "type": "object",
                "description": "Spark configuration passed through as is (spark.* keys); it"
                " wins over what objectStorage sets. No credentials: they belong in"
                " objectStorage.credentialsSecret.",
                "additionalProperties": {"type": "string"},
            },
        },
        required=["output"],
    )
    properties: dict[str, Any] = {
        "state": _string(
            f"{RunPhase.RUNNING}, or {RunPhase.ENDED}: the orderer ends the run (drains every"
            " queue, EndRun) and the Spark job finishes reading. An ended run cannot be resumed.",
            enum=[state.value for state in REQUESTED_STATES],
            default=RunPhase.RUNNING.value,
        ),
        "sources": {
            "type": "array",
            "description": "Source ids declared from the start; a declared source that never"
            " sends holds the output back (immutable).",
            "items": _integer("A source id.", minimum=0, maximum=2**32 - 1),
            "maxItems": 65536,
            "x-kubernetes-list-type": "set",
        },
        "buildWindow": _number(
            "Seconds a fragment may wait for the other sources (window rule). Live.",
            minimum=0,
            exclusive=True,
            default=20.0,
        ),
        "startupDelay": _number(
            "Seconds after the first fragment before anything is emitted. Live.",
            minimum=0,
            default=2.0,
        ),
        "barrierTimeout": _number(
            "Seconds a barrier waits for the other sources; unset: 4 x buildWindow. Live.",
            minimum=0,
            exclusive=True,
        ),
        "sourceTimeout": _number(
            "Seconds of silence after which a source is dead; 0 disables dead-source"
            " detection (the spec's off). Live.",
            minimum=0,
            default=60.0,
        ),
        "latePolicy": _string(
            "emit: late fragments go out flagged late; drop: counted, not emitted. Live.",
            enum=["emit", "drop"],
            default="emit",
        ),
        **run_properties(),
        "flowControl": flow_control,
        "storage": storage,
        "orderer": orderer,
        "tls": _object(
            "TLS of the orderer's gRPC endpoint: evb serve speaks TLS only (plaintext clients"
            " fail the handshake). The Secret is mounted read-only at /etc/evb/tls; its"
            " certificate must name the Service (NAME-orderer.NAMESPACE.svc). A change rolls"
            " the pod.",
            {
                "secretName": _string(
                    "A kubernetes.io/tls Secret: tls.crt and tls.key of the orderer, and ca.crt,"
                    " the CA clients verify it with (and, with mutual, the CA of the client"
                    " certificates). cert-manager's Certificates hold all three.",
                    minLength=1,
                ),
                "mutual": {
                    "type": "boolean",
                    "description": "Mutual TLS: every client must present a certificate signed"
                    " by ca.crt.",
                    "default": False,
                },
                "clientSecretName": _string(
                    "A kubernetes.io/tls Secret with the client certificate (tls.crt, tls.key)"
                    " the operator and the Spark job present under mutual TLS.",
                    minLength=1,
                ),
            },
            required=["secretName"],
        ),
        "auth": _object(
            "Bearer-token authentication (needs tls): every call but health checking must"
            " carry the token, else UNAUTHENTICATED. Data sources get the token from whoever"
            " manages the Secret. A change rolls the pod.",
            {
                "tokenSecretRef": _object(
                    "The Secret key holding the token.",
                    {
                        "name": _string("Name of the Secret.", minLength=1),
                        "key": _string("Key in the Secret.", minLength=1, default="token"),
                    },
                    required=["name"],
                ),
            },
            required=["tokenSecretRef"],
        ),
        "networkPolicy": _object(
            "A NetworkPolicy on the orderer: gRPC only from the allowed clients, the Spark"
            " job's pods and the operator; metrics only from metricsFrom. Everything else is"
            " refused, this namespace's other pods included.",
            {
                "enabled": {
                    "type": "boolean",
                    "description": "Create the NetworkPolicy.",
                    "default": False,
                },
                "allowedClients": {
                    "type": "array",
                    "description": "Who may send and read (the data sources, evb tail): each a"
                    " podSelector (pods of this namespace), a namespaceSelector (every pod of"
                    " those namespaces) or both (those pods of those namespaces).",
                    "items": _peer_schema(),
                },
                "metricsFrom": {
                    "type": "array",
                    "description": "Who may scrape the metrics port (e.g. Prometheus's"
                    " namespace); unset: nobody.",
                    "items": _peer_schema(),
                },
            },
            default={},
        ),
        "alerts": _object(
            "When the operator posts Warning Events.",
            {
                "lateBurst": _integer(
                    "Late fragments between two status updates that make a LateDataBurst Event.",
                    minimum=1,
                    default=1000,
                ),
            },
            default={},
        ),
        "spark": spark,
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
