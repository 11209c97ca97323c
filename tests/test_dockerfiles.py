"""Static checks that the Dockerfiles are consistent with the repository (``make images``
builds them and ``tests/system`` runs them; these run in ``make test``): every file they copy
exists and is not excluded by ``.dockerignore``, the final stage runs as an unprivileged user,
the paths the operator puts in its manifests (the ``evb`` command, the Spark job file) are the
ones the images provide, each image installs every package of its extra, pinned by
``constraints.txt``, with no layer of wheels, on a released Python, and the Spark image's
matplotlib writes where the pods can write."""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path
from typing import Any

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
    assert "'.[operator]'" in evb  # kopf and the operator in the same image as evb serve
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
    (download,) = [rest for keyword, rest in instructions if keyword == "RUN" and "curl -" in rest]
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


# ----------------------------------------------------------------------------- what is installed


def _stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (from one FROM to the next)."""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in _instructions(path):
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def _project() -> dict[str, Any]:
    import tomllib

    return dict(tomllib.loads((REPO / "pyproject.toml").read_text()))


def _names(requirements: list[str]) -> set[str]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _pip_installs(path: Path) -> set[str]:
    """The project names a Dockerfile's ``pip install`` commands install: evb itself (``.``,
    ``'.[extra]'``, ``evb[extra]``) with its dependencies and those extras, quoted requirements,
    and a ``-r`` file made in the same command by ``tools/extra_requirements.py``."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        from extra_requirements import extra_requirements
    finally:
        sys.path.remove(str(REPO / "tools"))
    project = _project()["project"]
    installed: set[str] = set()
    for keyword, rest in _instructions(path):
        if keyword != "RUN" or "pip install" not in rest:
            continue
        for command in re.split(r"&&|;", rest):
            generated = re.search(r"extra_requirements\.py (\S+)((?: --without \S+)*)", command)
            if generated:
                without = re.findall(r"--without (\S+)", generated.group(2))
                installed |= _names(extra_requirements(PYPROJECT, generated.group(1), without))
            if "pip install" not in command:
                continue
            for word in command.split("pip install", 1)[1].split():
                word = word.strip("'\"")
                project_ref = re.fullmatch(r"(?:\.|evb)(?:\[([\w,-]+)\])?", word)
                if project_ref:
                    installed |= _names(project["dependencies"])
                    for extra in filter(None, (project_ref.group(1) or "").split(",")):
                        installed |= _names(project["optional-dependencies"][extra])
                elif re.match(r"[A-Za-z][\w.-]*\s*(\[|[<>=!~]|$)", word) and word != "pip":
                    installed |= _names([word])
    return installed


PYPROJECT = REPO / "pyproject.toml"
PROVIDED_BY_THE_SPARK_BASE = {"pyspark"}
"""What the Spark image takes from its Spark base instead of pip: spark-submit puts the base's
own pyspark (/opt/spark/python/lib) on the PYTHONPATH, of the Spark the JVM runs."""


@pytest.mark.parametrize(("name", "extra"), [("Dockerfile", "operator"),
                                             ("Dockerfile.spark", "spark")])
def test_each_image_installs_every_package_of_its_extra(name: str, extra: str) -> None:
    """A package of the extra missing from the image builds fine and fails at run time: the
    Spark job crashed at the end of every run (ModuleNotFoundError: boost_histogram)."""
    project = _project()["project"]
    wanted = _names(project["dependencies"] + project["optional-dependencies"][extra])
    provided = PROVIDED_BY_THE_SPARK_BASE if extra == "spark" else set()
    missing = wanted - provided - _pip_installs(REPO / name)
    assert not missing, f"{name} does not install {sorted(missing)} of evb[{extra}]"
    if provided:
        assert not provided & _pip_installs(REPO / name), "installed twice"
        final = _stages(REPO / name)[-1]
        assert ("COPY", "--from=spark /opt/spark /opt/spark") in final


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_final_stage_keeps_no_layer_it_deletes(name: str) -> None:
    """``COPY`` then ``rm -rf`` in a later layer keeps the copied files in the image (the
    orderer image kept 100 MB of wheels): the final stage copies only what it keeps."""
    final = _stages(REPO / name)[-1]
    copied = [rest.split()[-1].rstrip("/") for keyword, rest in final if keyword == "COPY"]
    for keyword, rest in final:
        if keyword == "RUN":
            for removed in re.findall(r"rm -[a-z]*r[a-z]* ([^&;|]+)", rest):
                for target in removed.split():
                    assert target.rstrip("/*") not in copied, f"{name}: COPY {target} then rm"
    assert not any("wheel" in rest for keyword, rest in final if keyword in ("COPY", "RUN"))


def test_the_spark_image_runs_a_released_python() -> None:
    """Ubuntu jammy (the Spark base's distribution) has only a release candidate of Python 3.11
    (python3.11 3.11.0~rc1): the Spark image is built on the orderer's Python base, the same
    released Python, and installs no Python from the distribution."""
    for name in DOCKERFILES:
        stages = _stages(REPO / name)
        final_from = stages[-1][0][1].split()[0]
        assert final_from == "${PYTHON_IMAGE}", f"{name}'s final stage is FROM {final_from}"
        for stage in stages:
            for keyword, rest in stage:
                if keyword == "RUN" and "apt-get install" in rest:
                    assert not re.search(r"\bpython3(\.\d+)?(-venv|-dev)?\b", rest), rest
    assert _args(REPO / "Dockerfile.spark")["PYTHON_IMAGE"] == _args(REPO / "Dockerfile")[
        "PYTHON_IMAGE"
    ]
    assert re.fullmatch(r"python:3\.11\.?\d*-slim-\w+", _args(REPO / "Dockerfile")["PYTHON_IMAGE"])


def _env(path: Path) -> dict[str, str]:
    """The final stage's ``ENV NAME=value`` settings."""
    found = {}
    for keyword, rest in _stages(path)[-1]:
        if keyword == "ENV":
            for name, value in re.findall(r"(\w+)=(\S+)", rest):
                found[name] = value
    return found


def test_matplotlib_writes_its_config_where_the_spark_pods_can_write() -> None:
    """The Spark pods' root file system is read-only: matplotlib needs MPLCONFIGDIR on one of
    the writable volumes that the SparkApplication mounts (for its config and font cache)."""
    from evb_operator import constants, validation
    from evb_operator.specs import spark as specs_spark

    valid = validation.validate({"spark": {"dt": 100, "output": {"path": "s3a://bucket/run"}}})
    app = specs_spark.build_sparkapplication_spec(
        "eb", "ns", valid, default_image=constants.DEFAULT_SPARK_IMAGE
    )
    driver = app["spec"]["driver"]
    assert driver["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in driver["volumeMounts"] if not m.get("readOnly")]
    directory = _env(REPO / "Dockerfile.spark").get("MPLCONFIGDIR")
    assert directory is not None, "Dockerfile.spark sets no MPLCONFIGDIR"
    assert any(directory.startswith(path.rstrip("/") + "/") for path in writable), (directory,
                                                                                 writable)


# ----------------------------------------------------------------------------- pinned versions


def _constraints() -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_requirement_is_pinned_within_its_bounds() -> None:
    """Without pins two builds of the same commit differ (numpy, protobuf, pyarrow, grpcio,
    kopf and kubernetes all moved between two builds): constraints.txt pins every requirement
    of pyproject.toml (dependencies, every extra, the build requirements) to a version that
    its bounds allow (tools/refresh_constraints.py writes it)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = _project()
    requirements = [
        *project["project"]["dependencies"],
        *(r for extra in project["project"]["optional-dependencies"].values() for r in extra),
        *project["build-system"]["requires"],
    ]
    pins = _constraints()
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"constraints.txt does not pin {name} ({text})"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {text}"
        )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_images_install_with_the_constraints(name: str) -> None:
    """Every pip install of an image uses constraints.txt, for the isolated build of evb too
    (PIP_CONSTRAINT, which pip applies to build requirements; ``-c`` is not)."""
    installs = [rest for keyword, rest in _instructions(REPO / name)
                if keyword == "RUN" and "pip install" in rest]
    assert installs
    for rest in installs:
        assert "PIP_CONSTRAINT=/src/constraints.txt" in rest, rest
    copies = [rest for keyword, rest in _instructions(REPO / name) if keyword == "COPY"]
    assert any(rest.split()[0] == "constraints.txt" for rest in copies)


def test_make_installs_with_the_constraints() -> None:
    """CI's environment (make's install) is pinned by the same file as the images."""
    makefile = (REPO / "Makefile").read_text()
    stamp = re.search(r"^\$\(STAMP\):(.*?)\n\n", makefile, re.M | re.S)
    assert stamp is not None
    assert "constraints.txt" in stamp.group(1).splitlines()[0]  # a new pin reinstalls
    installs = [line for line in stamp.group(1).splitlines() if "--editable" in line]
    assert installs and all("--constraint constraints.txt" in line for line in installs)


def test_the_s3a_jars_are_kept_by_default_and_left_out_only_when_asked() -> None:
    """S3A_JARS=no builds the Spark image without Maven Central (the system tests here); the
    default, a real build, keeps them, and another value is refused, not taken for no."""
    args = _args(REPO / "Dockerfile.spark")
    assert args["S3A_JARS"] == "yes"
    (download,) = [rest for keyword, rest in _instructions(REPO / "Dockerfile.spark")
                   if keyword == "RUN" and "curl -fsSLO" in rest]
    assert re.search(r'case "\$\{S3A_JARS\}" in\s+yes\) ;;\s+no\)', download)
    assert re.search(r"\*\).*exit 1 ;;\s+esac", download)
