"""What ``evb spark-job`` refuses before it starts Spark (a JVM start is seconds, and its
failure hundreds of lines): every mistake in its configuration that can be seen without Spark,
as a ConfigError naming the flag (:func:`check_arguments`), and a missing or old Java
(:func:`java_problem`). :func:`glom_config` is the event building the flags ask for.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

from orderer.building.config import GlomConfig
from orderer.building.glom import EVENT_SCHEMA
from orderer.errors import ConfigError
from orderer.job_config import JobConfig
from orderer.spark.driver import runs
from orderer.spark.live.page import parse_address
from orderer.spark.output import files
from orderer.spark.output.layout import RUN_NAME
from orderer.spark.output.nscldaq import check_glom_source_id
from orderer.spark.source.sliced_reads import check_data_dirs, several
from orderer.stages.load import load_stages
from orderer.stages.plan import Plan, plan

__all__ = [
    "JAVA_RELEASE",
    "check_arguments",
    "check_page_names",
    "glom_config",
    "java_problem",
    "stages_plan",
]

_URL_SAFE = re.compile(r"[A-Za-z0-9_.-]+")

JAVA_RELEASE = 17
"""The Java release Spark 4 needs at least."""


def glom_config(config: JobConfig) -> GlomConfig:
    """The glom configuration of the flags; a bad value names its flag."""
    if config.max_fragments < 0:  # glom's --maxfragments: 0 is one fragment per event
        raise ConfigError("--max-fragments", config.max_fragments, "must be an integer >= 0")
    if config.no_build:
        return GlomConfig(None, config.max_fragments, config.timestamp_policy)
    if config.dt is None:
        raise ConfigError("--dt", None, "is required (or --no-build)")
    if not 0 <= config.dt < 2**63:
        raise ConfigError("--dt", config.dt, "must be an integer number of ticks >= 0")
    return GlomConfig(config.dt, config.max_fragments, config.timestamp_policy)


def stages_plan(config: JobConfig) -> Plan | None:
    """The plan of ``--stages`` (None without): the user's module loaded and its stages
    planned over the built events, a problem a ConfigError naming the file or the stage. Not a
    part of :func:`check_arguments`: it runs the user's module, which the job does once."""
    if config.stages is None:
        if config.explain:
            raise ConfigError("--explain", None, "explains the --stages: give them")
        if config.check_order:
            raise ConfigError("--check-order", None, "checks the --stages: give them")
        return None
    planned = plan(load_stages(config.stages), EVENT_SCHEMA)
    if config.ui is not None:
        check_page_names(planned)
    return planned


def check_page_names(planned: Plan) -> None:
    """``--ui``: each declared histogram's column is a part of its page address, so it may hold
    only letters, digits, ``_``, ``.`` and ``-`` (two names made alike would show as one)."""
    for step in planned.stages:
        for histogram in step.stage.histograms:
            unsafe = [c for c in histogram.columns if not _URL_SAFE.fullmatch(c)]
            if unsafe:
                raise ConfigError(
                    "--ui", f"stage {step.stage.name}: histogram of {unsafe[0]!r}",
                    "the live page names a histogram by its column, which may hold only letters,"
                    " digits, _ . and -: rename the column",
                )  # fmt: skip


def _check_writable(flag: str, uri: str) -> None:
    """A local output location must be a directory, or creatable where it would be."""
    local = files.local(uri)
    if local is None:
        return  # a Hadoop URI: its file system says, once Spark runs
    if local.exists() and not local.is_dir():
        raise ConfigError(flag, uri, "exists and is not a directory")
    parent = local
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(flag, uri, f"cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(flag, uri, f"cannot be written: {parent} is not writable")


def check_arguments(config: JobConfig) -> None:
    """Every mistake in the flags that can be seen without Spark, as a ConfigError naming the
    flag: the job refuses them before it spends seconds starting a JVM."""
    from orderer.spark.source.access import segment_files

    glom_config(config)
    check_glom_source_id(config.glom_source_id)
    runs.check_arguments(config)
    if config.ui is not None:
        if config.check_order or config.explain:
            raise ConfigError("--ui", config.ui, "shows a run: not with --check-order or --explain")
        parse_address(config.ui)
    if config.run is not None and not RUN_NAME.fullmatch(config.run):
        raise ConfigError(
            "--run", config.run, "must be letters, digits, '.', '_' or '-', starting with a "
            "letter or a digit (it names directories)"
        )
    for flag, value, low in (
        ("--partitions", config.partitions, 1),
        ("--max-fragments-per-trigger", config.max_fragments_per_trigger, 1),
    ):
        if value is not None and value < low:
            raise ConfigError(flag, value, f"must be an integer >= {low}")
    for flag, number, positive in (
        ("--trigger-seconds", config.trigger_seconds, False),
        ("--tick-rate", config.tick_rate, True),
        ("--poll", config.poll, True),
        ("--connect-timeout", config.connect_timeout, True),
    ):
        if not math.isfinite(number) or not (number > 0 if positive else number >= 0):
            raise ConfigError(flag, number, "must be a number " + ("> 0" if positive else ">= 0"))
    paths = several(config.path, "--path")
    targets = several(config.target, "--target")
    if paths is not None or targets is not None:  # a run over several orderers
        _check_several(config, paths, targets)
    elif config.path is not None:
        path = Path(config.path)
        if not path.exists():
            raise ConfigError("--path", str(path), "does not exist")
        if not path.is_dir():
            raise ConfigError("--path", str(path), "is not a directory")
        try:
            segment_files(path)
        except ConfigError:
            raise ConfigError(
                "--path", str(path), "is not an evb data directory: it holds no ordered log "
                "(ordered/ordered-*.arrow, as evb serve --data-dir writes)"
            ) from None
    for target in targets or ([] if config.target is None else [config.target]):
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("--target", target, "must be HOST:PORT")
    if not config.output.strip():
        raise ConfigError("--output", config.output, "must name a directory or a Hadoop URI")
    _check_writable("--output", config.output)
    if config.checkpoint:
        _check_writable("--checkpoint", config.checkpoint)
    for flag, file in (
        ("--tls-ca", config.tls_ca),
        ("--tls-cert", config.tls_cert),
        ("--tls-key", config.tls_key),
        ("--token-file", config.token_file),
    ):
        if file and not os.access(file, os.R_OK):
            raise ConfigError(flag, str(file), "is not a readable file")


def _check_several(
    config: JobConfig, paths: list[str] | None, targets: list[str] | None
) -> None:
    """A run over several orderers (``--target a,b,c``, ``--path d0,d1,d2``): what the job
    does not do over several yet, and (without the network) the data directories' roles."""
    flag = "--path" if paths is not None else "--target"
    if config.check_order:
        raise ConfigError("--check-order", None, f"is not done over several orderers yet: give "
                          f"{flag} one orderer")
    if paths is not None:
        for name in paths:
            if not Path(name).is_dir():
                raise ConfigError("--path", name, "does not exist or is not a directory")
        check_data_dirs(paths)


def java_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why Spark could not start its JVM here (no Java, or one older than Spark needs), or
    None. Spark finds Java the same way: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit started this: its JVM runs
        return None
    how = (
        f"Spark needs Java {JAVA_RELEASE} or later: install it (e.g. apt-get install "
        f"openjdk-{JAVA_RELEASE}-jre-headless) and put its java on the PATH, or set JAVA_HOME "
        f"to its directory (e.g. JAVA_HOME=/usr/lib/jvm/java-{JAVA_RELEASE}-openjdk-amd64)"
    )
    home = environ.get("JAVA_HOME")
    if home:
        java = str(Path(home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME={home} has no bin/java; {how}"
    else:
        found = shutil.which("java", path=environ.get("PATH", os.defpath))
        if found is None:
            return f"no Java found (java is not on the PATH and JAVA_HOME is not set); {how}"
        java = found
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=environ
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{java} -version failed ({error}); {how}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    if match is None:
        return None  # an unusual banner: let Spark try
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    if major < JAVA_RELEASE:
        return f"{java} is Java {major}; {how}"
    return None
