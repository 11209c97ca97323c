"""``tools/strip_crd_descriptions.py`` and the SparkApplication CRD it produced for the operator
tests (``tests/data/schemas/sparkapplication-v1beta2.yaml``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "strip_crd_descriptions.py"
SPARK_CRD = REPO / "tests" / "data" / "schemas" / "sparkapplication-v1beta2.yaml"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("strip_crd_descriptions", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.org"},
    "spec": {
        "versions": [
            {
                "name": "v1",
                "schema": {
                    "openAPIV3Schema": {
                        "description": "A thing.",
                        "type": "object",
                        "properties": {
                            # a field *named* description: its schema stays, its prose goes
                            "description": {"description": "Free text.", "type": "string"},
                            "size": {"description": "How big.", "type": "integer", "minimum": 1},
                            "tags": {"type": "array", "items": {"description": "A tag."}},
                        },
                    }
                },
            }
        ]
    },
}


def test_strips_every_description_and_nothing_else() -> None:
    schema = _tool().strip_descriptions(SAMPLE)["spec"]["versions"][0]["schema"]
    assert schema["openAPIV3Schema"] == {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "size": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {}},
        },
    }
    assert SAMPLE["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] == "A thing."


def test_writes_the_origin_as_a_header(tmp_path: Path) -> None:
    source, output = tmp_path / "crd.yaml", tmp_path / "out" / "stripped.yaml"
    source.write_text(yaml.safe_dump(SAMPLE))
    done = subprocess.run(
        [sys.executable, str(TOOL), str(source), "--output", str(output),
         "--origin", "From the example project, commit abc123.", "--origin", ""],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = output.read_text()
    assert text.startswith("# From the example project, commit abc123.\n#\n# Every `description`")
    assert yaml.safe_load(text) == _tool().strip_descriptions(SAMPLE)


def test_bad_input_is_named_without_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: CustomResourceDefinition\nspec: [unclosed\n")
    other = tmp_path / "other.yaml"
    other.write_text("kind: ConfigMap\n")
    for path, message in [
        (tmp_path / "absent.yaml", f"error: {tmp_path / 'absent.yaml'}: cannot be read"),
        (broken, f"error: {broken}:3:1: not valid YAML"),
        (other, f"error: {other}: not a CustomResourceDefinition"),
    ]:
        done = subprocess.run(
            [sys.executable, str(TOOL), str(path)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 2, done
        assert done.stderr.startswith(message), done.stderr
        assert "Traceback" not in done.stderr


def test_the_kept_spark_crd_is_the_stripped_v1beta2_schema_with_its_origin() -> None:
    text = SPARK_CRD.read_text()
    header = text.split("\n---\n", 1)[0]
    assert "kubeflow/spark-operator" in header and "commit 38082f3" in header, header
    assert "Every `description` was removed by tools/strip_crd_descriptions.py" in header
    crd = yaml.safe_load(text)
    assert crd["spec"]["names"]["kind"] == "SparkApplication"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta2"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"driver", "executor", "mainApplicationFile", "sparkVersion"} <= set(spec["properties"])
    assert crd == _tool().strip_descriptions(crd)
    assert '"description": "' not in json.dumps(crd)
