"""The images cannot be built here (no Docker); a static check that the Dockerfiles are
consistent with the repository: every file they copy exists and is not excluded by
``.dockerignore``, the final stage runs as an unprivileged user, and the paths the operator
puts in its manifests (the ``evb`` command, the Spark job file) are the ones the images
provide."""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO / "operator"))

DOCKERFILES = ["Dockerfile", "Dockerfile.spark"]


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _ignored(relative: str) -> bool:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(
        fnmatch.fnmatch(relative.rstrip("/"), p) or relative.startswith(p.rstrip("/") + "/")
        for p in patterns
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_copied_file_is_in_the_build_context(name: str) -> None:
    copies = [rest for keyword, rest in _instructions(REPO / name) if keyword == "COPY"]
    assert copies
    for rest in copies:
        if rest.startswith("--from"):
            continue
        *sources, _ = rest.split()
        for source in sources:
            assert (REPO / source).exists(), f"{name}: COPY {source}: no such file"
            assert not _ignored(source), f"{name}: COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_final_stage_is_unprivileged(name: str) -> None:
    instructions = _instructions(REPO / name)
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    users = [rest for keyword, rest in instructions[last_from:] if keyword == "USER"]
    assert users, f"{name}: the final stage runs as root"
    assert users[-1].split(":")[0] not in ("0", "root")


def test_the_images_provide_what_the_manifests_use() -> None:
    from evb_operator import constants

    evb = (REPO / "Dockerfile").read_text()
    assert "python:3.11-slim" in evb
    assert "evb[operator]" in evb  # kopf and the operator in the same image as evb serve
    assert 'ENTRYPOINT ["evb"]' in evb
    spark = (REPO / "Dockerfile.spark").read_text()
    job = constants.SPARK_JOB_FILE.removeprefix("local://")
    assert job.startswith("/opt/evb/orderer/")
    assert "/opt/evb/orderer" in spark  # the installed orderer package, linked there
    assert re.search(r"^FROM \$\{SPARK_IMAGE\}", spark, re.M)
    assert "apache/spark" in spark
    assert "PYSPARK_PYTHON=/opt/evb/venv/bin/python" in spark
