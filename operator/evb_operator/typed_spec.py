"""An ``EventBuilder`` spec as frozen dataclasses, field names in snake_case: the whole of a
valid spec (:class:`ValidSpec`) and its parts, what the children's builders
(:mod:`evb_operator.specs`), the status (:mod:`evb_operator.status`) and the handlers read, by
attribute.

Made once, by :func:`evb_operator.validation.validate`, from the spec completed with the CRD's
defaults and checked (each part's ``of`` reads its camelCase section; nothing else calls them), so
a part holds only values the schema allowed, with every default filled in: a field is None only
where the CRD has no default and the spec leaves it unset. The orderer's own parameters
(``buildWindow``, ``sources``, ``flowControl``, ``resetOnBeginRun``...) are not here: they are
:class:`orderer.config.OrdererConfig` (``ValidSpec.orderer``), typed where the orderer reads them.

Each field describes its spec field once, in its docstring (read with :mod:`ast`:
:func:`orderer.config.field_texts`): the first paragraph is the CRD's description
(``kubectl explain``) and the text of the README's tables (:mod:`evb_operator.crd.texts`); the
paragraphs after it are for the Python reader (what None means here). A field that is a setting
of a command the operator runs says "Described by ``JobConfig.dt``." instead, naming the setting
whose text describes it (``crd.texts.BORROWED``; a test holds the two together).

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

from evb_operator.phases import RunPhase
from orderer.config import OrdererConfig
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
    "ValidSpec",
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
    """Orderer image; default: the operator's own image (one image holds both).

    None: the operator's default."""
    image_pull_policy: str | None
    """Image pull policy.

    ``Always``, ``IfNotPresent`` or ``Never``; None: Kubernetes' default."""
    resources: Mapping[str, Any]
    """Orderer container resources.

    The container's ``resources`` (``requests``, ``limits``), verbatim: Kubernetes' object."""
    fsync: Fsync
    """Described by ``ServeCommand.fsync``."""
    max_payload_bytes: int
    """Described by ``ServeCommand.max_payload_bytes``."""
    strict_sources: bool
    """Described by ``ServeCommand.strict_sources``."""
    retention_bytes: int | None
    """Described by ``ServeCommand.retention_bytes``. None keeps everything."""
    retention_seconds: float | None
    """Described by ``ServeCommand.retention_seconds``. None keeps everything."""

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
    """Size of the volume claim.

    A Kubernetes quantity as the spec gives it (``10Gi``)."""
    storage_class_name: str | None
    """Storage class of the claim; unset: the cluster's default."""
    retain_on_delete: bool
    """Keep the volume claim (and the logs) when the EventBuilder is deleted."""

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
    """A ``kubernetes.io/tls`` Secret: ``tls.crt`` and ``tls.key`` of the orderer, and
    ``ca.crt``, the CA clients verify it with (and, with mutual, the CA of the client
    certificates). cert-manager's Certificates hold all three."""
    mutual: bool
    """Mutual TLS: every client must present a certificate signed by ``ca.crt``."""
    client_secret_name: str | None
    """A ``kubernetes.io/tls`` Secret with the client certificate (``tls.crt``, ``tls.key``) the
    operator and the Spark job present under mutual TLS.

    Set when ``mutual``: a CRD rule requires it."""

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
    """Name of the Secret."""
    key: str
    """Key in the Secret."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SecretKeyRef:
        return cls(name=str(section["name"]), key=str(section["key"]))


@dataclass(frozen=True)
class Auth:
    """``spec.auth``: bearer-token authentication (needs TLS)."""

    token_secret_ref: SecretKeyRef
    """The Secret key holding the token."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Auth:
        return cls(token_secret_ref=SecretKeyRef.of(section["tokenSecretRef"]))


@dataclass(frozen=True)
class NetworkPolicy:
    """``spec.networkPolicy``: who may reach the orderer."""

    enabled: bool
    """Create the NetworkPolicy."""
    allowed_clients: tuple[Mapping[str, Any], ...]
    """Who may send and read (the data sources, ``evb tail``): each a ``podSelector`` (pods of
    this namespace), a ``namespaceSelector`` (every pod of those namespaces) or both (those pods
    of those namespaces).

    NetworkPolicyPeers, verbatim (Kubernetes' objects); () if unset."""
    metrics_from: tuple[Mapping[str, Any], ...]
    """Who may scrape the metrics port (e.g. Prometheus's namespace); unset: nobody.

    NetworkPolicyPeers, verbatim; () if unset."""

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
    """Described by ``ForwardCommand.upstream``."""
    as_source: int | None
    """Described by ``ForwardCommand.as_source``. None: each source keeps its own."""
    consumer: str | None
    """Described by ``ForwardCommand.consumer``. None: ``evb forward``'s default."""

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
    """Driver cores."""
    memory: str
    """Driver memory (Spark notation: ``512m``, ``2g``)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SparkDriver:
        return cls(cores=int(section["cores"]), memory=str(section["memory"]))


@dataclass(frozen=True)
class SparkExecutors:
    """``spec.spark.executors``: the Spark executors."""

    instances: int
    """Number of executors."""
    cores: int
    """Cores per executor."""
    memory: str
    """Memory per executor (Spark notation: ``512m``, ``2g``)."""

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
    """Output location (a Hadoop path: ``s3a://bucket/run1``, or ``file:///events`` with
    ``volumeClaim``).

    The job's ``--output``."""
    format: OutputFormat
    """Described by ``JobConfig.format``."""
    volume_claim: str | None
    """PersistentVolumeClaim mounted at a local path (``file:///events``) in the driver and every
    executor, where the events, the summary and the checkpoint go (ReadWriteMany when the pods
    may run on several nodes). Required for a local path: without it the events would stay in
    the pods and be lost with them.

    None: none (a remote path)."""

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
    """Name of the ConfigMap (in the EventBuilder's namespace)."""
    key: str
    """Key of the Python file in the ConfigMap: ``NAME.py``, NAME a Python identifier (the
    module's name in the job; not one of the standard library's)."""

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Stages:
        return cls(config_map=str(section["configMap"]), key=str(section["key"]))


@dataclass(frozen=True)
class ObjectStorage:
    """``spec.spark.objectStorage``: the S3-compatible store of an ``s3a://`` output."""

    credentials_secret: str | None
    """Secret holding the access key id and the secret access key (and a session token, if
    temporary); unset: s3a's default credential chain (e.g. a pod identity)."""
    access_key_id_key: str
    """Key of the access key id in the Secret."""
    secret_access_key_key: str
    """Key of the secret access key in the Secret."""
    session_token_key: str | None
    """Key of a session token in the Secret; unset: none."""
    endpoint: str | None
    """Endpoint URL (MinIO, Ceph: ``http://minio.storage.svc:9000``); unset: AWS S3."""
    region: str | None
    """Region of the bucket; unset: s3a's default."""
    path_style_access: bool
    """Path-style requests (``endpoint/bucket/key``), as MinIO and most S3-compatible stores
    need."""

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
    """Spark job image (evb installed on a Spark base); default: the operator's.

    None: the operator's default."""
    image_pull_policy: str | None
    """Image pull policy.

    ``Always``, ``IfNotPresent`` or ``Never``; None: the Spark operator's default."""
    spark_version: str
    """Spark version of the image."""
    service_account: str
    """Service account of the driver (it creates the executor pods)."""
    dt: int | None
    """Described by ``JobConfig.dt``. None with ``no_build`` (a CRD rule)."""
    no_build: bool
    """Described by ``JobConfig.no_build``."""
    max_fragments: int
    """Described by ``JobConfig.max_fragments``."""
    timestamp_policy: TimestampPolicy
    """Described by ``JobConfig.timestamp_policy``."""
    follow_runs: bool
    """Described by ``JobConfig.follow_runs``."""
    glom_source_id: int
    """Described by ``JobConfig.glom_source_id``."""
    partitions: int | None
    """Described by ``JobConfig.partitions``. None: one per executor core
    (:func:`evb_operator.specs.spark.spark_partitions`)."""
    max_fragments_per_trigger: int | None
    """Described by ``JobConfig.max_fragments_per_trigger``. None: everything available."""
    trigger_interval: float
    """Described by ``JobConfig.trigger_seconds``."""
    tick_rate: float
    """Described by ``JobConfig.tick_rate``."""
    driver: SparkDriver
    """Spark driver size."""
    executors: SparkExecutors
    """Spark executors."""
    output: SparkOutput
    """Where the built events go."""
    stages: Stages | None
    """Analysis stages run on the built events (``evb spark-job --stages``): a Python file held
    in a ConfigMap of this namespace, which the Spark driver mounts read-only (the executors get
    the stages pickled, not the file). Unset: no stages. The ConfigMap is read when the driver
    starts: a change of its content reaches the job at its next submission (a run resumes only
    with the stages' graph it began with). Building.

    None: no stages."""
    ui: int | None
    """Port of the live page (``evb spark-job --ui``): the Spark driver serves, read-only, the
    run's rates, late fraction, micro-batches and every histogram the job draws, updated after
    each micro-batch, and the operator puts a ClusterIP Service, NAME-live, in front of it
    (``status.spark.ui`` names the URL). 1024 to 65535 (the driver runs as non-root), none of
    Spark's own ports in the driver (4040, 7078, 7079). Unset: no page and no Service. Set or
    unset: Building (the page's running totals are kept in the run's checkpoint from its
    start); the port may change, which resubmits the Spark job as every change of
    ``spec.spark`` does.

    None: no page. The bounds and the ports are :mod:`evb_operator.crd.live`'s (a test holds
    the text to them)."""
    object_storage: ObjectStorage | None
    """S3-compatible object storage for an ``s3a://`` ``output.path`` (the Spark image carries
    hadoop-aws). Credentials come from a Secret, as environment variables of the driver and the
    executors: never in ``sparkConf`` or a ConfigMap.

    None: none."""
    spark_conf: Mapping[str, str]
    """Spark configuration passed through as is (``spark.*`` keys); it wins over what
    ``objectStorage`` sets. No credentials: they belong in ``objectStorage.credentialsSecret``.

    Verbatim (Spark's keys); empty if unset."""

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


@dataclass(frozen=True)
class ValidSpec:
    """A spec checked and completed with every default, typed: its parts as this module's
    dataclasses, made once by :func:`evb_operator.validation.validate`, read by attribute by
    whoever builds from it. No field holds the raw spec: nothing echoes the whole of it back to
    Kubernetes (the few Kubernetes objects passed on verbatim are the parts' mappings, the module
    says which). Each field is the spec's property of its name in camelCase, but
    :attr:`orderer_pod` (``spec.orderer``) and :attr:`orderer` (the orderer's parameters)."""

    orderer: OrdererConfig
    """The orderer's parameters (``evb serve --config``): ``buildWindow``, ``sources``,
    ``flowControl``, ``resetOnBeginRun`` and the others, typed (and described) by the orderer's
    own class."""
    state: RunPhase
    """Running, or Ended: the orderer ends the run (drains every queue, EndRun) and the Spark job
    finishes reading. An ended run cannot be resumed.

    Ended: the end of run was asked for."""
    run: int
    """Number of the current run. The orderer starts with it; raising it ends the current run (if
    it has not ended) and begins this one. It cannot be lowered."""
    orderers: int
    """Described by ``ServeCommand.orderers``. 1: the run is not sliced."""
    slice_ticks: int | None
    """Described by ``ServeCommand.slice_ticks``. None with one orderer."""
    orderer_pod: OrdererPod
    """The orderer's pod: image, resources and service settings. A change rolls the pod (the
    orderer recovers its run from its logs).

    ``spec.orderer``."""
    storage: Storage
    """The volume of the orderer's arrival and ordered logs (immutable)."""
    network_policy: NetworkPolicy
    """A NetworkPolicy on the orderer: gRPC only from the allowed clients, the Spark job's pods
    and the operator; metrics only from ``metricsFrom``. Everything else is refused, this
    namespace's other pods included."""
    alerts: Alerts
    """When the operator posts Warning Events."""
    tls: Tls | None = None
    """TLS of the orderer's gRPC endpoint: ``evb serve`` speaks TLS only (plaintext clients fail
    the handshake). The Secret is mounted read-only at /etc/evb/tls; its certificate must name
    the Service (NAME-orderer.NAMESPACE.svc) and, with orderers above 1, each orderer
    (*.NAME-orderer-headless.NAMESPACE.svc). A change rolls the pods.

    None: plaintext."""
    auth: Auth | None = None
    """Bearer-token authentication (needs ``tls``): every call but health checking must carry the
    token, else UNAUTHENTICATED. Data sources get the token from whoever manages the Secret. A
    change rolls the pod.

    None: no token."""
    upstreams: tuple[Upstream, ...] = ()
    """Hierarchical building: orderers whose ordered output comes in as sources of this one, each
    through ``evb forward`` (restart-safe: it resumes from the offset its consumer committed
    upstream).

    In the spec's order; () when unset."""
    spark: Spark | None = None
    """The Spark job that reads the ordered output from the orderer's Service and builds events.
    Unset: no SparkApplication (the orderer runs alone).

    None: no Spark job."""

    @property
    def has_spark(self) -> bool:
        """Whether the spec has a Spark job (``spec.spark``)."""
        return self.spark is not None

    @classmethod
    def of(cls, full: Mapping[str, Any], orderer: OrdererConfig) -> ValidSpec:
        """The typed spec of ``full``, a spec completed with the CRD's defaults and checked, its
        orderer's parameters ``orderer`` (only :func:`~evb_operator.validation.validate` calls
        it, after its checks)."""
        tls, auth, spark = full.get("tls"), full.get("auth"), full.get("spark")
        ticks = full.get("sliceTicks")
        return cls(
            orderer=orderer,
            state=RunPhase(full["state"]),
            run=int(full["run"]),
            orderers=int(full["orderers"]),
            slice_ticks=None if ticks is None else int(ticks),
            orderer_pod=OrdererPod.of(full["orderer"]),
            storage=Storage.of(full["storage"]),
            network_policy=NetworkPolicy.of(full["networkPolicy"]),
            alerts=Alerts.of(full["alerts"]),
            tls=None if tls is None else Tls.of(tls),
            auth=None if auth is None else Auth.of(auth),
            upstreams=tuple(Upstream.of(u) for u in full.get("upstreams", ())),
            spark=None if spark is None else Spark.of(spark),
        )
