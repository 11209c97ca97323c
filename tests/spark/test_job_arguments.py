"""``evb spark-job`` refuses what it can see is wrong before it starts Spark (a JVM start is
seconds, and its failure hundreds of lines): a missing or foreign ``--path``, a nonsensical
number, a run name that cannot name a directory, an output that cannot be written, no Java or an
old one. Exit status 2 and one line naming the flag (or saying what to install), no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from orderer.spark.driver import checks, job
from tests.spark.logdata import write_ordered_log
from tests.spark.oracle import random_stream


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ordered_log(tmp_path_factory.mktemp("data"), random_stream(1, 50))


def _cases(data: Path, tmp: Path) -> list[tuple[list[str], str]]:
    a_file = tmp / "a-file"
    a_file.write_text("x")
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    path = ["--path", str(data), "--output", str(tmp / "out")]
    return [
        (["--path", "/nonexistent", "--dt", "1", "--output", "o"], "--path: does not exist"),
        (["--path", str(a_file), "--dt", "1", "--output", "o"], "--path: is not a directory"),
        (["--path", str(empty), "--dt", "1", "--output", "o"], "--path: is not an evb data dir"),
        ([*path], "--dt: is required"),
        ([*path, "--dt", "-1"], "--dt: must be an integer number of ticks >= 0"),
        ([*path, "--dt", "5", "--max-fragments", "-1"], "--max-fragments: must be an integer >= 0"),
        ([*path, "--no-build", "--max-fragments", "-3"], "--max-fragments: must be"),
        ([*path, "--dt", "5", "--partitions", "0"], "--partitions: must be an integer >= 1"),
        ([*path, "--dt", "5", "--max-fragments-per-trigger", "0"],
         "--max-fragments-per-trigger: must"),
        ([*path, "--dt", "5", "--tick-rate", "0"], "--tick-rate: must be a number > 0"),
        ([*path, "--dt", "5", "--poll", "-1"], "--poll: must be a number > 0"),
        ([*path, "--dt", "5", "--trigger-seconds", "nan"], "--trigger-seconds: must be a number"),
        ([*path, "--dt", "5", "--run", "../up"], "--run: must be letters, digits"),
        ([*path, "--dt", "5", "--run", "a b"], "--run: must be"),
        (["--path", str(data), "--dt", "5", "--output", str(a_file)],
         "--output: exists and is not a directory"),
        (["--path", str(data), "--dt", "5", "--output", str(a_file / "out")],
         "--output: cannot be created"),
        (["--target", "orderer", "--dt", "5", "--output", "o"], "--target: must be HOST:PORT"),
        (["--target", "h:99999", "--dt", "5", "--output", "o"], "--target: must be HOST:PORT"),
        ([*path, "--dt", "5", "--tls-ca", str(tmp / "missing.crt")],
         "--tls-ca: is not a readable file"),
        ([*path, "--dt", "5", "--connect-timeout", "0"], "--connect-timeout: must be a number > 0"),
    ]


def test_bad_flags_are_refused_in_one_line_naming_the_flag(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, message in _cases(data_dir, tmp_path):
        started = time.monotonic()
        assert job.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("evb spark-job: ") and err.count("\n") == 1, err
        assert err.startswith(f"evb spark-job: {message}"), (argv, err)
        assert time.monotonic() - started < 2.0  # refused before any JVM


def _run(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "orderer.cli", "spark-job", *argv],
        capture_output=True, text=True, timeout=300, env=env,
    )
    return done, time.monotonic() - started


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def test_a_path_that_does_not_exist_is_refused_at_once(tmp_path: Path) -> None:
    done, seconds = _run(["--path", "/nonexistent", "--dt", "1000", "--output",
                          str(tmp_path / "o")], _env())
    assert done.returncode == 2
    assert done.stderr == "evb spark-job: --path: does not exist (got '/nonexistent')\n"
    assert done.stdout == ""
    assert seconds < 10  # no JVM: starting one alone takes longer here
    assert not (tmp_path / "o").exists()


def test_without_java_it_says_that_java_17_is_needed_and_how_to_point_at_it(
    data_dir: Path, tmp_path: Path
) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    old_java = tmp_path / "jdk11" / "bin"
    old_java.mkdir(parents=True)
    (old_java / "java").write_text(
        '#!/bin/sh\necho \'openjdk version "11.0.21" 2023-10-17\' >&2\n'
    )
    (old_java / "java").chmod(0o755)
    argv = ["--path", str(data_dir), "--dt", "1000", "--output", str(tmp_path / "o")]
    for env, expected in (
        (_env(JAVA_HOME=None, PATH=str(no_java)), "no Java found (java is not on the PATH"),
        (_env(JAVA_HOME=str(tmp_path / "nowhere")), f"JAVA_HOME={tmp_path / 'nowhere'} has no"),
        (_env(JAVA_HOME=None, PATH=str(old_java)), "is Java 11"),
        (_env(JAVA_HOME=str(old_java.parent)), "is Java 11"),
    ):
        done, _ = _run(argv, env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("evb spark-job: ") and expected in done.stderr
        assert "Java 17 or later" in done.stderr and "JAVA_HOME" in done.stderr
    assert not (tmp_path / "o").exists()


def test_the_java_check_accepts_this_machines_java() -> None:
    assert checks.java_problem() is None
    assert checks.java_problem({"PYSPARK_GATEWAY_PORT": "1", "PATH": ""}) is None  # spark-submit's


def test_help_says_what_the_timestamp_policies_and_the_layout_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        job.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "earliest = its first fragment's in stream order (GLOM_TIMESTAMP_FIRST)" in text
    assert "latest = its last fragment's (GLOM_TIMESTAMP_LAST)" in text
    assert "OUTPUT/runs/RUN/summary.json" in text and "OUTPUT/events/run=RUN/" in text
    assert "(default: OUTPUT/runs/RUN/checkpoint)" in text


def test_a_table_of_the_oracle_writes_as_a_log(tmp_path: Path) -> None:
    """The helper the tests use for ``--path`` writes what the job's source reads back."""
    from orderer.building.glom import fragment_rows
    from orderer.formats.payloads import ordered_batches
    from orderer.spark.source.access import segment_files
    from tests.spark.oracle import fragments_of

    stream = random_stream(4, 1000)
    data = write_ordered_log(tmp_path, stream, batch=300)
    back = pa.Table.from_batches(
        [fragment_rows(b) for s in segment_files(data) for b in ordered_batches(s)]
    )
    assert fragments_of(back) == fragments_of(stream)


def test_an_unreachable_orderer_ends_before_spark_starts_naming_the_address(
    tmp_path: Path,
) -> None:
    # nothing listens on port 1: one line, exit 3, within the connect timeout (no JVM)
    done, seconds = _run(["--target", "127.0.0.1:1", "--dt", "1000", "--output",
                          str(tmp_path / "o"), "--connect-timeout", "1"], _env())
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "evb spark-job: orderer unavailable: cannot reach 127.0.0.1:1 within 1 s: connection "
        "refused"
    ), done.stderr
    assert seconds < 8
    assert not (tmp_path / "o").exists()
