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


HADOOP_AWS_BUILT_AGAINST = {
    "3.5.0": {"AWS_SDK_VERSION": "2.35.4", "ANALYTICS_ACCELERATOR_VERSION": "1.3.1"},
}
"""What hadoop-aws of a Hadoop version is built against, from that version's
``hadoop-project-X.pom`` on Maven Central (``aws-java-sdk-v2.version``,
``amazon-s3-analyticsaccelerator-s3.version``). A pyspark bundling another Hadoop needs its line
here, and Dockerfile.spark its jars and checksums."""


def _args(path: Path) -> dict[str, str]:
    """The ``ARG NAME=default`` values of a Dockerfile."""
    found = {}
    for keyword, rest in _instructions(path):
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            found[name.strip()] = value.strip()
    return found


def _pyspark() -> tuple[str, str]:
    """The installed pyspark's version and the Hadoop version its jars bundle."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    (client,) = [p.name for p in jars.glob("hadoop-client-api-*.jar")]
    return pyspark.__version__, client.removeprefix("hadoop-client-api-").removesuffix(".jar")


def test_the_s3a_jars_match_the_spark_and_hadoop_of_the_pinned_pyspark() -> None:
    """hadoop-aws must be exactly the Hadoop of the Spark in the image, and the AWS SDK the one
    that hadoop-aws is built against: a mismatch builds fine and fails at the first s3a:// write
    (NoSuchMethodError)."""
    import tomllib

    from packaging.requirements import Requirement

    from evb_operator import crd

    spark_version, hadoop_version = _pyspark()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    spark_extra = [Requirement(d) for d in project["optional-dependencies"]["spark"]]
    (pin,) = [r for r in spark_extra if r.name == "pyspark"]
    assert pin.specifier.contains(spark_version), f"pyspark {spark_version} is not {pin}"
    args = _args(REPO / "Dockerfile.spark")
    image = re.fullmatch(r"apache/spark:(\d+\.\d+\.\d+)-.*", args["SPARK_IMAGE"])
    assert image is not None, args["SPARK_IMAGE"]
    assert image.group(1) == spark_version, "the image's Spark is not the pinned pyspark's"
    spark_version_field = crd.SPEC_SCHEMA["properties"]["spark"]["properties"]["sparkVersion"]
    assert spark_version_field["default"] == spark_version
    assert args["HADOOP_VERSION"] == hadoop_version, f"Spark {spark_version} has {hadoop_version}"
    built_against = HADOOP_AWS_BUILT_AGAINST[hadoop_version]
    assert {name: args[name] for name in built_against} == built_against


def test_the_s3a_jars_are_checked_downloaded_at_build_and_on_sparks_class_path() -> None:
    instructions = _instructions(REPO / "Dockerfile.spark")
    args = _args(REPO / "Dockerfile.spark")
    (download,) = [rest for keyword, rest in instructions if keyword == "RUN" and "curl" in rest]
    urls = re.findall(r'curl -fsSLO "([^"]+)"', download)
    jars = [url.rsplit("/", 1)[1] for url in urls]
    assert jars == [
        "hadoop-aws-${HADOOP_VERSION}.jar",
        "bundle-${AWS_SDK_VERSION}.jar",
        "analyticsaccelerator-s3-${ANALYTICS_ACCELERATOR_VERSION}.jar",
    ]
    assert all(url.startswith("${MAVEN_CENTRAL}/") for url in urls)
    assert args["MAVEN_CENTRAL"].startswith("https://")
    checked = re.findall(r'\b([0-9a-f]{40}) "([^"]+)"', download)
    assert [jar for _, jar in checked] == jars  # one SHA-1 per jar ...
    assert download.rstrip().endswith("| sha1sum --check --strict")  # ... and a failing check
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    final = instructions[last_from:]
    assert ("COPY", "--from=build /opt/evb/jars/ /opt/spark/jars/") in final
    assert not any("curl" in rest or "wget" in rest for _, rest in final)  # none at run time
