"""The Spark job's section of the ``EventBuilder`` spec (``spec.spark``): its image, how it builds
events, its size, where the events go and its live page (:mod:`evb_operator.crd.live`).

Apart from :mod:`evb_operator.crd.definition` because it is the largest section and changes
with the job (``orderer/spark/driver/job.py``), not with the orderer. The fields marked "Building"
say how a run's events are built: the CRD's rule over them (``crd.BUILDING_FIELDS``) stays with the
other rules. Every description is its field's text (:mod:`evb_operator.crd.texts`): the job's
flag's, for a field that becomes one, else the typed spec's
(:class:`~evb_operator.typed_spec.Spark` and its parts).
"""

from __future__ import annotations

from typing import Any

from evb_operator.crd.live import ui_schema
from evb_operator.crd.output import output_schema
from evb_operator.crd.schema import _image, _integer, _number, _object, _spark_pod, _string
from evb_operator.crd.texts import described

__all__ = [
    "MAX_FRAGMENTS_PER_TRIGGER",
    "MAX_PARTITIONS",
    "MAX_TICK_RATE",
    "OBJECT_NAME_PATTERN",
    "STAGES_KEY_PATTERN",
    "spark_schema",
]

MAX_PARTITIONS = 65536
"""Upper bound of spec.spark.partitions, above the largest default (1000 executors x 64 cores)."""
MAX_FRAGMENTS_PER_TRIGGER = 10**12
"""Upper bound of spec.spark.maxFragmentsPerTrigger: more in one micro-batch is a typo."""
MAX_TICK_RATE = 1e15
"""Upper bound of spec.spark.tickRate (femtosecond ticks): more is a typo."""
STAGES_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\.py$"
"""spec.spark.stages.key: ``NAME.py``, NAME a Python identifier, the name the job imports the
module under (``orderer.stages.load``); ASCII, so also a valid ConfigMap key."""
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (DNS-1123 subdomain), as a ConfigMap's."""


def spark_schema() -> dict[str, Any]:
    """``spec.spark``; unset, there is no Spark job."""
    return _object(
        described("spark"),
        {
            **_image("spark"),
            "sparkVersion": _string(described("spark.sparkVersion"), minLength=1, default="4.3.0"),
            "serviceAccount": _string(
                described("spark.serviceAccount"), minLength=1, default="spark"
            ),
            "dt": _integer(described("spark.dt"), minimum=1),
            "noBuild": {
                "type": "boolean",
                "description": described("spark.noBuild"),
                "default": False,
            },
            "maxFragments": _integer(
                described("spark.maxFragments"),
                minimum=0,
                maximum=2**31 - 1,
                default=1000,  # orderer.building.config.GlomConfig's (a test checks)
            ),
            "timestampPolicy": _string(
                described("spark.timestampPolicy"),
                enum=["earliest", "latest", "average"],
                default="earliest",
            ),
            "followRuns": {
                "type": "boolean",
                "description": described("spark.followRuns"),
                "default": False,
            },
            "glomSourceId": _integer(
                described("spark.glomSourceId"), minimum=0, maximum=2**32 - 1, default=0
            ),
            "partitions": _integer(
                described("spark.partitions"), minimum=1, maximum=MAX_PARTITIONS
            ),
            "maxFragmentsPerTrigger": _integer(
                described("spark.maxFragmentsPerTrigger"),
                minimum=1,
                maximum=MAX_FRAGMENTS_PER_TRIGGER,
            ),
            "triggerInterval": _number(described("spark.triggerInterval"), minimum=0, default=0.0),
            "tickRate": _number(
                described("spark.tickRate"),
                minimum=0,
                exclusive=True,
                maximum=MAX_TICK_RATE,
                default=1e8,
            ),
            "driver": _object(
                described("spark.driver"), _spark_pod("spark.driver", "1g"), default={}
            ),
            "executors": _object(
                described("spark.executors"),
                {
                    "instances": _integer(
                        described("spark.executors.instances"), minimum=1, maximum=1000, default=2
                    ),
                    **_spark_pod("spark.executors", "2g"),
                },
                default={},
            ),
            "output": output_schema(),
            "stages": _stages(),
            "ui": ui_schema(),
            "objectStorage": _object_storage(),
            "sparkConf": {
                "type": "object",
                "description": described("spark.sparkConf"),
                "additionalProperties": {"type": "string"},
            },
        },
        required=["output"],
    )


def _object_storage() -> dict[str, Any]:
    """``spec.spark.objectStorage``: the S3-compatible store of an ``s3a://`` output."""
    return _object(
        described("spark.objectStorage"),
        {
            "credentialsSecret": _string(
                described("spark.objectStorage.credentialsSecret"), minLength=1
            ),
            "accessKeyIdKey": _string(
                described("spark.objectStorage.accessKeyIdKey"),
                minLength=1,
                default="AWS_ACCESS_KEY_ID",
            ),
            "secretAccessKeyKey": _string(
                described("spark.objectStorage.secretAccessKeyKey"),
                minLength=1,
                default="AWS_SECRET_ACCESS_KEY",
            ),
            "sessionTokenKey": _string(
                described("spark.objectStorage.sessionTokenKey"), minLength=1
            ),
            "endpoint": _string(
                described("spark.objectStorage.endpoint"),
                pattern=r"^https?://[^\s/]+(/.*)?$",
            ),
            "region": _string(described("spark.objectStorage.region"), minLength=1),
            "pathStyleAccess": {
                "type": "boolean",
                "description": described("spark.objectStorage.pathStyleAccess"),
                "default": False,
            },
        },
    )


def _stages() -> dict[str, Any]:
    """``spec.spark.stages``: the user's analysis stages, a Python file in a ConfigMap."""
    return _object(
        described("spark.stages"),
        {
            "configMap": _string(
                described("spark.stages.configMap"),
                minLength=1,
                maxLength=253,
                pattern=OBJECT_NAME_PATTERN,
            ),
            "key": _string(
                described("spark.stages.key"), maxLength=253, pattern=STAGES_KEY_PATTERN
            ),
        },
        required=["configMap", "key"],
    )
