"""``evb spark-job --follow-runs`` against a real ``evb serve`` serving two runs one after another,
the second with its clocks restarted at 0, without and with ``--reset-on-begin-run``
(docs/ordering.md, "Runs one after another"): the job builds run 7, keeps going after it ended,
builds run 8 once it begins, each run's events in its own partition (``events/run=<number>/``)
and none spanning two runs, a summary per run with the late fragments the contract gives, and
stops after ``--until-run``; a job started once both runs are in (its first micro-batch could
hold both) splits them all the same. Also the run-to-run decisions of
:mod:`orderer.spark.driver.runs`."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orderer.building.glom import fragment_rows
from orderer.client import OrderedStreamReader, begin_run, end_run
from orderer.errors import ConfigError
from orderer.job_config import JobConfig
from orderer.spark.driver import job, runs
from orderer.spark.live.board import Board
from orderer.spark.source import access
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_runs import DATA, _run_file, _send
from tests.spark.oracle import Event, events_of, fragments_of, glom

DT = 500
"""Glom window, ticks: the two sources' fragments of one step (1000 * i + 1, + 2) make one event."""
PER_RUN = 2 * (DATA + 2)
"""Fragments of one run: two sources, a begin-run barrier, DATA fragments, an end-run barrier."""


def _feed(target: str, tmp: Path, out: Path | None, failures: list[BaseException]) -> None:
    """Run 7, then run 8: with ``out``, once the job has written run 7's summary (it must not
    stop there)."""
    try:
        _send(target, _run_file(tmp / "run7.jsonl", 0.0))
        end_run(target)
        deadline = time.monotonic() + 90
        while out is not None and not (out / "runs" / "7" / "summary.json").exists():
            assert time.monotonic() < deadline, "run 7 was not built"
            time.sleep(0.1)
        assert begin_run(target) == runs.RunSpan(8, PER_RUN)
        _send(target, _run_file(tmp / "run8.jsonl", 10.0))
        end_run(target)
    except BaseException as error:  # for the test to see
        failures.append(error)


def _events(spark: Any, out: Path, run: int) -> list[Event]:
    """One run's events as a reader of the whole ``OUTPUT/events`` sees them."""
    from pyspark.sql import functions as F

    events = spark.read.parquet(str(out / "events"))
    return events_of(events.where(F.col("run") == run).drop("run").toArrow())


def _expected(target: str, first: int, until: int) -> list[Event]:
    """The sequential glom of one run's output alone."""
    rows = pa.Table.from_batches(
        [fragment_rows(b) for b in OrderedStreamReader(target, first, until=until)]
    )
    return glom(fragments_of(rows), DT)


@pytest.mark.parametrize(
    ("reset", "live"),
    [(False, True), (True, False)],
    ids=["without-reset-live", "with-reset-both-runs-in-first"],
)
def test_the_job_follows_two_runs_each_into_its_own_partition(
    reset: bool, live: bool, spark: Any, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    flags = ["--sources", "1,2", "--startup-delay", "0", "--build-window", "30", "--run", "7"]
    server = ServerProcess(
        tmp_path / "data", logs, *flags, *(["--reset-on-begin-run"] if reset else [])
    ).start()
    out = tmp_path / "out"
    failures: list[BaseException] = []
    feeder = threading.Thread(
        target=_feed, args=(server.target, tmp_path, out if live else None, failures)
    )
    try:
        feeder.start()
        if not live:
            feeder.join(60)
        board = Board() if live else None  # a live run with the live page: a page per run
        args = JobConfig.from_argv([
            "--target", server.target, "--dt", str(DT), "--output", str(out), "--poll", "0.2",
            "--follow-runs", "--until-run", "8", "--quiet",
            *(["--ui", "127.0.0.1:0"] if live else []),
        ])
        results = job.follow_runs(spark, args, None, board)
        feeder.join(60)
        assert not failures, failures
        assert [r.summary["run"] for r in results] == ["7", "8"]
        if board is not None:  # each run its own totals, from zero, ended
            assert json.loads(board.runs()) == {
                "runs": [{"run": "7", "state": "ended"}, {"run": "8", "state": "ended"}]
            }
            for run, result in zip(("7", "8"), results, strict=True):
                index = json.loads(board.index(run) or b"null")
                assert index["fragments"] == result.summary["fragments"] == PER_RUN
                assert index["events"] == result.summary["events"]
        assert sorted(p.name for p in (out / "events").iterdir()) == ["run=7", "run=8"]
        for run, first in ((7, 0), (8, PER_RUN)):
            built = _events(spark, out, run)
            # each run's events are the glom of its own output alone: none spans two runs
            assert built == _expected(server.target, first, first + PER_RUN), run
            assert all(first <= o < first + PER_RUN for e in built for o in e.offsets)
            summary = json.loads((out / "runs" / str(run) / "summary.json").read_text())
            assert summary["fragments"] == PER_RUN
            assert summary["run_offsets"] == {"start": first, "end": first + PER_RUN}
            assert (out / "runs" / str(run) / "report" / "index.html").is_file()
        late = [json.loads((out / "runs" / r / "summary.json").read_text())["late"]["fragments"]
                for r in ("7", "8")]
        # the contract: without the reset every ordinary fragment of run 8 below run 7's
        # high-water mark is late (all but the last); with it, nothing is
        assert late == [0, 0 if reset else 2 * DATA - 1]
    finally:
        feeder.join(60)
        server.stop()


def test_the_run_to_run_decisions() -> None:
    table = [runs.RunSpan(7, 0, 14), runs.RunSpan(10, 14, None)]
    done: set[int] = set()
    assert runs.next_run(table, done.__contains__, None) == table[0]
    assert runs.next_run(table, done.__contains__, 8) == table[0]
    done.add(7)
    assert runs.next_run(table, done.__contains__, 8) is None  # 10 is above --until-run 8
    # the numbers skipped 8: nothing up to it can come any more
    assert runs.finished(table, done.__contains__, 8)
    assert not runs.finished(table[:1], done.__contains__, 8)  # run 8 may still begin
    assert not runs.finished(table, done.__contains__, None)  # without --until-run: never
    assert access.run_end([runs.RunSpan(7, 0, 14)], 7) == 14
    with pytest.raises(ConfigError, match=r"run: is not in the orderer's run table \(runs: 7\)"):
        access.run_end([runs.RunSpan(7, 0, None)], 9)


def test_follow_stops_when_told_and_builds_only_whole_runs() -> None:
    built: list[int] = []
    stop = threading.Event()

    def build(span: runs.RunSpan) -> bool:
        built.append(span.run)
        stop.set()  # SIGTERM while run 7 is built
        return False

    table = [runs.RunSpan(7, 0, None)]
    runs.follow(lambda: table, lambda n: False, build, until=None, stopped=stop.is_set, poll=0)
    assert built == [7]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--until-run", "3"], "--until-run: needs --follow-runs"),
        (["--follow-runs", "--path", "."], "--follow-runs: needs --target"),
        (["--follow-runs", "--run", "a"], "--run: cannot be given with --follow-runs"),
        (["--follow-runs", "--until-run", "-1"], "--until-run: must be a run number >= 0"),
    ],
)
def test_follow_flags_are_checked(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = [] if "--path" in flags else ["--target", "127.0.0.1:1"]
    assert job.main([*where, *flags, "--dt", "5", "--output", "o"]) == 2
    assert capsys.readouterr().err.startswith(f"evb spark-job: {message}")
