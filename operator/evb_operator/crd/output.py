"""The Spark job's output in the ``EventBuilder`` spec (``spec.spark.output``): where the built
events go, and the volume a local output needs in the cluster, with their CEL rules.

Why a local output (``file:///events``, or a bare path) needs ``volumeClaim``: the driver and
the executors run in pods whose root filesystem is read-only and whose only writable place is an
``emptyDir``; events written there are lost with the pod, and each executor writes its own
partitions into its own pod. A user who writes ``file://`` expects the events to be somewhere
afterwards, so such a spec is refused unless it names a PersistentVolumeClaim, which the
operator mounts at the output path in the driver and every executor (several nodes need a
ReadWriteMany claim). Object storage (``s3a://``) and the other Hadoop file systems need none.
The SparkApplication gets the volume and its mounts at :func:`mount_path`
(:func:`evb_operator.specs.spark.output_volume`).
"""

from __future__ import annotations

import re
from typing import Any

from evb_operator.crd.schema import Rule, _object, _string
from evb_operator.crd.texts import described

__all__ = ["OUTPUT_RULES", "is_local", "mount_path", "output_schema"]

_SCHEME = r"^[a-zA-Z][a-zA-Z0-9+.-]*:"
"""A Hadoop path with a scheme (``s3a:``, ``hdfs:``, ``file:``)."""
_ABSOLUTE = r"^(file://|file:)?/[^/]"
"""A local absolute path: ``file:///events``, ``file:/events`` or ``/events`` (not
``file://host/...``: a mount has no host)."""


def is_local(path: str) -> bool:
    """Whether ``path`` is on the pod's own file system: ``file:`` or no scheme at all."""
    return path.startswith("file:") or re.match(_SCHEME, path) is None


def mount_path(path: str) -> str:
    """The directory a local absolute ``path`` names, where its volume is mounted."""
    local = path.removeprefix("file://").removeprefix("file:")
    return "/" + local.strip("/")


def output_schema() -> dict[str, Any]:
    """``spec.spark.output``, its descriptions its fields' texts (:mod:`evb_operator.crd.texts`)."""
    return _object(
        described("spark.output"),
        {
            "path": _string(described("spark.output.path"), minLength=1),
            "format": _string(
                described("spark.output.format"),
                enum=["parquet", "json", "nscldaq"],
                default="parquet",
            ),
            "volumeClaim": _string(described("spark.output.volumeClaim"), minLength=1),
        },
        required=["path"],
    )


OUTPUT_RULES: tuple[Rule, ...] = (
    Rule(
        path=("spark", "output"),
        cel=f"has(self.volumeClaim) || (self.path.matches('{_SCHEME}')"
        " && !self.path.startsWith('file:'))",
        message="a local output.path (file:// or a bare path) needs output.volumeClaim: in the"
        " cluster the driver and the executors would write the events into their own pods, and"
        " they would be lost with them; name a PersistentVolumeClaim to mount there, or write"
        " to object storage (s3a://)",
        check=lambda output: "volumeClaim" in output or not is_local(str(output["path"])),
        field_path=".volumeClaim",
    ),
    Rule(
        path=("spark", "output"),
        cel=f"!has(self.volumeClaim) || self.path.matches('{_ABSOLUTE}')",
        message="output.volumeClaim is mounted at output.path: give an absolute local path"
        " (file:///events or /events)",
        check=lambda output: "volumeClaim" not in output
        or re.match(_ABSOLUTE, str(output["path"])) is not None,
        field_path=".path",
    ),
)
"""The rules of ``spec.spark.output`` (``crd.RULES`` holds them with the others)."""

