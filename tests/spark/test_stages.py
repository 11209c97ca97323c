"""``evb spark-job --stages`` (issue 30): every stage's results equal a sequential run of the
same stages over the ordered event stream (the small oracle below), at any ``--partitions``, any
``--max-fragments-per-trigger``, streamed or read at once, with the late backlog and barriers of
the conftest's run; and after a restart from the checkpoint, nothing lost or doubled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import build_events
from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.stages.runner import stage_job_group
from orderer.spark.stages.sink import stage_directory
from orderer.stages.load import load_stages
from tests.spark.conftest import DT, FinishedRun
from tests.spark.stage_oracles import sequential, written

STAGES = Path(__file__).with_name("stages_module.py")


@pytest.fixture(scope="module")
def expected(finished_run: FinishedRun) -> dict[str, list[tuple[Any, ...]]]:
    events = pa.Table.from_batches([build_events(finished_run.fragments, GlomConfig(DT))])
    assert events.num_rows > 100 and pc.sum(events.column("late")).as_py() > 0  # late ones
    assert pc.sum(pc.not_equal(events.column("barrier"), 0)).as_py() > 0  # and barriers
    return sequential(events, load_stages(STAGES))


def _tasks(spark: Any, stage: str) -> set[tuple[int, int]]:
    """(Spark stage id, its tasks) of every Spark stage that ran for an evb stage so far."""
    tracker = spark.sparkContext.statusTracker()
    found = set()
    for job_id in tracker.getJobIdsForGroup(stage_job_group(stage)):
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage_id)
            if stage_info is not None and stage_info.numTasks:
                found.add((stage_id, stage_info.numTasks))
    return found


def _run(spark: Any, *flags: str) -> job.JobResult:
    return job.run(spark, JobConfig.from_argv([*flags, "--stages", str(STAGES), "--quiet"]))


@pytest.mark.parametrize(("partitions", "per_trigger"), [(1, 400), (3, 250), (2, None)])
def test_streamed_stages_equal_a_sequential_run(
    spark: Any,
    finished_run: FinishedRun,
    expected: dict[str, list[tuple[Any, ...]]],
    tmp_path: Path,
    partitions: int,
    per_trigger: int | None,
) -> None:
    trigger = [] if per_trigger is None else ["--max-fragments-per-trigger", str(per_trigger)]
    names = [stage.name for stage in load_stages(STAGES)]
    before = {name: _tasks(spark, name) for name in names}
    result = _run(
        spark, "--target", finished_run.target, "--dt", str(DT), "--output", str(tmp_path),
        "--run", "r", "--partitions", str(partitions), "--consumer", f"stages-{partitions}",
        *trigger,
    )
    if per_trigger is not None:
        assert result.batches > 3  # several micro-batches: state crossed them
    assert written(tmp_path, "r", load_stages(STAGES)) == expected
    assert {name: entry["rows"] for name, entry in result.summary["stages"].items()} == {
        name: len(rows) for name, rows in expected.items()
    }
    # order kept only where it is needed: the order-insensitive stage and the sequencer run on
    # every partition of the source, never coalesced; the keyed stage on --partitions
    # partitions by key, the global one on one
    tasks = {name: _tasks(spark, name) - before[name] for name in names}
    assert {count for _, count in tasks["sizes"]} == {partitions}
    assert {count for _, count in tasks["fragments"]} == {partitions}
    assert partitions in {count for _, count in tasks["gaps"]}
    assert 1 in {count for _, count in tasks["running"]}
    # the events, written by the stages' sink, are the run's, once, beside each other
    events = pq.read_table(result.events_path, columns=["event"]).column("event").to_numpy()
    built = build_events(finished_run.fragments, GlomConfig(DT))
    assert np.sort(events).tolist() == built.column("event").to_pylist()
    barriers = pc.sum(pc.not_equal(built.column("barrier"), 0)).as_py()
    assert result.summary["events"] == built.num_rows - barriers  # the summary's: no barriers


def test_stages_of_a_finished_run_read_at_once_equal_a_sequential_run(
    spark: Any,
    finished_run: FinishedRun,
    expected: dict[str, list[tuple[Any, ...]]],
    tmp_path: Path,
) -> None:
    _run(
        spark, "--path", str(finished_run.data_dir), "--dt", str(DT), "--output", str(tmp_path),
        "--run", "r", "--partitions", "3",
    )
    assert written(tmp_path, "r", load_stages(STAGES)) == expected


FAILING = '''
import pyarrow as pa
from orderer.stages import order_sensitive

BAD_EVENT = {bad}


@order_sensitive(schema=[("event", pa.int64())])
def picky(events, state):
    if BAD_EVENT in events.column("event").to_pylist():
        raise ValueError("no calibration for this event")
    return events.select(["event"]), state
'''


def test_a_failing_stage_names_itself_the_events_and_the_line_and_commits_nothing(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    """An exception in a stage ends the job with one line naming the stage, the offset of the
    events it was given and the user's own line; the micro-batch is not committed, so the job
    run again with the stage fixed resumes there and the stage's results are whole."""
    events = build_events(finished_run.fragments, GlomConfig(DT)).column("event").to_pylist()
    bad = events[len(events) // 2]
    module = tmp_path / "picky_stages.py"
    module.write_text(FAILING.format(bad=bad))
    flags = [
        "--target", finished_run.target, "--dt", str(DT), "--output", str(tmp_path / "out"),
        "--run", "r", "--consumer", "stages-failing", "--max-fragments-per-trigger", "200",
        "--stages", str(module), "--quiet",
    ]
    with pytest.raises(Exception) as failure:  # Spark's own wrapping of the stage's error
        job.run(spark, JobConfig.from_argv(flags))
    from orderer.spark.stages.runner import stage_failure

    line = stage_failure(str(failure.value))
    assert line is not None
    assert line.startswith("stage picky failed on the events from offset ")
    assert "ValueError: no calibration for this event" in line
    assert f"{module}:" in line and "raise ValueError" in line
    module.write_text(FAILING.format(bad=-1))  # fixed: the rerun resumes from the checkpoint
    job.run(spark, JobConfig.from_argv(flags))
    rows = pq.read_table(stage_directory(str(tmp_path / "out"), "picky", "r")).column("event")
    assert sorted(rows.to_pylist()) == events  # every event once: none lost, none doubled


MISDECLARED = '''
import numpy as np
import pyarrow as pa
from orderer.stages import order_insensitive


@order_insensitive(schema=[("event", pa.int64()), ("index", pa.int64())])
def numbered(events):
    """Numbers the events it is given: that depends on how they are split."""
    return pa.table({"event": events.column("event"), "index": np.arange(events.num_rows)})


@order_insensitive(schema=[("event", pa.int64()), ("index", pa.int64())], reads="numbered")
def kept(rows):
    return rows
'''


def test_check_order_names_a_stage_wrongly_declared_order_insensitive(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "misdeclared_stages.py"
    module.write_text(MISDECLARED)
    config = JobConfig.from_argv([
        "--path", str(finished_run.data_dir), "--dt", str(DT), "--output", str(tmp_path),
        "--stages", str(module), "--check-order", "--max-fragments-per-trigger", "600",
    ])
    assert job.check_stages_order(spark, config) == 1
    out = capsys.readouterr().out.splitlines()
    assert "stage(s) run twice over the first" in out[0]
    numbered = next(line for line in out if line.split()[0] == "numbered")
    assert "DIFFERS" in numbered and "declared order-insensitive" in numbered
    assert "differs, reading numbered" in next(line for line in out if line.split()[0] == "kept")


def test_check_order_passes_stages_declared_as_they_behave(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = JobConfig.from_argv([
        "--target", finished_run.target, "--dt", str(DT), "--output", str(tmp_path),
        "--stages", str(STAGES), "--check-order",
    ])
    assert job.check_stages_order(spark, config) == 0
    out = capsys.readouterr().out
    assert out.count("same (") == 4 and "DIFFERS" not in out


def test_a_run_resumes_only_with_the_stages_it_began_with(spark: Any, tmp_path: Path) -> None:
    """Their states are in the checkpoint and their sink writes the events: other stages (or
    none, or stages where there were none) are refused naming --stages; the same stages with
    their code changed resume."""
    from orderer.errors import ConfigError
    from orderer.spark.driver.checks import glom_config, stages_plan
    from orderer.spark.driver.resume import building, check_resumed_building
    from orderer.spark.output.layout import Layout

    def record(*stages: str) -> tuple[Layout, dict[str, str]]:
        flags = ["--target", "h:1", "--dt", "5", "--output", str(tmp_path), "--run", "r", *stages]
        config = JobConfig.from_argv(flags)
        return Layout.of(config), building(config, glom_config(config), stages_plan(config))

    layout, began = record("--stages", str(STAGES))
    Path(layout.building).parent.mkdir(parents=True)
    Path(layout.building).write_text(json.dumps(began))
    check_resumed_building(spark, layout, record("--stages", str(STAGES))[1])  # the same
    other = tmp_path / "other_stages.py"
    other.write_text(STAGES.read_text().replace('key="source"', 'key="event"'))
    for stages in ([], ["--stages", str(other)]):
        with pytest.raises(ConfigError, match="--stages: run r began with --stages"):
            check_resumed_building(spark, layout, record(*stages)[1])


def test_a_declared_histogram_counts_the_stages_results_in_the_summary_and_the_report(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    """``gaps`` declares a histogram of its ``gap`` column: the summary's counts (underflow
    first, overflow last) are numpy's histogram of the stage's Parquet results, and the report
    has its plot, listed under "Stages", and the boost-histogram pickled beside it."""
    import pickle

    from tests.spark.stages_module import GAP_HISTOGRAM as spec

    result = _run(
        spark, "--path", str(finished_run.data_dir), "--dt", str(DT), "--output", str(tmp_path),
        "--run", "h", "--partitions", "3",
    )
    gap = pq.read_table(stage_directory(str(tmp_path), "gaps", "h")).column("gap").to_numpy()
    inside, _ = np.histogram(gap[(gap >= spec.low) & (gap < spec.high)], spec.bins,
                             (spec.low, spec.high))
    expected = [int((gap < spec.low).sum()), *inside.tolist(), int((gap >= spec.high).sum())]
    assert expected[-1] > 0 and max(inside) > 0  # a stall's gap overflows; the rest inside
    entry = result.summary["stages"]["gaps"]["histograms"]["gap"]
    assert entry["counts"] == expected
    assert entry["entries"] == gap.size == result.summary["stages"]["gaps"]["rows"]
    assert (entry["underflow"], entry["overflow"]) == (expected[0], expected[-1])
    assert (entry["bins"], entry["low"], entry["high"]) == (spec.bins, spec.low, spec.high)
    assert entry["plot"] == "stage_gaps_gap.png" and entry["data"] == "stage_gaps_gap.pkl"
    assert set(result.summary["stages"]) == {"fragments", "gaps", "running", "sizes"}
    assert all("histograms" not in result.summary["stages"][s] for s in ("sizes", "running"))
    on_disk = json.loads(Path(result.summary_path).read_text())
    assert on_disk["stages"]["gaps"]["histograms"]["gap"]["counts"] == expected
    report = Path(result.report_path).parent
    assert (report / "stage_gaps_gap.png").read_bytes().startswith(b"\x89PNG")
    with (report / "stage_gaps_gap.pkl").open("rb") as file:
        histogram = pickle.load(file)
    assert histogram.view(flow=True).tolist() == expected
    assert histogram.axes[0].name == "gap" and histogram.axes[0].label == "gap (ticks)"
    assert histogram.metadata["stage"] == "gaps" and histogram.metadata["run"] == "h"
    page = (report / "index.html").read_text()
    assert "<h2>Stages</h2>" in page
    assert page.index("<h2>Stages</h2>") < page.index('src="stage_gaps_gap.png"')
    assert 'href="stage_gaps_gap.pkl"' in page


def test_stage_histograms_bin_as_boost_histogram_does_nulls_left_out_nan_in_the_overflow(
    spark: Any,
) -> None:
    """The bin index is computed by Spark (orderer/spark/stages/stage_histograms.py), not by
    boost-histogram: the counts equal boost-histogram's own fill of the same values, at the
    edges, just below them, at ``high`` (the overflow), for infinities and NaN; nulls are not
    counted."""
    import boost_histogram as bh

    from orderer.spark.stages.stage_histograms import fill
    from orderer.stages import Histogram

    rng = np.random.default_rng(7)
    spec = Histogram("x", 7, -0.3, 1.1)
    edges = np.linspace(spec.low, spec.high, spec.bins + 1)
    values = np.concatenate([
        rng.uniform(-0.5, 1.3, 2000), edges, np.nextafter(edges, -np.inf),
        np.nextafter(edges, np.inf), [np.inf, -np.inf, np.nan, 0.0, -0.0],
    ])
    ints = Histogram("n", 10, 0, 3)  # bins a third of a unit wide: values fall inside bins
    n = rng.integers(-2, 5, values.size)
    rows = [*zip(values.tolist(), n.tolist(), strict=True), (None, None)]
    frame = spark.createDataFrame(rows, "x double, n long")
    counted = fill(frame, [spec, ints])
    for histogram, data, got in ((spec, values, counted[0]), (ints, n, counted[1])):
        boost = bh.Histogram(bh.axis.Regular(histogram.bins, histogram.low, histogram.high),
                             storage=bh.storage.Int64())
        boost.fill(np.asarray(data, np.float64))
        assert got.tolist() == boost.view(flow=True).tolist()
        assert got.sum() == data.size  # the null row left out
    assert counted[0][-1] >= spec.bins + 3  # high itself, the edges above it, inf and NaN


def test_several_tables_rows_and_histograms_are_counted_in_one_job(spark: Any) -> None:
    """``fill_many`` (the live page's count of every stage after each micro-batch, and the end
    of run's): each table's rows (null values too) and each of its histograms as ``fill``
    counts them alone, a table without histograms and an empty one included."""
    from orderer.spark.stages.stage_histograms import fill, fill_many
    from orderer.stages import Histogram, Histogram2D

    one = Histogram("x", 4, 0, 8)
    two = Histogram2D(Histogram("x", 2, 0, 8), Histogram("y", 3, 0, 3))
    frame = spark.createDataFrame(
        [(1.0, 0), (3.0, 2), (9.0, 1), (None, 1), (-1.0, None)], "x double, y long"
    )
    empty = frame.where("x > 100")
    got = fill_many([(frame, [one, two]), (frame.select("y"), []), (empty, [one])])
    assert [rows for rows, _ in got] == [5, 5, 0]
    alone = fill(frame, [one, two])
    assert [c.tolist() for c in got[0][1]] == [c.tolist() for c in alone]
    assert got[0][1][0].tolist() == [1, 1, 1, 0, 0, 1] and got[1][1] == []
    assert got[2][1][0].tolist() == [0] * 6
