"""``evb spark-job`` over a run spread over three orderers (docs/scale-out.md, "The Spark source"):
three ``evb serve`` processes on loopback, six sources through the source client (a hung source,
a late backlog released by ``evb release``, a complete and incomplete barriers), read live
(``--target a,b,c``, in micro-batches) and from the data directories (``--path d0,d1,d2``). The
job's events, as Parquet rows and as NSCLDAQ ring items, are byte for byte what ``evb replay`` of
the three orderers' own arrival logs builds (``orderer.replay.sliced_logs``, the simulation's
merge and building); a query restarted from its checkpoint builds the same; at the end every
orderer holds the job's commit of its whole output. For a run with nothing late and no barrier
across a slice boundary the events are one orderer's. Without Spark: the driver's planning and
the executors' reads (``orderer.replay.unit_plan`` over ``orderer.spark.source.sliced_reads``) give
the replay's merged stream, live and from the logs; orderers given in another order, or one missing,
are refused before Spark starts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderer.apps.send import send_synthetic
from orderer.building.config import GlomConfig
from orderer.building.glom import glom_batches
from orderer.cli import main as evb
from orderer.client import end_run, get_stats
from orderer.config import OrdererConfig
from orderer.job_config import JobConfig
from orderer.replay.simulate import replay
from orderer.replay.sliced_logs import ReplayedRun, replay_orderers
from orderer.replay.synthetic import Stall, SyntheticRun, generate_records
from orderer.replay.unit_plan import UnitPlanner, UnitStart, unit_rows
from orderer.spark.driver import job
from orderer.spark.output.nscldaq import ring_items
from orderer.spark.source.sliced_reads import LiveHeads, LogHeads, OrderersAt, check_targets
from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.spark.conftest import DT
from tests.spark.oracle import Event, events_of, fragments_of, glom

T = 1_000_000
"""Slice length, ticks (10 ms at 100 MHz: some 200 slices in a run of two seconds)."""
FLAGS = ("--build-window", "0.2", "--startup-delay", "0.1", "--sources", "1,2,3,4,5,6")
LATE = SyntheticRun(
    n_sources=6, fragments_per_source=400, rate=200.0, batch_size=5, jitter=0.01,
    stalls=(
        Stall(source=3, start=0.3, end=0.55), Stall(source=5, start=0.6, end=1.6, backlog=True)
    ),
    sync_barriers=2, heterogeneous_barrier=True, incomplete_barrier=6, payload_size=8, seed=7,
)  # fmt: skip
"""Source 3 hangs (its barrier in the gap is lost); source 5 holds 1 s of data, is released by
``evb release`` (source timeout 0.3 s) and delivers it late; source 6 loses its end-run barrier."""
CLEAN = SyntheticRun(
    n_sources=6, fragments_per_source=200, rate=200.0, batch_size=5, jitter=0.01,
    sync_barriers=1, payload_size=8, seed=11,
)
"""Every source in order, no stall: nothing late, every barrier at one timestamp (one slice)."""


@dataclass
class SlicedRun:
    servers: list[ServerProcess]
    oracle: ReplayedRun

    @property
    def targets(self) -> str:
        return ",".join(s.target for s in self.servers)

    @property
    def paths(self) -> str:
        return ",".join(str(s.data_dir) for s in self.servers)


def _serve(base: Path, name: str, *flags: str) -> list[ServerProcess]:
    servers = []
    for k in range(3):
        logs = base / f"{name}-logs-{k}"
        logs.mkdir()
        servers.append(ServerProcess(
            base / f"{name}-{k}", logs, "--orderers", "3", "--orderer-index", str(k),
            "--slice-ticks", str(T), *FLAGS, *flags,
        ).start())  # fmt: skip
    return servers


@pytest.fixture(scope="module")
def late_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlicedRun]:
    base = tmp_path_factory.mktemp("sliced-late")
    servers = _serve(base, "late", "--source-timeout", "0.3")
    try:
        targets = ",".join(s.target for s in servers)
        release = subprocess.Popen(
            evb_command("release", "--target", targets, "--interval", "0.1"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
        )  # fmt: skip
        # watching before the run starts: source 5's second of silence is its only chance
        # (a Python process can take longer than that to start on two busy cores)
        assert release.stderr is not None
        started = release.stderr.readline()
        assert "watching 3 orderer(s) for silent sources" in started, started
        send_synthetic(targets, LATE, speed=1.0, progress=False)
        for server in servers:
            end_run(server.target)
        released, log = release.communicate(timeout=60)  # it ends once every run has ended
        assert json.loads(released)["released"], f"the backlog's source was not released\n{log}"
        oracle = replay_orderers([s.data_dir for s in servers], GlomConfig(DT))
        yield SlicedRun(servers, oracle)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlicedRun]:
    base = tmp_path_factory.mktemp("sliced-clean")
    servers = _serve(base, "clean", "--build-window", "5")
    try:
        send_synthetic(",".join(s.target for s in servers), CLEAN, speed=1.0, progress=False)
        for server in servers:
            end_run(server.target)
        oracle = replay_orderers([s.data_dir for s in servers], GlomConfig(DT))
        yield SlicedRun(servers, oracle)
    finally:
        for server in servers:
            server.stop()


def _job(spark: Any, *flags: str) -> job.JobResult:
    return job.run(spark, JobConfig.from_argv([*flags, "--quiet"]))


def _parquet_events(spark: Any, out: Path, run: str) -> list[Event]:
    """A run's events as a reader sees them (a streamed run's sink log says which files)."""
    return events_of(spark.read.parquet(str(out / "events" / f"run={run}")).toArrow())


def _evt(out: Path, run: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((out / "events" / f"run={run}").glob("*.evt")))


def test_the_job_over_three_orderers_builds_what_the_replay_of_their_logs_builds(
    spark: Any, late_run: SlicedRun, tmp_path: Path
) -> None:
    oracle = late_run.oracle
    assert oracle.events is not None
    expected = events_of(oracle.events)
    late = int(np.asarray(oracle.fragments.column("late")).sum())
    assert late  # the released backlog: the run holds what the test is about
    barriers = [get_stats(s.target).barriers for s in late_run.servers]
    assert any(b.complete for b in barriers) and any(b.incomplete for b in barriers)

    out = tmp_path / "out"
    flags = ("--target", late_run.targets, "--dt", str(DT), "--output", str(out), "--run", "live",
             "--max-fragments-per-trigger", "700", "--poll", "0.2")
    result = _job(spark, *flags)
    assert result.batches > 2
    assert _parquet_events(spark, out, "live") == expected
    assert result.summary["fragments"] == oracle.fragments.num_rows
    for server in late_run.servers:  # the last commit at each orderer: all of its output
        stats = get_stats(server.target)
        assert stats.consumers["evb-spark-job"].committed == stats.next_offset

    # a driver that died in its last two micro-batches: the one before the last planned (its
    # offsets in the checkpoint) and written but not committed by the sink, the last not even
    # planned. Restarted on the checkpoint, it plans the first again from its offsets, the
    # last anew, and builds nothing twice (the files of the uncommitted write are dropped)
    checkpoint = out / "runs" / "live" / "checkpoint"
    sink_log = out / "events" / "run=live" / "_spark_metadata"
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for log, batch in (
        (checkpoint / "commits", last), (checkpoint / "commits", last - 1),
        (checkpoint / "offsets", last), (sink_log, last), (sink_log, last - 1),
    ):  # fmt: skip
        for name in (str(batch), f".{batch}.crc"):  # the file and its checksum
            (log / name).unlink(missing_ok=True)
    _job(spark, *flags)
    assert _parquet_events(spark, out, "live") == expected

    # the finished run's data directories, as ring items
    _job(spark, "--path", late_run.paths, "--dt", str(DT), "--output", str(out), "--run", "ring",
         "--format", "nscldaq", "--partitions", "3")
    assert _evt(out, "ring") == ring_items(oracle.events, 0)


def test_a_run_with_nothing_late_is_one_orderers(
    spark: Any, clean_run: SlicedRun, tmp_path: Path
) -> None:
    """docs/scale-out.md: nothing late, sources in order, each barrier in one slice: the merged
    stream is one orderer's output position for position, and the events are the same."""
    config = OrdererConfig(build_window=5.0, startup_delay=0.1, sources=(1, 2, 3, 4, 5, 6))
    emitted, _ = replay(generate_records(CLEAN), config)
    assert not emitted.late.any()
    one = pa.Table.from_batches([_rows(emitted)])
    out = tmp_path / "out"
    _job(spark, "--path", clean_run.paths, "--dt", str(DT), "--output", str(out), "--run", "c")
    events = _parquet_events(spark, out, "c")
    assert events == glom(fragments_of(one), DT)
    assert not any(e.late for e in events)


def _rows(emitted: Any) -> pa.RecordBatch:
    from orderer.building.glom import fragment_rows

    return fragment_rows(emitted)


# --------------------------------------------------------------------------- without Spark


def test_the_planning_and_the_reads_give_the_replays_merged_stream(late_run: SlicedRun) -> None:
    """The driver's planning and the executors' reads, live and from the logs, without Spark;
    and ``evb replay d0,d1,d2 --output`` writes the replay's events."""
    oracle = late_run.oracle
    assert oracle.events is not None
    targets = [s.target for s in late_run.servers]
    run = check_targets(targets)
    live = OrderersAt(run.slicing, targets=tuple(targets))
    logs = LogHeads([str(s.data_dir) for s in late_run.servers], run.slicing)
    for heads, at in ((LiveHeads(live), live), (logs, OrderersAt(run.slicing, logs=logs.spans))):
        planned = UnitPlanner(run.slicing, DT, heads).plan(UnitStart.initial(3))
        assert planned.end.ended
        with at.reading() as read:
            rows = [b for u in planned.units for b in unit_rows(u, read, run.slicing)]
        assert pa.Table.from_batches(rows).equals(oracle.fragments)
        built = pa.Table.from_batches(list(glom_batches(rows, GlomConfig(DT))))
        assert built.equals(oracle.events)


def test_the_replay_command_writes_the_events(late_run: SlicedRun, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "events.parquet"
    assert evb(["replay", late_run.paths, "--dt", str(DT), "--output", str(out),
                "--orderers", "3", "--slice-ticks", str(T)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["events"] == late_run.oracle.events.num_rows  # type: ignore[union-attr]
    assert pq.read_table(out).equals(late_run.oracle.events)
    assert evb(["replay", late_run.paths, "--orderers", "2"]) == 2
    assert "the data directories are a run of orderers=3" in capsys.readouterr().err


def test_orderers_out_of_order_or_missing_are_refused_before_spark(
    late_run: SlicedRun, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    s = late_run.servers
    out = str(tmp_path / "out")
    cases = [
        ("--target", f"{s[1].target},{s[0].target},{s[2].target}", "is orderer 1 of 3, not "
         "orderer 0 of 3: give the run's orderers in their order"),
        ("--target", f"{s[0].target},{s[1].target}", "is orderer 0 of 3, not orderer 0 of 2"),
        ("--target", s[2].target, "is orderer 2 of 3: give every orderer's address"),
        ("--path", f"{s[0].data_dir},{s[2].data_dir},{s[1].data_dir}", "is orderer 2 of 3, not "
         "orderer 1 of 3"),
    ]
    for flag, value, said in cases:
        assert job.main([flag, value, "--dt", str(DT), "--output", out, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err
    assert job.main(["--target", late_run.targets, "--dt", "5", "--output", out,
                     "--check-order"]) == 2
    assert "--check-order: is not done over several orderers yet" in capsys.readouterr().err
