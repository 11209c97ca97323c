"""Fixtures of the Spark tests: ONE SparkSession for the whole session (a JVM start is slow),
``local[2]``, with the ``evb`` data source registered; a real ``evb serve`` on loopback that has
run a synthetic run with a stall, a late backlog and barriers, and the ordered output it holds."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from orderer.apps.send import send_synthetic
from orderer.client import OrderedStreamReader, end_run
from orderer.replay.synthetic import Stall, SyntheticRun
from tests.e2e.conftest import ServerProcess

RUN = SyntheticRun(
    n_sources=4,
    fragments_per_source=300,
    rate=200.0,
    batch_size=5,
    jitter=0.01,
    stalls=(Stall(source=3, start=0.4, end=0.9, backlog=True),),
    sync_barriers=2,
    payload_size=8,
    seed=4,
)
SERVE_FLAGS = ("--build-window", "0.1", "--startup-delay", "0.1", "--sources", "1,2,3,4")
DT = 150_000
"""Glom window of the tests, ticks (1.5 ms at 100 MHz; the four sources send 800 Hz in all)."""


@dataclass
class FinishedRun:
    """A server whose run has ended, and everything it emitted (as the source's rows)."""

    server: ServerProcess
    data_dir: Path
    fragments: pa.Table

    @property
    def target(self) -> str:
        return self.server.target


def spark_session(app: str = "evb-tests") -> object:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from orderer.spark.source.datasource import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session()
    yield session
    session.stop()  # type: ignore[attr-defined]


def source_rows(target: str, until: int) -> pa.Table:
    """What the orderer emitted, read with the client library, as the source's rows."""
    from orderer.building.glom import fragment_rows

    batches = [fragment_rows(b) for b in OrderedStreamReader(target, 0, until=until)]
    return pa.Table.from_batches(batches)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FinishedRun]:
    base = tmp_path_factory.mktemp("finished-run")
    logs = base / "logs"
    logs.mkdir()
    server = ServerProcess(base / "data", logs, *SERVE_FLAGS).start()
    try:
        send_synthetic(server.target, RUN, speed=1.0, progress=False)
        last = end_run(server.target)
        yield FinishedRun(server, base / "data", source_rows(server.target, last))
    finally:
        server.stop()
