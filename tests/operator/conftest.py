"""Fixtures of the operator tests: the package importable from a plain checkout, the example
EventBuilders, and validators for Kubernetes objects (kubernetes-validate, k8s 1.32) and for the
SparkApplication CRD of the Kubeflow Spark operator, kept with its descriptions stripped in
``tests/data/schemas/sparkapplication-v1beta2.yaml`` (its header says where it came from)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from orderer.config import OrdererConfig
from orderer.stats import BarrierCounts, RunSpan, SourceStats, Stats

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "operator") not in sys.path:  # installed packages win; a plain checkout works too
    sys.path.append(str(REPO / "operator"))

SPARK_CRD = REPO / "tests" / "data" / "schemas" / "sparkapplication-v1beta2.yaml"
EXAMPLES = REPO / "manifests" / "examples"
KUBERNETES_VERSION = "1.32"


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def load_example(path: Path) -> dict[str, Any]:
    """The EventBuilder of an example file (a file may also hold the objects it needs, such as
    the quickstart's volume claim: :func:`example_companions`)."""
    (builder,) = [
        doc for doc in yaml.safe_load_all(path.read_text()) if doc["kind"] == "EventBuilder"
    ]
    return builder


def example_companions(path: Path) -> list[dict[str, Any]]:
    """The other objects of an example file (built-in kinds)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc["kind"] != "EventBuilder"]


def stats_answer(
    *,
    totals: Mapping[str, int] | None = None,
    missing: Mapping[int, int] | None = None,
    **changes: Any,
) -> Stats:
    """A GetStats answer (:class:`orderer.stats.Stats`, as ``orderer.client.get_stats``
    returns it): sources 1 (alive) and 2 (dead and paused), 100 fragments received, 90
    emitted, 3 late, 2 complete homogeneous barriers, ``build_window`` 5 s, no wall time.

    ``totals`` are the counters of source 1 (the totals sum the sources); ``missing`` the
    barriers each source missed (a source not there yet is added); the other ``changes``
    replace fields of the answer."""
    counters = {"received": 100, "emitted": 90, "late": 3} if totals is None else totals
    sources = {
        1: replace(SourceStats(source=1), **counters),
        2: SourceStats(source=2, dead=True, paused=True),
    }
    for source, count in (missing or {}).items():
        sources[source] = replace(sources.get(source, SourceStats(source=source)), missing=count)
    stats = Stats(
        sources=dict(sorted(sources.items())),
        barriers=BarrierCounts(complete=2, homogeneous=2, by_type={}),
        next_offset=90,
        high_water_mark=2**63 + 5,
        queued=10,
        now=0.0,
        wall_time=0.0,
        run_ended=False,
        run=1,
        run_start_offset=0,
        runs=(RunSpan(1, 0),),
        config=OrdererConfig(build_window=5.0),
        consumers={},
    )
    return replace(stats, **changes)


POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""What the StatefulSet controller labels each of its pods with: its ordinal (Kubernetes 1.28+)."""
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_LABEL_PATH = re.compile(r"^metadata\.labels\['([^']+)'\]$")


def pod_of(statefulset: Mapping[str, Any], ordinal: int) -> dict[str, Any]:
    """Pod ``ordinal`` of a StatefulSet as its controller would create it: the template, named
    ``NAME-ordinal``, with the ordinal's label (what the kubelet's downward API reads)."""
    template = statefulset["spec"]["template"]
    labels = {**template["metadata"]["labels"], POD_INDEX_LABEL: str(ordinal)}
    name = f"{statefulset['metadata']['name']}-{ordinal}"
    return {"metadata": {"name": name, "labels": labels}, "spec": template["spec"]}


def kubelet_args(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """The container's arguments as the kubelet passes them: each ``$(VAR)`` of a variable the
    container defines replaced by its value (a literal, or a label of the pod through the
    downward API); a reference to no variable stays as written, as the kubelet leaves it."""
    values: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            values[variable["name"]] = str(variable["value"])
            continue
        path = variable["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
        label = _LABEL_PATH.match(path)
        if label is not None:
            values[variable["name"]] = pod["metadata"]["labels"].get(label.group(1), "")
    return [
        _REFERENCE.sub(lambda m: values.get(m.group(1), m.group(0)), str(arg))
        for arg in container["args"]
    ]


def validate_builtin(obj: dict[str, Any]) -> None:
    """Validate a built-in kind against the Kubernetes 1.32 schema, strictly (no unknown
    fields)."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = "/".join(str(p) for p in error.path)
        raise AssertionError(f"{obj['kind']} {where}: {error.message}") from None


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would prune: a structural schema does not reject unknown fields,
    it drops them silently, so a typo would pass a plain JSON-schema validation."""
    found: list[str] = []
    if isinstance(obj, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return found
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if properties is not None and key in properties:
                found += unknown_fields(value, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, f"{path}.{key}")
            elif properties is not None and not (path == "" and key in ("apiVersion", "kind")):
                found.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


def _spark_validator() -> Any:
    import jsonschema

    if not SPARK_CRD.is_file():
        raise RuntimeError(f"the SparkApplication CRD is missing from {SPARK_CRD}")
    crd = yaml.safe_load(SPARK_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    return jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="session")
def validate_spark() -> Callable[[dict[str, Any]], None]:
    """Validate a SparkApplication against the Kubeflow Spark operator's published schema."""
    validator = _spark_validator()

    def validate(obj: dict[str, Any]) -> None:
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
        assert not errors, [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors]
        unknown = [
            p for p in unknown_fields(obj, validator.schema) if not p.startswith(".metadata")
        ]
        assert not unknown, f"fields the API server would drop: {unknown}"

    return validate
