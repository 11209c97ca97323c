"""checkov, the static checks the field runs on Kubernetes objects and Dockerfiles, passes on
everything evb ships or generates: the chart rendered with its defaults (``manifests/``) and with
every option on, the children the operator builds for each example EventBuilder, and both
Dockerfiles. No check fails; a check that does not apply is skipped where the object is made
(``checkov.io/skipN`` annotations, ``# checkov:skip=`` comments), always with its reason.

checkov lives in ``.venv-tools`` (``make test`` creates it): it pins versions of packages that
evb's own environment must not be forced to.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from evb_operator import specs, validation
from tests.operator.conftest import REPO
from tests.operator.test_chart_observability import ALL_ON, MONITORING, render

CHECKOV = Path(os.environ.get("EVB_CHECKOV", REPO / ".venv-tools" / "bin" / "checkov"))
EXAMPLES = REPO / "manifests" / "examples"


def _checkov(*args: str) -> list[dict[str, Any]]:
    """checkov's JSON report, one entry per framework; offline (no guideline download)."""
    if not CHECKOV.exists():
        pytest.fail(f"checkov is not installed at {CHECKOV}: run `make test` (it creates it)")
    result = subprocess.run(
        [str(CHECKOV), "--quiet", "--compact", "--skip-download", "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )
    assert result.stdout.strip(), result.stderr[-2000:]
    # one JSON document per directory or file group, one after the other
    reports: list[dict[str, Any]] = []
    decoder, text, at = json.JSONDecoder(), result.stdout, 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        value, at = decoder.raw_decode(text, at)
        reports += value if isinstance(value, list) else [value]
    return reports


def _failed(reports: list[dict[str, Any]]) -> list[str]:
    return [
        f"{check['check_id']} ({check['check_name']}) {check['resource']} in "
        f"{check['file_path']}"
        for report in reports
        if "results" in report
        for check in report["results"].get("failed_checks", [])
    ]


def _skipped(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        check
        for report in reports
        if "results" in report
        for check in report["results"].get("skipped_checks", [])
    ]


def _children_of_the_examples() -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = []
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(example.read_text()):
            if not document or document.get("kind") != "EventBuilder":
                continue
            valid = validation.validate(document["spec"])
            children += specs.build_children(
                document["metadata"]["name"],
                "evb-runs",
                valid,
                orderer_image="evb:0.1.0",
                spark_image="evb-spark:0.1.0",
            )
    return children


def _assert_clean(reports: list[dict[str, Any]]) -> None:
    failed = _failed(reports)
    assert not failed, "checkov failed:\n" + "\n".join(failed)
    for check in _skipped(reports):
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        assert reason and reason != "No comment provided", (
            f"{check['check_id']} is skipped for {check['resource']} without a reason"
        )


def test_the_chart_and_the_generated_objects_pass(tmp_path: Path) -> None:
    (tmp_path / "chart-all-options.yaml").write_text(
        yaml.safe_dump_all(render(ALL_ON, [MONITORING]))
    )
    children = _children_of_the_examples()
    assert {"StatefulSet", "SparkApplication", "NetworkPolicy"} <= {c["kind"] for c in children}
    (tmp_path / "children.yaml").write_text(yaml.safe_dump_all(children))
    reports = _checkov("--framework", "kubernetes", "-d", str(tmp_path))
    reports += _checkov("--framework", "kubernetes", "-d", str(REPO / "manifests"))
    passed = sum(r["summary"]["passed"] for r in reports if "summary" in r)
    assert passed > 100, reports
    _assert_clean(reports)


def test_the_dockerfiles_pass() -> None:
    reports = _checkov(
        "--framework", "dockerfile", "-f", str(REPO / "Dockerfile"), "-f",
        str(REPO / "Dockerfile.spark"),
    )
    assert sum(r["summary"]["passed"] for r in reports if "summary" in r) > 10, reports
    _assert_clean(reports)


def test_checkov_does_fail_what_it_should(tmp_path: Path) -> None:
    """A control: a privileged pod without probes or limits is refused, so a clean report above
    means something."""
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "bad", "namespace": "default"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x:latest", "securityContext": {"privileged": True}}
                    ]
                },
            }
        )
    )
    failed = _failed(_checkov("--framework", "kubernetes", "-d", str(tmp_path)))
    assert any("CKV_K8S_16" in line for line in failed), failed  # privileged container
