"""The Spark job's section of the ``EventBuilder`` spec (``spec.spark``): its image, how it builds
events, its size, where the events go and its live page (:mod:`evb_operator.crd.live`).

Apart from :mod:`evb_operator.crd.definition` because it is the largest section and changes
with the job (``orderer/spark/job.py``), not with the orderer. The fields marked "Building" say
how a run's events are built: the CRD's rule over them (``crd.BUILDING_FIELDS``) stays with the
other rules.
"""

from __future__ import annotations

from typing import Any

from evb_operator.crd.live import ui_schema
from evb_operator.crd.output import output_schema
from evb_operator.crd.schema import _image, _integer, _number, _object, _spark_pod, _string

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
                default=1000,  # orderer.building.config.GlomConfig's (a test checks)
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
            "stages": _stages(),
            "ui": ui_schema(),
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


def _stages() -> dict[str, Any]:
    """``spec.spark.stages``: the user's analysis stages, a Python file in a ConfigMap."""
    return _object(
        "Analysis stages run on the built events (evb spark-job --stages): a Python file held"
        " in a ConfigMap of this namespace, which the Spark driver mounts read-only (the"
        " executors get the stages pickled, not the file). Unset: no stages. The ConfigMap is"
        " read when the driver starts: a change of its content reaches the job at its next"
        " submission (a run resumes only with the stages' graph it began with). Building.",
        {
            "configMap": _string(
                "Name of the ConfigMap (in the EventBuilder's namespace).",
                minLength=1,
                maxLength=253,
                pattern=OBJECT_NAME_PATTERN,
            ),
            "key": _string(
                "Key of the Python file in the ConfigMap: NAME.py, NAME a Python identifier"
                " (the module's name in the job; not one of the standard library's).",
                maxLength=253,
                pattern=STAGES_KEY_PATTERN,
            ),
        },
        required=["configMap", "key"],
    )
