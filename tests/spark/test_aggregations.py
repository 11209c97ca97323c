"""Aggregations in the Spark job (issue 40): the results of an aggregation are one finished
table for the run, the same at ``--partitions`` 1 and 5 and whether the run is read at once
(``--path``) or streamed (``--target``) in micro-batches; each micro-batch is counted once across
a restart; a declared histogram of it counts the finished table once; the live page gets each
aggregation's finished table after a micro-batch.

The stages are :mod:`tests.spark.aggregation_stages` (examples/dead_time.py's and a histogram of
multiplicities) over the conftest's run, with its late backlog and barriers; the oracle is each
stage over the whole run at once, in stream order."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import EVENT_SCHEMA, build_events
from orderer.job_config import JobConfig, OutputFormat
from orderer.spark.driver import job
from orderer.spark.stages.runner import run_plan, stage_failure
from orderer.spark.stages.sink import StagesSink, stage_directory
from orderer.stages.api import Order, Stage
from orderer.stages.load import load_stages
from orderer.stages.plan import Plan, plan
from tests.spark.conftest import DT, FinishedRun
from tests.spark.stage_oracles import aggregations

STAGES = Path(__file__).with_name("aggregation_stages.py")
AGGREGATIONS = ("dead_time", "multiplicities")


def _stages() -> tuple[Stage, ...]:
    return load_stages(STAGES)


def _by_name() -> dict[str, Stage]:
    return {stage.name: stage for stage in _stages()}


@pytest.fixture(scope="module")
def events(finished_run: FinishedRun) -> pa.Table:
    built = pa.Table.from_batches([build_events(finished_run.fragments, GlomConfig(DT))])
    assert pc.sum(built["late"]).as_py() > 0 and pc.sum(pc.not_equal(built["barrier"], 0)).as_py()
    return built


@pytest.fixture(scope="module")
def expected(events: pa.Table) -> dict[str, pa.Table]:
    """The oracle: each stage over its whole input at once, in stream order (an order-sensitive
    one per key, from its initial state; an aggregation one accumulation, finished)."""
    return aggregations(events, _by_name())


def _written(output: Path, run: str, name: str) -> pa.Table:
    """A stage's results as the job wrote them (every ``batch=`` directory), in its schema."""
    stage = _by_name()[name]
    table = pq.read_table(stage_directory(str(output), name, run), columns=stage.schema.names)
    return table.cast(stage.schema)


def _batches(output: Path, run: str, name: str) -> list[str]:
    directory = Path(stage_directory(str(output), name, run))
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("batch="))


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names])


@pytest.mark.parametrize(
    ("source", "partitions", "per_trigger"),
    [("--path", 1, None), ("--target", 5, 250)],  # 1 and 5 partitions, at once and streamed
)
def test_an_aggregation_is_one_finished_table_whatever_the_split_and_micro_batches(
    spark: Any,
    finished_run: FinishedRun,
    expected: dict[str, pa.Table],
    tmp_path: Path,
    source: str,
    partitions: int,
    per_trigger: int | None,
) -> None:
    """Read at once or streamed in several micro-batches, at 1 or 5 partitions: each
    aggregation's results directory holds one table (``batch=`` the last micro-batch's), equal
    to the oracle's, so equal to one another; the per-fragment rows it adds up are the same too.
    The summary counts the finished table's rows, and a histogram declared on it counts them
    once."""
    where = finished_run.target if source == "--target" else str(finished_run.data_dir)
    trigger = [] if per_trigger is None else ["--max-fragments-per-trigger", str(per_trigger)]
    flags = [
        source, where, "--dt", str(DT), "--output", str(tmp_path), "--run", "r",
        "--partitions", str(partitions), "--consumer", f"aggregations-{partitions}", *trigger,
        "--stages", str(STAGES), "--quiet",
    ]  # fmt: skip
    result = job.run(spark, JobConfig.from_argv(flags))
    if per_trigger is not None:
        assert result.batches > 3  # the accumulators crossed micro-batches
    for name in AGGREGATIONS:
        assert _batches(tmp_path, "r", name) == [f"batch={result.batches - 1:012d}"], name
        written = _written(tmp_path, "r", name)
        assert _sorted(written).equals(_sorted(expected[name])), name
        assert result.summary["stages"][name]["rows"] == expected[name].num_rows
        assert result.summary["stages"][name]["class"] == "aggregation"
    assert _sorted(_written(tmp_path, "r", "conversions")).equals(_sorted(expected["conversions"]))
    histogram = result.summary["stages"]["multiplicities"]["histograms"]["multiplicity"]
    finished = expected["multiplicities"]["multiplicity"].to_numpy()
    assert histogram["entries"] == len(finished)  # the finished table's rows, once
    inside, _ = np.histogram(finished[finished < 16], 16, (0, 16))
    assert histogram["counts"] == [0, *inside.tolist(), int((finished >= 16).sum())]


def _events_frame(spark: Any, table: pa.Table) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table, schema=from_arrow_schema(EVENT_SCHEMA)).repartition(3)


def _plan() -> Plan:
    return plan(_stages(), EVENT_SCHEMA)


def test_a_micro_batch_run_again_after_a_restart_is_counted_once(
    spark: Any, events: pa.Table, expected: dict[str, pa.Table], tmp_path: Path
) -> None:
    """The sink as a streamed run drives it: three micro-batches; the third is written and then
    "killed" before it was marked done (its manifest removed, as a kill leaves it), so Spark
    calls the sink with it again after the restart: it starts from the accumulator of the
    second, and the finished table counts it once. A call for a batch marked done does
    nothing."""
    sink = StagesSink(
        spark, _plan(), str(tmp_path / "out"), "r", str(tmp_path / "out" / "events"),
        OutputFormat.PARQUET, 3, str(tmp_path / "checkpoint" / "evb-stages"),
    )  # fmt: skip
    thirds = np.linspace(0, events.num_rows, 4).astype(int).tolist()
    pieces = [events.slice(a, b - a) for a, b in itertools.pairwise(thirds)]
    for batch, piece in enumerate(pieces):
        sink(_events_frame(spark, piece), batch)
    for name in AGGREGATIONS:
        assert _batches(tmp_path / "out", "r", name) == [f"batch={2:012d}"]
        assert _sorted(_written(tmp_path / "out", "r", name)).equals(_sorted(expected[name]))
    manifest = tmp_path / "checkpoint" / "evb-stages" / "_batches" / f"{2:012d}.json"
    manifest.unlink()  # killed before the third batch was marked done
    sink(_events_frame(spark, pieces[2]), 2)  # the restarted query's call
    sink(_events_frame(spark, pieces[2]), 2)  # and once more: marked done, skipped
    assert manifest.exists()
    for name in AGGREGATIONS:
        assert _batches(tmp_path / "out", "r", name) == [f"batch={2:012d}"]
        assert _sorted(_written(tmp_path / "out", "r", name)).equals(_sorted(expected[name]))
    converted = _written(tmp_path / "out", "r", "conversions")
    assert _sorted(converted).equals(_sorted(expected["conversions"]))  # nothing doubled


def test_the_live_page_gets_each_aggregations_finished_table_after_a_micro_batch(
    spark: Any, events: pa.Table, expected: dict[str, pa.Table]
) -> None:
    """What a :class:`~orderer.spark.stages.sink.BatchObserver` is given holds, under an
    aggregation's name, the finished table so far."""
    planned = _plan()
    kept: list[Any] = []
    states: dict[str, Any] = {}
    half = events.num_rows // 2
    try:
        run_plan(spark, planned, _events_frame(spark, events.slice(0, half)), 2, states, kept)
        results = run_plan(
            spark, planned, _events_frame(spark, events.slice(half)), 2, states, kept
        )
        tables = {
            step.stage.name: results[step.stage.name].toArrow().cast(step.stage.schema)
            for step in planned.aggregations
        }
    finally:
        for frame in kept:
            frame.unpersist()
    assert set(tables) == set(AGGREGATIONS)
    for name in AGGREGATIONS:
        assert isinstance(tables[name], pa.Table)
        assert tables[name].schema == _by_name()[name].schema
        assert _sorted(tables[name]).equals(_sorted(expected[name])), name
    assert [s.stage.name for s in planned.aggregations] == list(AGGREGATIONS)
    assert all(s.stage.order is Order.AGGREGATION for s in planned.aggregations)


FAILING = """
import pyarrow as pa
from orderer.stages import aggregation


def _finish(total):
    if total > {bad}:
        raise ValueError("too many events to finish")
    return pa.table({{"events": [total]}})


@aggregation(schema=[("events", pa.int64())], initial=int, combine=int.__add__, finish=_finish)
def counted(events, total):
    return total + events.num_rows
"""


def test_an_aggregation_failing_on_the_driver_ends_the_job_in_one_line_and_commits_nothing(
    spark: Any, finished_run: FinishedRun, events: pa.Table, tmp_path: Path
) -> None:
    """Its ``finish`` raises in a later micro-batch: the job's one line names the stage and the
    user's line, that batch is not marked done, and the job run again with the stage fixed
    resumes there and counts every event once."""
    module = tmp_path / "finishing_stages.py"
    module.write_text(textwrap.dedent(FAILING.format(bad=events.num_rows // 2)))
    flags = [
        "--target", finished_run.target, "--dt", str(DT), "--output", str(tmp_path / "out"),
        "--run", "r", "--consumer", "aggregation-failing", "--max-fragments-per-trigger", "300",
        "--stages", str(module), "--quiet",
    ]  # fmt: skip
    with pytest.raises(Exception) as failure:
        job.run(spark, JobConfig.from_argv(flags))
    line = stage_failure(str(failure.value))
    assert line is not None and line.startswith("stage counted failed: ValueError: too many")
    assert f"{module}:" in line and "raise ValueError" in line
    module.write_text(textwrap.dedent(FAILING.format(bad=10**9)))  # fixed: resumes
    job.run(spark, JobConfig.from_argv(flags))
    written = pq.read_table(stage_directory(str(tmp_path / "out"), "counted", "r"))
    assert written["events"].to_pylist() == [events.num_rows]  # every event, once
