"""The Spark job's child: its configuration (:func:`spark_job_config`, the arguments of
``evb spark-job``) and the ``SparkApplication`` that runs it against the orderer's Service,
with the object storage's settings, the client's security mounts and the live page's port
(:mod:`evb_operator.specs.live`).
"""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath
from typing import Any

from evb_operator import constants as c
from evb_operator.crd.output import mount_path
from evb_operator.specs.common import (
    RESTRICTED_CONTAINER,
    RESTRICTED_POD,
    SPARKAPPLICATION,
    ExtraLabels,
    client_security,
    labels_for,
    manifest,
    orderer_endpoint,
    run_targets,
)
from evb_operator.specs.live import page_address
from evb_operator.typed_spec import ObjectStorage, Spark, SparkOutput, Stages
from evb_operator.validation import ValidSpec
from orderer.job_config import JobConfig

__all__ = [
    "build_sparkapplication_spec",
    "object_storage_conf",
    "object_storage_env",
    "output_volume",
    "spark_job_config",
    "spark_partitions",
    "stages_file",
    "stages_volume",
]


SPARK_SCRATCH = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
"""The Spark pods' writable /tmp (their root filesystem is read-only; Spark's local dirs are
emptyDirs the Spark operator adds)."""


def spark_partitions(spark: Spark) -> int:
    """Partitions of a micro-batch: ``spec.spark.partitions``, else one per executor core
    (instances x cores), so that every core the SparkApplication asks for builds events."""
    if spark.partitions is not None:
        return spark.partitions
    return spark.executors.instances * spark.executors.cores


def stages_file(stages: Stages) -> PurePosixPath:
    """Where the driver finds the stages' file of ``spec.spark.stages``: its key under
    :data:`~evb_operator.constants.STAGES_DIR`, where :func:`stages_volume` mounts it."""
    return PurePosixPath(c.STAGES_DIR) / stages.key


def stages_volume(stages: Stages) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume and the driver's mount of ``spec.spark.stages``: the ConfigMap's key alone,
    read-only, at :data:`~evb_operator.constants.STAGES_DIR`. The driver alone: it loads the
    module and plans the stages; the executors get the stages' functions pickled by value
    (``orderer.spark.stages.runner``), never the file. The kubelet mounts it (no API call of the
    operator or the driver): a missing ConfigMap or key keeps the driver pod from starting
    (``FailedMount``)."""
    key = stages.key
    volume = {
        "name": "stages",
        "configMap": {
            "name": stages.config_map,
            "items": [{"key": key, "path": key}],
            "defaultMode": 0o440,
        },
    }
    return volume, {"name": "stages", "mountPath": c.STAGES_DIR, "readOnly": True}


def spark_job_config(
    name: str, namespace: str, spark: Spark, *, target: str | None = None
) -> JobConfig:
    """The Spark job's configuration (``orderer/spark/driver/job.py``): where to read, how to build,
    how to cut micro-batches, where to write; the SparkApplication's arguments are its
    :meth:`~orderer.job_config.JobConfig.to_argv`. Every field of ``spec.spark`` that the job
    reads is a field here (``spark``: the valid spec's section, its defaults filled in). The
    security files are left to the pods' ``EVB_TLS_*``/``EVB_TOKEN_FILE`` variables
    (:func:`client_security`); the stages' file is the driver's mount of ``spec.spark.stages``
    (:func:`stages_file`); the live page (``spec.spark.ui``) listens on every interface of the
    driver (:class:`~evb_operator.specs.live.PageAddress`). ``target``: the run's orderers
    (:func:`~evb_operator.specs.common.run_targets`: every orderer's address, comma-separated,
    for a run over several); None: the orderer's Service."""
    stages = spark.stages
    page = page_address(name, namespace, spark)
    return JobConfig(
        target=orderer_endpoint(name, namespace) if target is None else target,
        no_build=spark.no_build,
        dt=None if spark.no_build else spark.dt,
        max_fragments=spark.max_fragments,
        timestamp_policy=spark.timestamp_policy,
        partitions=spark_partitions(spark),
        trigger_seconds=spark.trigger_interval,
        tick_rate=spark.tick_rate,
        output=spark.output.path,
        format=spark.output.format,
        glom_source_id=spark.glom_source_id,
        connect_timeout=float(c.SPARK_CONNECT_TIMEOUT_SECONDS),
        max_fragments_per_trigger=spark.max_fragments_per_trigger,
        follow_runs=spark.follow_runs,
        stages=None if stages is None else Path(stages_file(stages)),
        ui=None if page is None else page.listen,
    )


def object_storage_conf(storage: ObjectStorage) -> dict[str, str]:
    """The s3a settings of ``spec.spark.objectStorage`` (no credentials: those are environment
    variables from the Secret, :func:`object_storage_env`)."""
    conf = {"spark.hadoop.fs.s3a.path.style.access": str(storage.path_style_access).lower()}
    if storage.endpoint is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = storage.endpoint
    if storage.region is not None:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = storage.region
    if storage.credentials_secret is not None:  # those variables only: no instance metadata
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = c.S3A_ENV_CREDENTIALS_PROVIDER
    return conf


def object_storage_env(storage: ObjectStorage) -> list[dict[str, Any]]:
    """``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``) of the
    driver and the executors, each a ``secretKeyRef`` to the Secret: the values never appear in
    an object the operator writes."""
    secret = storage.credentials_secret
    if secret is None:
        return []
    keys = [
        (c.ENV_AWS_ACCESS_KEY_ID, storage.access_key_id_key),
        (c.ENV_AWS_SECRET_ACCESS_KEY, storage.secret_access_key_key),
    ]
    if storage.session_token_key is not None:
        keys.append((c.ENV_AWS_SESSION_TOKEN, storage.session_token_key))
    return [
        {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for variable, key in keys
    ]


def output_volume(output: SparkOutput) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The volume and the mount of ``spec.spark.output.volumeClaim`` (at the local output's
    path, :func:`evb_operator.crd.output.mount_path`); None without one."""
    claim = output.volume_claim
    if claim is None:
        return None
    volume = {"name": "output", "persistentVolumeClaim": {"claimName": claim}}
    return volume, {"name": "output", "mountPath": mount_path(output.path)}


def _spark_pod(pod_labels: dict[str, str]) -> dict[str, Any]:
    """What the driver and the executors share: labels, the restricted security contexts and
    the writable /tmp."""
    return {
        "labels": pod_labels,
        "podSecurityContext": dict(RESTRICTED_POD),
        "securityContext": dict(RESTRICTED_CONTAINER),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def build_sparkapplication_spec(
    name: str, namespace: str, valid: ValidSpec, *, default_image: str, labels: ExtraLabels = None
) -> dict[str, Any]:
    """The Spark job as a ``SparkApplication``; it reads the orderer's Service (a run over
    several orderers: every orderer at its own name) until the end of the run, so it finishes
    by itself once the run ended."""
    spark = valid.spark
    assert spark is not None, "a SparkApplication for a spec without spec.spark"
    pod_labels = labels_for(name, "spark", labels)
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": default_image if spark.image is None else spark.image,
        "mainApplicationFile": c.SPARK_JOB_FILE,
        "arguments": spark_job_config(
            name, namespace, spark, target=run_targets(name, namespace, valid)
        ).to_argv(),
        "sparkVersion": spark.spark_version,
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": 3,
            "onFailureRetryInterval": 10,
            "onSubmissionFailureRetries": 5,
            "onSubmissionFailureRetryInterval": 20,
        },
        "driver": {
            "cores": spark.driver.cores,
            "memory": spark.driver.memory,
            "serviceAccount": spark.service_account,
            **_spark_pod(pod_labels),
        },
        "executor": {
            "instances": spark.executors.instances,
            "cores": spark.executors.cores,
            "memory": spark.executors.memory,
            **_spark_pod(pod_labels),
        },
        "volumes": [dict(SPARK_SCRATCH)],
    }
    if spark.image_pull_policy is not None:
        spec["imagePullPolicy"] = spark.image_pull_policy
    output = output_volume(spark.output)
    if output is not None:  # a local output's claim, where every pod writes its part
        volume, mount = output
        spec["volumes"].append(volume)
        for role in ("driver", "executor"):
            spec[role]["volumeMounts"].append(dict(mount))
    stages = spark.stages
    if stages is not None:  # the driver's only: see stages_volume
        volume, mount = stages_volume(stages)
        spec["volumes"].append(volume)
        spec["driver"]["volumeMounts"].append(mount)
    page = page_address(name, namespace, spark)
    if page is not None:  # the driver's alone: the executors serve no page
        spec["driver"]["ports"] = [page.container_port()]
    storage = spark.object_storage
    if storage is not None:
        _add_env(spec, object_storage_env(storage))
    _spark_security(spec, valid)
    conf = {**(object_storage_conf(storage) if storage is not None else {}), **spark.spark_conf}
    if conf:
        spec["sparkConf"] = conf
    return manifest(SPARKAPPLICATION, name, namespace, pod_labels, spec=spec)


def _add_env(spec: dict[str, Any], env: list[dict[str, Any]]) -> None:
    """``env`` for the driver and the executors alike (deep copies: a dumped manifest has no
    YAML anchors, and a change to one pod's variables is not the other's)."""
    if not env:
        return
    for role in ("driver", "executor"):
        spec[role].setdefault("env", []).extend(copy.deepcopy(env))


def _spark_security(spec: dict[str, Any], valid: ValidSpec) -> None:
    """Driver and executors get :func:`client_security`'s mounts and variables."""
    found = client_security(valid)
    if not found.volumes:
        return
    spec["volumes"] += found.volumes
    for role in ("driver", "executor"):
        spec[role]["volumeMounts"] += [dict(m) for m in found.mounts]
    _add_env(spec, found.env)
