"""A class-data sharing archive of the classes a Spark driver loads, made once and given to every
JVM the tests start (``-XX:SharedArchiveFile``, through ``SPARK_SUBMIT_OPTS``).

Why: the suite is CPU-bound on two cores, and it starts a JVM some twenty-five times (the shared
SparkSession of each pytest worker, every ``evb spark-job`` and demo it runs as a process, the
cluster in a box's spark-submit). Each loads and verifies tens of thousands of Spark's classes
from its jars: about 10 s of CPU for a session and its first job. Mapped from the archive, the
same classes cost about 6 s (measured here with JDK 17 and PySpark 4: the wall time of a session
and its first job, 9.1 -> 4.7 s). Nothing a JVM computes changes; it reads its classes from the
archive instead of the jars.

How: a JVM running a small workload through the tests' SparkSession (:func:`spark_session`)
dumps the classes it loaded at its exit (``-XX:ArchiveClassesAtExit``, JDK 13 and later), into
pytest's cache, named after the PySpark version and the ``java`` found on the path. A JVM that
cannot use the archive (another JDK, another classpath) ignores it, silently (``-Xshare:auto``,
and the CDS warnings turned off): the archive can only make the tests faster, never change them.
Run as a module, this file is that workload; with ``--make`` it makes the archive where
pytest's cache keeps it (``make test`` makes it beside lint, before pytest starts).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".pytest_cache" / "d" / "evb-class-archive"
"""Where pytest's cache keeps it (``config.cache.mkdir("evb-class-archive")``)."""
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""What every JVM of the tests runs with (``tests/conftest.py`` says why), unless
``SPARK_SUBMIT_OPTS`` is set."""
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""No CDS warning on stdout when a JVM cannot use the archive (the tests read commands' output)."""
TIMEOUT = 180.0
"""Seconds the workload may take (a JVM's start and a few jobs; about 20 s here)."""


def archive(cache: Path, options: str) -> Path | None:
    """The archive in ``cache`` for this PySpark and this ``java`` (made now if absent, with the
    JVM ``options`` the tests' JVMs run with); None when it cannot be made."""
    import pyspark

    java = shutil.which("java", path=os.environ.get("PATH"))
    home = os.environ.get("JAVA_HOME", "")
    key = hashlib.sha256(f"{pyspark.__version__}|{home}|{java and os.path.realpath(java)}".encode())
    path = cache / f"spark-{pyspark.__version__}-{key.hexdigest()[:12]}.jsa"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    try:
        subprocess.run(
            [sys.executable, "-m", "tests.jvm_classes"],
            env=env,
            cwd=REPO,
            capture_output=True,
            timeout=TIMEOUT,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        partial.unlink(missing_ok=True)
        return None
    if not partial.exists():
        return None
    os.replace(partial, path)  # whole or not at all: another run may be reading the cache
    return path


def _workload() -> None:
    """What the tests' JVMs do most: a session, Arrow batches through a Python worker, Parquet
    written and read, a shuffle, results to the driver as Arrow."""
    import pyarrow as pa

    from tests.spark.conftest import spark_session

    spark = spark_session("evb-class-archive")
    scratch = REPO / ".pytest_cache" / "evb-class-archive-workload"
    try:

        def identity(batches: object) -> object:
            yield from batches  # type: ignore[attr-defined]

        frame = spark.range(1000).mapInArrow(identity, "id long")  # type: ignore[attr-defined]
        frame.write.mode("overwrite").parquet(str(scratch))
        read = spark.read.parquet(str(scratch))  # type: ignore[attr-defined]
        table: pa.Table = read.groupBy((read.id % 7).alias("k")).count().toArrow()
        assert table.num_rows == 7
    finally:
        spark.stop()  # type: ignore[attr-defined]
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--make"]:  # ``make class-archive``: beside lint, before pytest
        made = archive(CACHE, os.environ.get("SPARK_SUBMIT_OPTS", JVM_OPTIONS))
        print(f"class archive: {made or 'not made (the tests run without it)'}")
    else:
        _workload()
