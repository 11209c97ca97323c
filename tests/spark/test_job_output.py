"""Several runs share one ``--output`` (PySpark local mode, the job's ``run``): each run writes only
its own directories (``events/run=<run>/``, ``runs/<run>/``); doing a run again with ``--path``
replaces exactly that run; a streamed run has its own checkpoint, so a second run is not taken
for the first one resuming, and doing a streamed run again resumes it without duplicates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orderer.errors import ConfigError
from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.output import writer
from tests.spark.conftest import DT, FinishedRun
from tests.spark.logdata import write_ordered_log
from tests.spark.oracle import Event, events_of, fragments_of, glom, random_stream


def _job(spark: Any, *flags: str) -> job.JobResult:
    return job.run(spark, JobConfig.from_argv([*flags, "--quiet"]))


def _events(spark: Any, out: Path, run: str) -> list[Event]:
    """One run's events as a reader of the whole ``OUTPUT/events`` sees them."""
    from pyspark.sql import functions as F

    events = spark.read.parquet(str(out / "events"))
    return events_of(events.where(F.col("run") == run).drop("run").toArrow())


def _assert_written_for_speed(events: Path) -> None:
    """Every Parquet file of a run: the columns of ``writer.UNIQUE_COLUMNS`` exist (a renamed
    column would silently lose its setting) and carry no dictionary, even where one would have
    been small (the payloads of ``random_stream`` repeat); the sources keep theirs. The job's
    batch and streamed writes take their format and options from one place
    (``writer.events_writer``)."""
    import pyarrow.parquet as pq

    written = sorted(events.glob("*.parquet"))
    assert written
    for path in written:
        meta = pq.ParquetFile(path).metadata
        if meta.num_row_groups == 0:
            continue
        group = meta.row_group(0)
        dictionary = {
            group.column(i).path_in_schema: group.column(i).dictionary_page_offset is not None
            for i in range(group.num_columns)
        }
        assert set(writer.UNIQUE_COLUMNS) <= set(dictionary), path
        assert not any(dictionary[column] for column in writer.UNIQUE_COLUMNS), (path, dictionary)
        assert dictionary["fragments.list.element.source"], path


def _files(directory: Path) -> dict[str, float]:
    return {str(p.relative_to(directory)): p.stat().st_mtime for p in directory.rglob("*")}


def test_batch_runs_share_an_output_and_doing_one_again_replaces_only_it(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    stream = random_stream(5, 3000)
    other = write_ordered_log(tmp_path / "other", stream)
    out = tmp_path / "out"
    _job(spark, "--path", str(finished_run.data_dir), "--dt", str(DT), "--output", str(out),
         "--run", "a")
    _job(spark, "--path", str(other), "--dt", "100", "--output", str(out), "--run", "b")
    assert _events(spark, out, "a") == glom(fragments_of(finished_run.fragments), DT)
    b_before = {**_files(out / "events" / "run=b"), **_files(out / "runs" / "b")}

    # run a again, from other data and with another window: a is replaced, b is not touched
    result = _job(spark, "--path", str(other), "--dt", "50", "--output", str(out), "--run", "a")
    assert _events(spark, out, "a") == glom(fragments_of(stream), 50)
    _assert_written_for_speed(out / "events" / "run=a")  # its payloads repeat
    assert _events(spark, out, "b") == glom(fragments_of(stream), 100)
    assert {**_files(out / "events" / "run=b"), **_files(out / "runs" / "b")} == b_before
    assert sorted(p.name for p in (out / "events").iterdir()) == ["run=a", "run=b"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["a", "b"]
    for run, dt in (("a", 50), ("b", 100)):
        summary = json.loads((out / "runs" / run / "summary.json").read_text())
        assert (summary["run"], summary["glom"]["dt"], summary["fragments"]) == (run, dt, 3000)
        assert f"evb run {run}" in (out / "runs" / run / "report" / "index.html").read_text()
    assert result.summary_path == f"{out}/runs/a/summary.json"
    assert result.report_path == f"{out}/runs/a/report/index.html"
    assert result.events_path == f"{out}/events/run=a"


def test_streamed_runs_have_their_own_checkpoint_and_resume_only_their_own(
    spark: Any, finished_run: FinishedRun, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    expected = glom(fragments_of(finished_run.fragments), DT)
    flags = ("--target", finished_run.target, "--dt", str(DT), "--output", str(out),
             "--poll", "0.2")
    for run in ("s1", "s2"):  # the second run reads the whole run: a checkpoint of its own
        result = _job(spark, *flags, "--run", run)
        assert _events(spark, out, run) == expected, run
        assert result.summary["fragments"] == finished_run.fragments.num_rows
    assert (out / "runs" / "s1" / "checkpoint").is_dir()
    assert (out / "runs" / "s2" / "checkpoint").is_dir()
    _assert_written_for_speed(out / "events" / "run=s1")
    s2_before = _files(out / "events" / "run=s2")

    # a driver that died in the middle of a micro-batch left a file the sink never committed
    committed = sorted((out / "events" / "run=s1").glob("part-*.parquet"))[0]
    shutil.copy(committed, committed.with_name("part-99999-left-by-a-dead-driver.parquet"))
    result = _job(spark, *flags, "--run", "s1")  # resumes from its checkpoint: nothing twice
    assert _events(spark, out, "s1") == expected
    assert not list((out / "events" / "run=s1").glob("part-99999-*"))
    assert result.summary["fragments"] == finished_run.fragments.num_rows
    assert _files(out / "events" / "run=s2") == s2_before

    # resuming with another way of building would mix two kinds of events in one run: refused,
    # and the run's events stay as they were
    s1_before = _files(out / "events" / "run=s1")
    for changed in (["--dt", str(DT + 1)], ["--timestamp-policy", "latest"]):
        argv = [*flags, "--run", "s1", *changed, "--quiet"]  # the flag given last wins
        with pytest.raises(ConfigError, match=f"^{changed[0]}: run s1 began with {changed[0]} "):
            job.run(spark, JobConfig.from_argv(argv))
    assert _files(out / "events" / "run=s1") == s1_before

    # a run begun when --max-fragments N meant events of up to N fragments (its record says
    # nothing of glom's N + 1) built what glom's N - 1 builds: the default is refused, naming
    # the value that resumes it the same way, and that value resumes it
    record = out / "runs" / "s1" / "building.json"
    began = json.loads(record.read_text())
    began.pop("maxFragmentsMeaning")
    record.write_text(json.dumps({**began, "maxFragments": "1000"}))
    record.with_name(f".{record.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    argv = [*flags, "--run", "s1", "--quiet"]
    refused = r"^--max-fragments: run s1 began with --max-fragments 999 "
    with pytest.raises(ConfigError, match=refused):
        job.run(spark, JobConfig.from_argv(argv))
    job.run(spark, JobConfig.from_argv([*argv, "--max-fragments", "999"]))
    assert _events(spark, out, "s1") == expected


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_new_streamed_run_replaces_what_a_run_of_the_same_name_left(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, checkpoint: bool
) -> None:
    """Without its checkpoint a streamed run starts afresh: the events a batch run of the same
    name left are replaced, not added to."""
    out = tmp_path / "out"
    stale = write_ordered_log(tmp_path / "stale", random_stream(9, 500))
    _job(spark, "--path", str(stale), "--dt", "100", "--output", str(out), "--run", "x")
    flags = ["--target", finished_run.target, "--dt", str(DT), "--output", str(out),
             "--run", "x", "--poll", "0.2"]
    if checkpoint:
        flags += ["--checkpoint", str(tmp_path / "elsewhere")]
    _job(spark, *flags)
    assert _events(spark, out, "x") == glom(fragments_of(finished_run.fragments), DT)
    assert (tmp_path / "elsewhere").is_dir() == checkpoint
