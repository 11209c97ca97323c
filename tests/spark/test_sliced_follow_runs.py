"""``evb spark-job --follow-runs`` over three orderers (docs/scale-out.md, "The Spark source: N
orderers in slice order"): three ``evb serve --run 7`` processes on loopback, fed by the source
client; run 7 ended at every orderer, then run 8 begun and ended at every orderer, its clocks
going on from run 7's. The job builds run 7, goes on, and builds run 8 once it has begun at
every orderer, each run into its own output; each run's events are what ``evb replay`` of the
three orderers' own arrival logs builds of that run's rows of the merged stream alone (none
spans two runs), its rows numbered on from the run before. And the N orderers' run tables seen
as one (:func:`orderer.spark.driver.runs.orderers_table`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from orderer.building.config import GlomConfig
from orderer.client import SourceClient, begin_run, end_run, get_stats
from orderer.errors import ConfigError
from orderer.job_config import JobConfig
from orderer.replay.sliced_logs import replay_orderers
from orderer.replay.unit_plan import UnitPlanner, UnitStart, unit_rows
from orderer.spark.driver import job, runs
from orderer.spark.source.sliced_reads import OrderersAt, RunHeads, check_targets
from tests.e2e.conftest import ServerProcess, orderers_of_one_run
from tests.spark.oracle import events_of

N, T = 3, 20_000
DT = 100
"""Glom window, ticks: the three sources' fragments of one step (5 ticks apart) make an event."""
SOURCES = (1, 2, 3)
RUN = 120_000
"""Ticks of a run (six slices): run 7 sends [0, RUN), run 8 [2 RUN, 3 RUN)."""


def _send(client: SourceClient, low: int, high: int) -> None:
    """Every source's fragments of ``[low, high)``, a barrier of every source at one timestamp
    in the middle."""
    for source in SOURCES:
        ts = np.arange(low + 5 * source, high, 300, dtype=np.uint64)
        barrier = np.zeros(ts.size, np.uint32)
        barrier[ts.size // 2] = 4
        ts[ts.size // 2] = low + (high - low) // 2
        payloads = [int(t).to_bytes(8, "little") + bytes([source]) for t in ts.tolist()]
        client.send_batch(source, ts, barrier, payloads)
    client.flush()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """The run's three orderers, stopped afterwards."""
    with orderers_of_one_run(
        tmp_path, N, T, "--build-window", "60", "--startup-delay", "0",
        "--sources", ",".join(map(str, SOURCES)), "--run", "7",
    ) as started:
        yield started


def _feed(servers: list[ServerProcess], out: Path, failures: list[BaseException]) -> None:
    """Run 7; once the job has built it (it must not stop there), run 8, begun at one orderer
    after another (a run of the three once begun at the last)."""
    try:
        with SourceClient(",".join(s.target for s in servers), batch_size=50, linger=None) as c:
            _send(c, 0, RUN)
            c.wait_acked(timeout=60)
            for server in servers:
                end_run(server.target)
            deadline = time.monotonic() + 120
            while not (out / "runs" / "7" / "summary.json").exists():
                assert time.monotonic() < deadline, "run 7 was not built"
                time.sleep(0.1)
            for server in servers:
                assert begin_run(server.target).run == 8
            _send(c, 2 * RUN, 3 * RUN)
            c.wait_acked(timeout=60)
            for server in servers:
                end_run(server.target)
    except BaseException as error:  # for the test to see
        failures.append(error)


def test_the_job_follows_two_runs_over_three_orderers(
    spark: Any, servers: list[ServerProcess], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    failures: list[BaseException] = []
    feeder = threading.Thread(target=_feed, args=(servers, out, failures))
    feeder.start()
    try:
        results = job.follow_runs(spark, JobConfig.from_argv([
            "--target", ",".join(s.target for s in servers), "--dt", str(DT), "--output",
            str(out), "--poll", "0.2", "--follow-runs", "--until-run", "8",
            "--max-fragments-per-trigger", "1500", "--quiet",
        ]))  # fmt: skip
    finally:
        feeder.join(120)
    assert not failures, failures
    assert [r.summary["run"] for r in results] == ["7", "8"]
    assert sorted(p.name for p in (out / "events").iterdir()) == ["run=7", "run=8"]

    parts = replay_orderers([s.data_dir for s in servers], GlomConfig(DT)).runs()
    assert [p.number for p in parts] == [None, 8]
    position = 0
    for run, part in zip((7, 8), parts, strict=True):
        assert part.events is not None and part.events.num_rows
        built = events_of(spark.read.parquet(str(out / "events" / f"run={run}")).toArrow())
        assert built == events_of(part.events), run
        # numbered on from the run before, none spanning two runs
        assert built[0].event == position
        position += part.fragments.num_rows
        assert max(o for e in built for o in e.offsets) == position - 1
        summary = json.loads((out / "runs" / str(run) / "summary.json").read_text())
        assert summary["fragments"] == part.fragments.num_rows
        assert summary["run_offsets"]["merged_end"] == position
    # the driver's planning and the executors' reads of each run, as the job runs them
    targets = [s.target for s in servers]
    at = OrderersAt(check_targets(targets).slicing, targets=tuple(targets))
    for number, part in zip((7, 8), parts, strict=True):
        heads = RunHeads(at, number)
        planned = UnitPlanner(at.slicing, DT, heads).plan(UnitStart.run_start(heads.start))
        assert planned.end.ended
        with at.reading() as read:
            rows = [b for u in planned.units for b in unit_rows(u, read, at.slicing)]
        assert pa.Table.from_batches(rows).equals(part.fragments), number
    table = runs.orderers_table([runs.table(get_stats(s.target)) for s in servers])
    assert [(r.run, r.ended) for r in table] == [(7, True), (8, True)]
    run8 = json.loads((out / "runs" / "8" / "summary.json").read_text())["run_offsets"]
    assert run8["start"] == list(table[1].starts) and run8["end"] == list(table[1].ends)


def test_the_orderers_run_tables_as_one() -> None:
    span = runs.RunSpan
    tables = [
        [span(7, 0, 10), span(8, 10, None)],
        [span(7, 0, 12), span(8, 12, 20)],
        [span(7, 0, 9)],  # run 8 not begun here yet
    ]
    assert runs.orderers_table(tables) == [runs.OrderersRun(7, (0, 0, 0), (10, 12, 9))]
    tables[2].append(span(8, 9, None))
    eight = runs.orderers_table(tables)[1]
    assert eight == runs.OrderersRun(8, (10, 12, 9), (None, 20, None)) and not eight.ended
    tables[2][1] = span(9, 9, None)
    with pytest.raises(ConfigError, match=r"run tables differ \(runs 8, 8, 9 in one place"):
        runs.orderers_table(tables)
