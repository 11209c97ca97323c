"""The Spark job's child: its configuration (:func:`spark_job_config`, the arguments of
``evb spark-job``) and the ``SparkApplication`` that runs it against the orderer's Service,
with the object storage's settings, the client's security mounts and the live page's port
(:mod:`evb_operator.specs_live`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from evb_operator import constants as c
from evb_operator import crd_output
from evb_operator.crd import SPEC_SCHEMA
from evb_operator.specs_common import (
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
from evb_operator.specs_live import page_address
from evb_operator.validation import ValidSpec, with_defaults
from orderer.job_config import JobConfig, OutputFormat, TimestampPolicy

__all__ = [
    "build_sparkapplication_spec",
    "object_storage_conf",
    "object_storage_env",
    "spark_job_config",
    "spark_partitions",
    "stages_file",
    "stages_volume",
]


SPARK_SCHEMA = SPEC_SCHEMA["properties"]["spark"]


SPARK_SCRATCH = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
"""The Spark pods' writable /tmp (their root filesystem is read-only; Spark's local dirs are
emptyDirs the Spark operator adds)."""


def spark_partitions(spark: Mapping[str, Any]) -> int:
    """Partitions of a micro-batch: ``spec.spark.partitions``, else one per executor core
    (instances x cores), so that every core the SparkApplication asks for builds events."""
    if "partitions" in spark:
        return int(spark["partitions"])
    executors = spark["executors"]
    return int(executors["instances"]) * int(executors["cores"])


def stages_file(stages: Mapping[str, Any]) -> PurePosixPath:
    """Where the driver finds the stages' file of ``spec.spark.stages``: its key under
    :data:`~evb_operator.constants.STAGES_DIR`, where :func:`stages_volume` mounts it."""
    return PurePosixPath(c.STAGES_DIR) / str(stages["key"])


def stages_volume(stages: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume and the driver's mount of ``spec.spark.stages``: the ConfigMap's key alone,
    read-only, at :data:`~evb_operator.constants.STAGES_DIR`. The driver alone: it loads the
    module and plans the stages; the executors get the stages' functions pickled by value
    (``orderer.spark.stages``), never the file. The kubelet mounts it (no API call of the
    operator or the driver): a missing ConfigMap or key keeps the driver pod from starting
    (``FailedMount``)."""
    key = str(stages["key"])
    volume = {
        "name": "stages",
        "configMap": {
            "name": stages["configMap"],
            "items": [{"key": key, "path": key}],
            "defaultMode": 0o440,
        },
    }
    return volume, {"name": "stages", "mountPath": c.STAGES_DIR, "readOnly": True}


def spark_job_config(
    name: str, namespace: str, spark: Mapping[str, Any], *, target: str | None = None
) -> JobConfig:
    """The Spark job's configuration (``orderer/spark/job.py``): where to read, how to build, how
    to cut micro-batches, where to write; the SparkApplication's arguments are its
    :meth:`~orderer.job_config.JobConfig.to_argv`. Every field of ``spec.spark`` that the job
    reads is a field here. ``spark`` is completed with the CRD's defaults first (a raw section
    will do). The security files are left to the pods' ``EVB_TLS_*``/``EVB_TOKEN_FILE``
    variables (:func:`client_security`); the stages' file is the driver's mount of
    ``spec.spark.stages`` (:func:`stages_file`); the live page (``spec.spark.ui``) listens on
    every interface of the driver (:class:`~evb_operator.specs_live.PageAddress`). ``target``:
    the run's orderers (:func:`~evb_operator.specs_common.run_targets`: every orderer's
    address, comma-separated, for a run over several); None: the orderer's Service."""
    spark = with_defaults(SPARK_SCHEMA, spark)
    stages = spark.get("stages")
    page = page_address(name, namespace, spark)
    return JobConfig(
        target=orderer_endpoint(name, namespace) if target is None else target,
        no_build=bool(spark["noBuild"]),
        dt=None if spark["noBuild"] else int(spark["dt"]),
        max_fragments=int(spark["maxFragments"]),
        timestamp_policy=TimestampPolicy(spark["timestampPolicy"]),
        partitions=spark_partitions(spark),
        trigger_seconds=float(spark["triggerInterval"]),
        tick_rate=float(spark["tickRate"]),
        output=str(spark["output"]["path"]),
        format=OutputFormat(spark["output"]["format"]),
        glom_source_id=int(spark["glomSourceId"]),
        connect_timeout=float(c.SPARK_CONNECT_TIMEOUT_SECONDS),
        max_fragments_per_trigger=(
            int(spark["maxFragmentsPerTrigger"]) if "maxFragmentsPerTrigger" in spark else None
        ),
        follow_runs=bool(spark["followRuns"]),
        stages=None if stages is None else Path(stages_file(stages)),
        ui=None if page is None else page.listen,
    )


def object_storage_conf(storage: Mapping[str, Any]) -> dict[str, str]:
    """The s3a settings of ``spec.spark.objectStorage`` (no credentials: those are environment
    variables from the Secret, :func:`object_storage_env`)."""
    conf = {"spark.hadoop.fs.s3a.path.style.access": str(storage["pathStyleAccess"]).lower()}
    if "endpoint" in storage:
        conf["spark.hadoop.fs.s3a.endpoint"] = storage["endpoint"]
    if "region" in storage:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = storage["region"]
    if "credentialsSecret" in storage:  # those variables only: no instance-metadata fallback
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = c.S3A_ENV_CREDENTIALS_PROVIDER
    return conf


def object_storage_env(storage: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``) of the
    driver and the executors, each a ``secretKeyRef`` to the Secret: the values never appear in
    an object the operator writes."""
    secret = storage.get("credentialsSecret")
    if secret is None:
        return []
    keys = [
        (c.ENV_AWS_ACCESS_KEY_ID, storage["accessKeyIdKey"]),
        (c.ENV_AWS_SECRET_ACCESS_KEY, storage["secretAccessKeyKey"]),
    ]
    if "sessionTokenKey" in storage:
        keys.append((c.ENV_AWS_SESSION_TOKEN, storage["sessionTokenKey"]))
    return [
        {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for variable, key in keys
    ]


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
    spark = valid.spec["spark"]
    pod_labels = labels_for(name, "spark", labels)
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": spark.get("image", default_image),
        "mainApplicationFile": c.SPARK_JOB_FILE,
        "arguments": spark_job_config(
            name, namespace, spark, target=run_targets(name, namespace, valid)
        ).to_argv(),
        "sparkVersion": spark["sparkVersion"],
        "restartPolicy": {
            "type": "OnFailure",
            "onFailureRetries": 3,
            "onFailureRetryInterval": 10,
            "onSubmissionFailureRetries": 5,
            "onSubmissionFailureRetryInterval": 20,
        },
        "driver": {
            "cores": spark["driver"]["cores"],
            "memory": spark["driver"]["memory"],
            "serviceAccount": spark["serviceAccount"],
            **_spark_pod(pod_labels),
        },
        "executor": {
            "instances": spark["executors"]["instances"],
            "cores": spark["executors"]["cores"],
            "memory": spark["executors"]["memory"],
            **_spark_pod(pod_labels),
        },
        "volumes": [dict(SPARK_SCRATCH)],
    }
    if "imagePullPolicy" in spark:
        spec["imagePullPolicy"] = spark["imagePullPolicy"]
    output = crd_output.output_volume(spark["output"])
    if output is not None:  # a local output's claim, where every pod writes its part
        volume, mount = output
        spec["volumes"].append(volume)
        for role in ("driver", "executor"):
            spec[role]["volumeMounts"].append(dict(mount))
    stages = spark.get("stages")
    if stages is not None:  # the driver's only: see stages_volume
        volume, mount = stages_volume(stages)
        spec["volumes"].append(volume)
        spec["driver"]["volumeMounts"].append(mount)
    page = page_address(name, namespace, spark)
    if page is not None:  # the driver's alone: the executors serve no page
        spec["driver"]["ports"] = [page.container_port()]
    storage = spark.get("objectStorage")
    if storage is not None:
        _add_env(spec, object_storage_env(storage))
    _spark_security(spec, valid)
    conf = {**(object_storage_conf(storage) if storage else {}), **spark.get("sparkConf", {})}
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
