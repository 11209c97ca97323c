"""kill -9 under ``evb spark-job --target a,b,c`` (docs/scale-out.md, "The Spark source: N orderers
in slice order"): three ``evb serve`` processes on loopback fed by the source client, the job a
real ``evb spark-job`` subprocess streaming them. One orderer killed while the job reads and
restarted on its data directory: the job waits at that orderer's pieces and goes on. The job
itself killed (its process group: the Python driver and its JVM) and run again on its
checkpoint (by the tests' Spark session: a JVM start less) goes on from its last committed
micro-batch. Its events are what ``evb replay``
of the three orderers' own arrival logs builds (``orderer.replay.sliced_logs``): nothing lost,
nothing doubled. Without Spark: the driver's planning and the executors' reads, while an orderer
is killed and restarted again and again, wait for it and give the replay's merged stream."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderer.building.config import GlomConfig
from orderer.client import SourceClient, end_run, get_stats
from orderer.errors import ServiceUnavailable
from orderer.job_config import JobConfig
from orderer.replay.sliced_logs import replay_orderers
from orderer.replay.unit_plan import UnitPlanner, UnitStart, unit_rows
from orderer.spark.driver import job as spark_job
from orderer.spark.source.sliced_reads import LiveHeads, OrderersAt, check_targets
from tests.e2e.conftest import REPO, ServerProcess, environment, evb_command, orderers_of_one_run
from tests.spark.oracle import events_of

N, T = 3, 20_000
"""Three orderers, slices of 20,000 ticks."""
DT = 100
"""Glom window, ticks: the three sources' fragments of one step (5 ticks apart) make an event,
the next step 290 ticks on begins the next at a sure start."""
SOURCES = (1, 2, 3)
PHASE = 100_000
"""Ticks sent per phase (five slices): some 1,000 fragments of the three sources together."""
PHASES = 8
JOB_START = 180.0
"""Seconds a job has to start its JVM and commit its first micro-batch (two cores, shared)."""


def _phase(client: SourceClient, phase: int) -> None:
    """The sources' fragments of one phase (each with its own payload), a barrier of every
    source in phase 3, flushed."""
    for source in SOURCES:
        ts = np.arange(phase * PHASE + 5 * source, (phase + 1) * PHASE, 300, dtype=np.uint64)
        barrier = np.zeros(ts.size, np.uint32)
        if phase == 3:
            barrier[ts.size // 2] = 4
            ts[ts.size // 2] = phase * PHASE + PHASE // 2  # one barrier at one timestamp
        payloads = [int(t).to_bytes(8, "little") + bytes([source]) for t in ts.tolist()]
        client.send_batch(source, ts, barrier, payloads)
    client.flush()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """The run's three orderers, stopped afterwards."""
    with orderers_of_one_run(
        tmp_path, N, T, "--build-window", "60", "--startup-delay", "0",
        "--sources", ",".join(map(str, SOURCES)),
    ) as started:
        yield started


class Job:
    """``evb spark-job`` in a process group of its own (the driver and the JVM it starts)."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with log.open("a") as out:
            self.process = subprocess.Popen(
                evb_command("spark-job", *args, "--quiet"), stdout=out, stderr=out,
                env=environment(), cwd=REPO, start_new_session=True,
            )  # fmt: skip

    def kill(self) -> None:
        """kill -9 of the driver and its JVM."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def alive(self) -> bool:
        return self.process.poll() is None


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        if job.alive():
            job.kill()


def _until(what: str, condition: Callable[[], bool], job: Job, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.alive(), f"the job ended before {what}: {job.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}; see {job.log}"
        time.sleep(0.1)


def _committed(server: ServerProcess) -> int:
    try:
        consumer = get_stats(server.target).consumers.get("evb-spark-job")
    except ServiceUnavailable:
        return 0
    return 0 if consumer is None else consumer.committed


def _end(client: SourceClient, servers: list[ServerProcess]) -> None:
    for source in SOURCES:
        client.end_source(source)
    client.wait_acked(timeout=120)
    for server in servers:
        end_run(server.target)


def _sent() -> int:
    """Fragments of the whole run (every phase holds as many)."""
    return PHASES * sum(len(range(5 * source, PHASE, 300)) for source in SOURCES)


def test_the_reads_wait_for_a_killed_orderer(servers: list[ServerProcess]) -> None:
    """The driver's planning and the executors' reads (as the job runs them, without Spark)
    over and over while one orderer is killed and restarted: each read waits for it and gives
    the merged stream whole (a call in flight at the kill, or made while the orderer dies or
    starts, fails at once: it is tried again)."""
    targets = [s.target for s in servers]
    with SourceClient(",".join(targets), batch_size=50, linger=None) as client:
        for phase in range(PHASES):
            _phase(client, phase)
        _end(client, servers)
    expected = replay_orderers([s.data_dir for s in servers], GlomConfig(DT)).fragments
    assert expected.num_rows == _sent()
    at = OrderersAt(check_targets(targets).slicing, targets=tuple(targets), reconnect_timeout=60)
    failures: list[BaseException] = []
    reads = [0]
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                planned = UnitPlanner(at.slicing, DT, LiveHeads(at)).plan(UnitStart.initial(N))
                assert planned.end.ended
                with at.reading() as ranges:
                    rows = [b for u in planned.units for b in unit_rows(u, ranges, at.slicing)]
                assert pa.Table.from_batches(rows).equals(expected)
                reads[0] += 1
        except BaseException as error:  # for the test to see
            failures.append(error)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(3):
            done = reads[0]
            _wait(lambda: reads[0] > done or bool(failures), 60)  # noqa: B023
            servers[1].kill()
            servers[1].start()
    finally:
        stop.set()
        for reader in readers:
            reader.join(120)
    assert not failures, failures
    assert reads[0] >= 3


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.02)


def test_kill_9_of_an_orderer_and_of_the_job_loses_and_doubles_nothing(
    spark: Any, tmp_path: Path, servers: list[ServerProcess], jobs: list[Job]
) -> None:
    """A streaming job over three orderers: orderer 1 killed while the job reads and restarted
    on its data directory (the job waits at its pieces, then goes on); then the job killed and
    run again on its checkpoint (it goes on from its last committed micro-batch)."""
    targets = ",".join(s.target for s in servers)
    out = tmp_path / "out"
    args = ("--target", targets, "--dt", str(DT), "--output", str(out), "--run", "live",
            "--max-fragments-per-trigger", "1000", "--poll", "0.1")
    commits = out / "runs" / "live" / "checkpoint" / "commits"
    with SourceClient(targets, batch_size=50, linger=None, reconnect_timeout=120) as client:
        for phase in range(2):
            _phase(client, phase)
        client.wait_acked(timeout=60)
        jobs.append(Job(tmp_path / "job.log", *args))
        _until("a first commit", lambda: _committed(servers[1]) > 0, jobs[0], JOB_START)
        servers[1].kill()  # kill -9 while the job plans and reads
        down_at = get_stats(servers[0].target).next_offset
        for phase in range(2, 4):
            _phase(client, phase)
        # the others take their slices meanwhile; the job, at orderer 1's pieces, waits
        _until("orderer 0's next phases", lambda: get_stats(servers[0].target).next_offset
               > down_at + 300, jobs[0], 60)  # fmt: skip
        servers[1].start()  # same data directory, same port
        client.wait_acked(timeout=60)
        assert client.reconnects >= 1
        # the job goes on past what orderer 1 held when it was killed
        _until("the job past the restart", lambda: _committed(servers[1]) > 700, jobs[0], 120)
        first = {p.name for p in commits.iterdir() if p.name.isdigit()}
        jobs[0].kill()  # kill -9, mid-run: the driver and its JVM
        for phase in range(4, PHASES):
            _phase(client, phase)
        _end(client, servers)
    # again, on its checkpoint: a new driver (this session's, where the JVM runs already)
    spark_job.run(spark, JobConfig.from_argv([*args, "--quiet"]))
    assert first < {p.name for p in commits.iterdir() if p.name.isdigit()}  # went on from there

    oracle = replay_orderers([s.data_dir for s in servers], GlomConfig(DT))
    assert oracle.events is not None
    assert oracle.fragments.num_rows == _sent()
    assert events_of(pq.read_table(out / "events" / "run=live")) == events_of(oracle.events)
    for server in servers:  # every orderer's whole output committed
        stats = get_stats(server.target)
        assert stats.consumers["evb-spark-job"].committed == stats.next_offset
