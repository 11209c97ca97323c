"""``evb spark-job --ui`` (issue 40): the run's running totals after each micro-batch equal a
sequential count of the events built so far, and at the end what the run's summary counts; the
page's JSON gives the totals; a killed job resumes its totals from the checkpoint."""

from __future__ import annotations

import collections
import copy
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from orderer.building.glom import EVENT_SCHEMA
from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.live.board import Board
from orderer.spark.live.totals import RunTotals
from orderer.spark.stages.sink import stage_directory
from orderer.stages.load import load_stages
from orderer.stages.plan import plan
from tests.spark.conftest import DT, FinishedRun

STAGES = Path(__file__).with_name("stages_module.py")
AGGREGATIONS = Path(__file__).with_name("aggregation_stages.py")


class RecordingBoard(Board):
    """A board that keeps a copy of every publication."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.published: list[RunTotals] = []

    def publish(self, totals: RunTotals) -> None:
        self.published.append(copy.deepcopy(totals))
        super().publish(totals)


def _events_by_batch(events: Path) -> dict[int, pa.Table]:
    """The stages sink names each micro-batch's event files ``part-b<batch>-...``."""
    out: dict[int, list[pa.Table]] = collections.defaultdict(list)
    for path in sorted(events.glob("part-b*.parquet")):
        batch = int(path.name.removeprefix("part-b")[:12])
        columns = ["multiplicity", "barrier", "late", "fragments"]
        out[batch].append(pq.read_table(path, columns=columns))
    return {b: pa.concat_tables(tables) for b, tables in sorted(out.items())}


def _counted(events: pa.Table) -> dict[str, Any]:
    """The oracle: a plain count of some events (numpy, no Spark)."""
    barrier = events.column("barrier").to_numpy()
    multiplicity = events.column("multiplicity").to_numpy()[barrier == 0]
    flat = pc.list_flatten(events.column("fragments").combine_chunks())
    source = flat.field("source").to_numpy()
    late = flat.field("late").to_numpy(zero_copy_only=False)
    return {
        "multiplicity": dict(collections.Counter(int(m) for m in multiplicity)),
        "fragments": dict(collections.Counter(int(s) for s in source)),
        "late": int(late.sum()),
        "events": int((barrier == 0).sum()),
        "barrier_rows": int((barrier != 0).sum()),
    }


@pytest.mark.parametrize(("partitions", "per_trigger"), [(1, 300), (3, 250)])
def test_running_totals_equal_the_events_built_so_far_and_the_summary_at_the_end(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, partitions: int, per_trigger: int
) -> None:
    stages = plan(load_stages(STAGES), EVENT_SCHEMA)
    board = RecordingBoard(stages)
    config = JobConfig.from_argv([
        "--target", finished_run.target, "--dt", str(DT), "--output", str(tmp_path),
        "--run", "r", "--partitions", str(partitions), "--consumer", f"live-{partitions}",
        "--max-fragments-per-trigger", str(per_trigger), "--stages", str(STAGES),
        "--ui", "127.0.0.1:0", "--quiet",
    ])  # fmt: skip
    result = job.run(spark, config, stages, board)
    assert result.batches > 3
    batches = _events_by_batch(Path(result.events_path))
    published = [t for t in board.published if t.batch >= 0]
    assert [t.batch for t in published] == sorted(batches)  # each micro-batch once, in order
    so_far: list[pa.Table] = []
    for totals, (batch, events) in zip(published, batches.items(), strict=True):
        so_far.append(events)
        expected = _counted(pa.concat_tables(so_far))
        assert totals.batch == batch
        assert totals.multiplicity == expected["multiplicity"]
        assert {s: n for s, (n, _) in totals.sources.items()} == expected["fragments"]
        assert totals.late_fragments == expected["late"]
        assert totals.events == expected["events"]
        assert totals.barrier_rows == expected["barrier_rows"]
    # at the end: what the summary counts from the events as written, bin for bin
    last = published[-1]
    summary = result.summary
    assert {str(m): n for m, n in last.multiplicity.items()} == summary["multiplicity"]["histogram"]
    assert last.late_fragments == summary["late"]["fragments"] > 0
    assert last.events_with_late == summary["late"]["events_with_late"]
    assert last.barrier_rows == summary["barrier_rows"] > 0
    report = Path(result.report_path).parent
    with (report / "dt_spectrum.pkl").open("rb") as file:
        spectrum = pickle.load(file)
    with (report / "coincidences.pkl").open("rb") as file:
        coincidences = pickle.load(file)
    live_spectrum, live_coincidences = last.pair_histograms({})
    assert np.array_equal(live_spectrum.view(flow=True), spectrum.view(flow=True))
    assert np.array_equal(live_coincidences.values(), coincidences.values())
    gap = summary["stages"]["gaps"]["histograms"]["gap"]["counts"]
    assert last.stages["gaps"].histograms["gap"].tolist() == gap
    assert {n: s.rows for n, s in last.stages.items()} == {
        n: e["rows"] for n, e in summary["stages"].items()
    }
    # the page's documents say the same
    index = json.loads(board.index("r") or b"null")
    assert index["state"] == "ended" and index["batch"] == last.batch
    assert index["fragments"] == summary["fragments"] and index["events"] == summary["events"]
    page_gap = json.loads(board.histogram("r", "stage_gaps_gap") or b"null")
    assert [page_gap["underflow"], *page_gap["counts"], page_gap["overflow"]] == gap
    assert page_gap["entries"] == sum(gap) and page_gap["batch"] == last.batch
    page_spectrum = json.loads(board.histogram("r", "dt_spectrum") or b"null")
    assert page_spectrum["counts"] == spectrum.view(flow=False).sum(axis=(0, 1)).tolist()
    page_matrix = json.loads(board.histogram("r", "coincidences") or b"null")
    assert page_matrix["counts"] == coincidences.values().tolist()
    assert page_matrix["x"]["categories"] == [str(s) for s in coincidences.axes[0]]
    # the 2D one (source x gap): numpy's histogram2d of the stage's results, flows included
    from tests.spark.stages_module import SOURCE_GAP_HISTOGRAM as spec

    rows = pq.read_table(stage_directory(str(tmp_path), "gaps", "r"))
    inf = np.inf
    edges = [[-inf, *np.linspace(axis.low, axis.high, axis.bins + 1), inf]
             for axis in (spec.x, spec.y)]  # fmt: skip
    expected2d, _, _ = np.histogram2d(rows["source"].to_numpy(), rows["gap"].to_numpy(), edges)
    assert expected2d[1:-1, 1:-1].sum() > 0 and expected2d.sum() == rows.num_rows
    entry = summary["stages"]["gaps"]["histograms"]["source,gap"]
    assert entry["counts"] == expected2d.astype(int).tolist()
    assert entry["outside"] == rows.num_rows - int(expected2d[1:-1, 1:-1].sum())
    assert last.stages["gaps"].histograms["source,gap"].tolist() == entry["counts"]
    with (report / "stage_gaps_source_gap.pkl").open("rb") as file:
        assert pickle.load(file).view(flow=True).tolist() == entry["counts"]
    assert (report / "stage_gaps_source_gap.png").read_bytes().startswith(b"\x89PNG")
    page2d = json.loads(board.histogram("r", "stage_gaps_source_gap") or b"null")
    assert page2d["dimensions"] == 2 and page2d["outside"] == entry["outside"]
    assert page2d["counts"] == expected2d[1:-1, 1:-1].astype(int).tolist()


def test_a_run_resumes_only_as_it_began_with_or_without_the_live_page(
    spark: Any, tmp_path: Path
) -> None:
    """A second job into the same run's checkpoint with ``--ui`` where the run began without
    it (or the other way round) is refused in words naming ``--ui``, before anything is read."""
    from orderer.building.config import GlomConfig
    from orderer.errors import ConfigError
    from orderer.spark.driver.resume import building, check_resumed_building
    from orderer.spark.output.layout import Layout

    for began, again, said in (([], ["--ui", "0"], "without"), (["--ui", "0"], [], "with")):
        base = ["--target", "h:1", "--dt", "10", "--output", str(tmp_path / said), "--run", "r"]
        first, second = (JobConfig.from_argv([*base, *flags]) for flags in (began, again))
        layout = Layout.of(first)
        Path(layout.building).parent.mkdir(parents=True)
        Path(layout.building).write_text(json.dumps(building(first, GlomConfig(10))))
        check_resumed_building(spark, layout, building(first, GlomConfig(10)))  # as it began
        with pytest.raises(ConfigError) as refused:
            check_resumed_building(spark, layout, building(second, GlomConfig(10)))
        assert refused.value.parameter == "--ui" and refused.value.value is None
        assert refused.value.why.startswith(
            f"run r began {said} --ui and resumes from its checkpoint, where the live page's "
            f"totals are kept from a run's start or not at all: run it {said} --ui"
        )
