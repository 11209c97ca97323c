"""The parts of an ``EventBuilder`` spec as frozen dataclasses, field names in snake_case: what
the children's builders (:mod:`evb_operator.specs`), the status (:mod:`evb_operator.status`)
and the handlers read, by attribute, from a :class:`~evb_operator.validation.ValidSpec`.

Made once, by :func:`evb_operator.validation.validate`, from the spec completed with the CRD's
defaults and checked (each part's ``of`` reads its camelCase section; nothing else calls them), so
a part holds only values the schema allowed, with every default filled in: a field is None only
where the CRD has no default and the spec leaves it unset. The orderer's own parameters
(``buildWindow``, ``sources``, ``flowControl``, ``resetOnBeginRun``...) are not here: they are
:class:`orderer.config.OrdererConfig` (``ValidSpec.orderer``), typed where the orderer reads them.

A few values are Kubernetes' or Spark's own objects, which the operator passes on verbatim into
a child (a container's ``resources``, a NetworkPolicy's peers, ``sparkConf``): they stay
mappings, as Kubernetes spells them (their schema is Kubernetes', not the operator's), and the
builders copy them into the child. Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from orderer.flags.serve import Fsync
from orderer.job_config import OutputFormat, TimestampPolicy

__all__ = [
    "Alerts",
    "Auth",
    "NetworkPolicy",
    "ObjectStorage",
    "OrdererPod",
    "SecretKeyRef",
    "Spark",
    "SparkDriver",
    "SparkExecutors",
    "SparkOutput",
    "Stages",
    "Storage",
    "Tls",
    "Upstream",
]


def _optional_int(section: Mapping[str, Any], key: str) -> int | None:
    value = section.get(key)
    return None if value is None else int(value)


def _optional_str(section: Mapping[str, Any], key: str) -> str | None:
    value = section.get(key)
    return None if value is None else str(value)


def _verbatim(value: Any) -> Any:
    """A Kubernetes object passed on as it is: a copy, so that no child aliases another's."""
    return copy.deepcopy(value)


@dataclass(frozen=True)
class OrdererPod:
    """``spec.orderer``: the orderer's pod (a change rolls it)."""

    image: str | None
    """The orderer's image; None: the operator's default (its own image)."""
    image_pull_policy: str | None
    """``Always``, ``IfNotPresent`` or ``Never``; None: Kubernetes' default."""
    resources: Mapping[str, Any]
    """The container's ``resources`` (``requests``, ``limits``), verbatim: Kubernetes' object."""
    fsync: Fsync
    """When the logs are forced to disk (``evb serve --fsync``)."""
    max_payload_bytes: int
    """The largest payload of one fragment (``evb serve --max-payload-bytes``)."""
    strict_sources: bool
    """Refuse data from sources not in ``spec.sources`` (``evb serve --strict-sources``)."""
    retention_bytes: int | None
    """Ordered-log retention by size, in bytes; None keeps everything."""
    retention_seconds: float | None
    """Ordered-log retention by age, in seconds; None keeps everything."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> OrdererPod:
        seconds = section.get("retentionSeconds")
        return cls(
            image=_optional_str(section, "image"),
            image_pull_policy=_optional_str(section, "imagePullPolicy"),
            resources=_verbatim(section["resources"]),
            fsync=cast(Fsync, section["fsync"]),
            max_payload_bytes=int(section["maxPayloadBytes"]),
            strict_sources=bool(section["strictSources"]),
            retention_bytes=_optional_int(section, "retentionBytes"),
            retention_seconds=None if seconds is None else float(seconds),
        )


@dataclass(frozen=True)
class Storage:
    """``spec.storage``: the volume of the orderer's logs (immutable)."""

    size: int | str
    """The claim's size, a Kubernetes quantity as the spec gives it (``10Gi``)."""
    storage_class_name: str | None
    """The claim's storage class; None: the cluster's default."""
    retain_on_delete: bool
    """Keep the claims (and the logs) when the EventBuilder is deleted."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Storage:
        size = section["size"]
        return cls(
            size=size if isinstance(size, int) else str(size),
            storage_class_name=_optional_str(section, "storageClassName"),
            retain_on_delete=bool(section["retainOnDelete"]),
        )


@dataclass(frozen=True)
class Tls:
    """``spec.tls``: the orderer serves TLS."""

    secret_name: str
    """The orderer's ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``, ``ca.crt``)."""
    mutual: bool
    """Every client presents a certificate signed by ``ca.crt``."""
    client_secret_name: str | None
    """The Secret of the client certificate the operator and the Spark job present (set when
    ``mutual``: a CRD rule requires it)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Tls:
        return cls(
            secret_name=str(section["secretName"]),
            mutual=bool(section["mutual"]),
            client_secret_name=_optional_str(section, "clientSecretName"),
        )

    @property
    def client_secret(self) -> str:
        """:attr:`client_secret_name` under mutual TLS, where the CRD's rules make it set."""
        assert self.client_secret_name is not None, "mutual TLS without clientSecretName"
        return self.client_secret_name


@dataclass(frozen=True)
class SecretKeyRef:
    """A key of a Secret (``spec.auth.tokenSecretRef``)."""

    name: str
    """The Secret's name."""
    key: str
    """The key in the Secret."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SecretKeyRef:
        return cls(name=str(section["name"]), key=str(section["key"]))


@dataclass(frozen=True)
class Auth:
    """``spec.auth``: bearer-token authentication (needs TLS)."""

    token_secret_ref: SecretKeyRef
    """Where the token is."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Auth:
        return cls(token_secret_ref=SecretKeyRef.of(section["tokenSecretRef"]))


@dataclass(frozen=True)
class NetworkPolicy:
    """``spec.networkPolicy``: who may reach the orderer."""

    enabled: bool
    """Create the NetworkPolicy."""
    allowed_clients: tuple[Mapping[str, Any], ...]
    """Who may send and read: NetworkPolicyPeers, verbatim (Kubernetes' objects); () if unset."""
    metrics_from: tuple[Mapping[str, Any], ...]
    """Who may scrape the metrics port: NetworkPolicyPeers, verbatim; () if unset (nobody)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> NetworkPolicy:
        return cls(
            enabled=bool(section["enabled"]),
            allowed_clients=tuple(_verbatim(p) for p in section.get("allowedClients", ())),
            metrics_from=tuple(_verbatim(p) for p in section.get("metricsFrom", ())),
        )


@dataclass(frozen=True)
class Alerts:
    """``spec.alerts``: when the operator posts Warning Events."""

    late_burst: int
    """Late fragments between two status updates that make a ``LateDataBurst`` Event."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Alerts:
        return cls(late_burst=int(section["lateBurst"]))


@dataclass(frozen=True)
class Upstream:
    """One of ``spec.upstreams``: an orderer whose ordered output ``evb forward`` brings in."""

    target: str
    """``host:port`` of the upstream orderer."""
    as_source: int | None
    """Forward everything as this one source id; None: each source keeps its own."""
    consumer: str | None
    """The consumer's name at the upstream; None: ``evb forward``'s default."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Upstream:
        return cls(
            target=str(section["target"]),
            as_source=_optional_int(section, "asSource"),
            consumer=_optional_str(section, "consumer"),
        )


@dataclass(frozen=True)
class SparkDriver:
    """``spec.spark.driver``: the size of the Spark driver."""

    cores: int
    """The driver's cores."""
    memory: str
    """The driver's memory, in Spark's notation (``1g``)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SparkDriver:
        return cls(cores=int(section["cores"]), memory=str(section["memory"]))


@dataclass(frozen=True)
class SparkExecutors:
    """``spec.spark.executors``: the Spark executors."""

    instances: int
    """How many executors."""
    cores: int
    """Cores per executor."""
    memory: str
    """Memory per executor, in Spark's notation (``2g``)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SparkExecutors:
        return cls(
            instances=int(section["instances"]),
            cores=int(section["cores"]),
            memory=str(section["memory"]),
        )


@dataclass(frozen=True)
class SparkOutput:
    """``spec.spark.output``: where the built events go."""

    path: str
    """The output location, a Hadoop path (``s3a://bucket/run``, ``file:///events``)."""
    format: OutputFormat
    """parquet, json or nscldaq."""
    volume_claim: str | None
    """The PersistentVolumeClaim mounted at a local ``path``; None: none (a remote path)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SparkOutput:
        return cls(
            path=str(section["path"]),
            format=OutputFormat(section["format"]),
            volume_claim=_optional_str(section, "volumeClaim"),
        )


@dataclass(frozen=True)
class Stages:
    """``spec.spark.stages``: the analysis stages' Python file, in a ConfigMap."""

    config_map: str
    """The ConfigMap's name (in the EventBuilder's namespace)."""
    key: str
    """The file's key in the ConfigMap (``NAME.py``)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Stages:
        return cls(config_map=str(section["configMap"]), key=str(section["key"]))


@dataclass(frozen=True)
class ObjectStorage:
    """``spec.spark.objectStorage``: the S3-compatible store of an ``s3a://`` output."""

    credentials_secret: str | None
    """The Secret of the credentials; None: s3a's default credential chain."""
    access_key_id_key: str
    """The access key id's key in the Secret."""
    secret_access_key_key: str
    """The secret access key's key in the Secret."""
    session_token_key: str | None
    """A session token's key in the Secret; None: no session token."""
    endpoint: str | None
    """The store's endpoint URL; None: AWS S3."""
    region: str | None
    """The bucket's region; None: s3a's default."""
    path_style_access: bool
    """Path-style requests (``endpoint/bucket/key``)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> ObjectStorage:
        return cls(
            credentials_secret=_optional_str(section, "credentialsSecret"),
            access_key_id_key=str(section["accessKeyIdKey"]),
            secret_access_key_key=str(section["secretAccessKeyKey"]),
            session_token_key=_optional_str(section, "sessionTokenKey"),
            endpoint=_optional_str(section, "endpoint"),
            region=_optional_str(section, "region"),
            path_style_access=bool(section["pathStyleAccess"]),
        )


@dataclass(frozen=True)
class Spark:
    """``spec.spark``: the Spark job that builds events from the orderer's output."""

    image: str | None
    """The Spark job's image; None: the operator's default."""
    image_pull_policy: str | None
    """``Always``, ``IfNotPresent`` or ``Never``; None: the Spark operator's default."""
    spark_version: str
    """The image's Spark version."""
    service_account: str
    """The driver's service account (it creates the executor pods)."""
    dt: int | None
    """The glom window in timestamp ticks; None with ``no_build`` (a CRD rule)."""
    no_build: bool
    """One event per fragment (no glom)."""
    max_fragments: int
    """glom's ``--maxfragments``."""
    timestamp_policy: TimestampPolicy
    """A built event's timestamp: its earliest, latest or average fragment's."""
    follow_runs: bool
    """Build every run of the orderer, each under its number."""
    glom_source_id: int
    """The source id of the built events' body headers (nscldaq output)."""
    partitions: int | None
    """Partitions of a micro-batch; None: one per executor core."""
    max_fragments_per_trigger: int | None
    """Cap on a micro-batch, in fragments; None: everything available."""
    trigger_interval: float
    """Seconds between the starts of two micro-batches."""
    tick_rate: float
    """Timestamp ticks per second."""
    driver: SparkDriver
    """The driver's size."""
    executors: SparkExecutors
    """The executors."""
    output: SparkOutput
    """Where the events go."""
    stages: Stages | None
    """The analysis stages; None: none."""
    ui: int | None
    """The live page's port; None: no page."""
    object_storage: ObjectStorage | None
    """The object storage's settings; None: none."""
    spark_conf: Mapping[str, str]
    """Spark's configuration passed through, verbatim (Spark's keys); empty if unset."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Spark:
        stages, storage = section.get("stages"), section.get("objectStorage")
        return cls(
            image=_optional_str(section, "image"),
            image_pull_policy=_optional_str(section, "imagePullPolicy"),
            spark_version=str(section["sparkVersion"]),
            service_account=str(section["serviceAccount"]),
            dt=_optional_int(section, "dt"),
            no_build=bool(section["noBuild"]),
            max_fragments=int(section["maxFragments"]),
            timestamp_policy=TimestampPolicy(section["timestampPolicy"]),
            follow_runs=bool(section["followRuns"]),
            glom_source_id=int(section["glomSourceId"]),
            partitions=_optional_int(section, "partitions"),
            max_fragments_per_trigger=_optional_int(section, "maxFragmentsPerTrigger"),
            trigger_interval=float(section["triggerInterval"]),
            tick_rate=float(section["tickRate"]),
            driver=SparkDriver.of(section["driver"]),
            executors=SparkExecutors.of(section["executors"]),
            output=SparkOutput.of(section["output"]),
            stages=None if stages is None else Stages.of(stages),
            ui=_optional_int(section, "ui"),
            object_storage=None if storage is None else ObjectStorage.of(storage),
            spark_conf={str(k): str(v) for k, v in section.get("sparkConf", {}).items()},
        )
