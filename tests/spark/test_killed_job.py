"""``evb spark-job`` killed (SIGKILL, its driver and JVM) mid-run and run again on its
checkpoint, with every kind of stage and the live page (issues 30 and 40): what the rerun
resumes from is all on disk, the killed process's, and nothing is lost or counted twice:
- the stages (a sequencer, order-sensitive ones keyed and global, an order-insensitive one) go
  on from the states the killed job left, and their results equal a sequential run's;
- the aggregations' accumulators go on from the last micro-batch marked done: each one's
  directory holds one finished table, the oracle's;
- the live page starts from the killed job's totals, not from zero, and ends with every event
  counted once (what the summary counts).

One killed run for all three, since the killing and the rerun are most of each one's time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import EVENT_SCHEMA, build_events
from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.stages.sink import stage_directory
from orderer.stages.api import Order
from orderer.stages.load import load_stages
from orderer.stages.plan import plan
from tests.spark import stage_oracles
from tests.spark.conftest import DT, FinishedRun
from tests.spark.killed_job import kill_after, manifests
from tests.spark.test_live import RecordingBoard

STAGES = Path(__file__).with_name("all_stages.py")


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names])


@pytest.mark.slow
def test_a_killed_job_resumes_its_stages_accumulators_and_totals_counting_each_batch_once(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    events = pa.Table.from_batches([build_events(finished_run.fragments, GlomConfig(DT))])
    assert pc.sum(events["late"]).as_py() > 0  # late ones
    assert pc.sum(pc.not_equal(events["barrier"], 0)).as_py() > 0  # and barriers
    stages = load_stages(STAGES)
    by_name = {stage.name: stage for stage in stages}
    ordinary = tuple(s for s in stages if s.name in ("fragments", "gaps", "running", "sizes"))
    expected = stage_oracles.aggregations(events, by_name)
    checkpoint = tmp_path / "checkpoint"
    out = tmp_path / "out"
    flags = [
        "--target", finished_run.target, "--dt", str(DT), "--output", str(out),
        "--run", "r", "--partitions", "3", "--consumer", "killed",
        "--max-fragments-per-trigger", "300", "--checkpoint", str(checkpoint),
        "--stages", str(STAGES), "--ui", "127.0.0.1:0", "--quiet",
    ]  # fmt: skip
    killed_at = kill_after(flags, checkpoint, tmp_path / "killed.log")
    assert 2 <= killed_at < 4, (tmp_path / "killed.log").read_text()  # killed mid-way

    planned = plan(stages, EVENT_SCHEMA)
    board = RecordingBoard(planned)
    result = job.run(spark, JobConfig.from_argv(flags), planned, board)
    assert result.batches > 0 and manifests(checkpoint) > killed_at  # resumed: the batches after

    # the stages: whole, nothing doubled
    assert stage_oracles.written(out, "r", ordinary) == stage_oracles.sequential(events, ordinary)
    # the aggregations: one finished table each, the oracle's
    for name in ("dead_time", "multiplicities"):
        assert by_name[name].order is Order.AGGREGATION
        directory = Path(stage_directory(str(out), name, "r"))
        assert len([p for p in directory.iterdir() if p.name.startswith("batch=")]) == 1, name
        stage = by_name[name]
        written = pq.read_table(directory, columns=stage.schema.names).cast(stage.schema)
        assert _sorted(written).equals(_sorted(expected[name])), name

    # the live page: from the killed job's totals, then each batch once, in order (from the
    # killed job's last one if it was not marked done)
    first, last = board.published[0], board.published[-1]
    assert first.batch >= killed_at - 1 and first.fragment_count > 0
    later = [t.batch for t in board.published[1:]]
    assert later == list(range(later[0], later[0] + len(later))) and later[0] <= first.batch + 1
    summary = result.summary
    assert last.fragment_count == summary["fragments"] == finished_run.fragments.num_rows
    assert {str(m): n for m, n in last.multiplicity.items()} == summary["multiplicity"]["histogram"]
    assert last.events == summary["events"] and last.late_fragments == summary["late"]["fragments"]
    entry = summary["stages"]["multiplicities"]
    assert last.stages["multiplicities"].rows == entry["rows"] < 20
    counts = entry["histograms"]["multiplicity"]["counts"]
    assert last.stages["multiplicities"].histograms["multiplicity"].tolist() == counts
    assert {n: s.rows for n, s in last.stages.items()} == {
        n: e["rows"] for n, e in summary["stages"].items()
    }
