"""``evb spark-job --check-order`` on the stages a user brings (issue 40): a stages file in a
directory of its own (not the working directory, so not importable by the executors), every
shipped example (``examples/*.py``, over a run with physics), aggregations (their finished
results compared), and a stage that numbers its rows while declared order-insensitive, which
the check must still name."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orderer.apps.send import send_synthetic
from orderer.client import end_run
from orderer.job_config import JobConfig
from orderer.replay.physics import Physics
from orderer.replay.synthetic import SyntheticRun
from orderer.spark.driver import job
from orderer.stages.load import load_stages
from tests.e2e.conftest import ServerProcess
from tests.spark.conftest import DT, FinishedRun

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PHYSICS_RUN = SyntheticRun(
    n_sources=5, fragments_per_source=400, rate=200.0, batch_size=20, sync_barriers=2,
    payload_size=16, physics=Physics(), seed=40,
)  # fmt: skip
"""Two seconds with physics (source 1 the pixel detector, 5 the scalers): what the examples
read from the payload."""
PHYSICS_DT = 2_000
"""Glom window of the physics run, ticks (the demo's)."""


@pytest.fixture(scope="module")
def physics_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The data directory of an orderer that has run :data:`PHYSICS_RUN` to its end."""
    base = tmp_path_factory.mktemp("physics-run")
    logs = base / "logs"
    logs.mkdir()
    server = ServerProcess(
        base / "data", logs, "--build-window", "0.1", "--startup-delay", "0.1",
        "--sources", ",".join(map(str, PHYSICS_RUN.source_ids)),
    ).start()  # fmt: skip
    try:
        send_synthetic(server.target, PHYSICS_RUN, speed=0.0, progress=False)
        end_run(server.target)
    finally:
        server.stop()
    yield base / "data"


def _check(spark: Any, data: Path, stages: Path, output: Path, dt: int = DT) -> int:
    config = JobConfig.from_argv([
        "--path", str(data), "--dt", str(dt), "--output", str(output), "--stages", str(stages),
        "--check-order",
    ])  # fmt: skip
    return job.check_stages_order(spark, config)


def _verdicts(out: str) -> dict[str, str]:
    """The check's lines by stage name (the first line is its header)."""
    lines = out.strip().splitlines()
    assert "stage(s) run twice over the first" in lines[0], out
    return {line.split()[0]: line for line in lines[1:]}


HELPED = '''
import pyarrow as pa
import pyarrow.compute as pc
from orderer.stages import order_insensitive


class Gate:
    """A module-level class: pickled by reference unless the module travels by value."""

    lowest = 2


def _kept(events):
    """A module-level helper the stage calls by name (the same)."""
    return events.filter(pc.greater_equal(events["multiplicity"], Gate.lowest))


@order_insensitive(schema=[("event", pa.int64()), ("multiplicity", pa.int64())])
def coincidences(events):
    return _kept(events).select(["event", "multiplicity"])
'''


def test_a_stages_file_in_another_directory_is_checked(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its module is nowhere on the executors' path: what its stage refers to by name (a helper,
    a class) reaches them by value, as in the job itself (it ended in a ModuleNotFoundError from
    the executors, a 185-line traceback, where the job without --check-order ran)."""
    elsewhere = tmp_path / "lab" / "analysis"
    elsewhere.mkdir(parents=True)
    module = elsewhere / "helped_stages.py"
    module.write_text(textwrap.dedent(HELPED))
    assert Path.cwd() not in module.parents
    assert _check(spark, finished_run.data_dir, module, tmp_path / "out") == 0
    verdicts = _verdicts(capsys.readouterr().out)
    assert set(verdicts) == {"coincidences"}
    assert "order-insensitive  same (" in verdicts["coincidences"]


def test_every_shipped_example_passes(
    spark: Any, physics_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Their declarations hold: each stage gives the same results in stream order in one
    partition as dealt round-robin into several (an aggregation its finished table). One check
    of ``physics.py``, which runs every other example's stages (checked below), in one job."""
    assert _check(spark, physics_data, EXAMPLES / "physics.py", tmp_path, PHYSICS_DT) == 0
    verdicts = _verdicts(capsys.readouterr().out)
    assert verdicts and all(" same (" in line for line in verdicts.values()), verdicts
    rows = {name: int(line.split("same (")[1].split()[0].replace(",", ""))
            for name, line in verdicts.items()}  # fmt: skip
    assert all(count > 0 for count in rows.values()), rows  # every stage had rows to compare
    assert "aggregation" in verdicts["energy_histogram"]
    examples = {p.stem for p in EXAMPLES.glob("*.py")} - {"physics"}
    ran = {stage.function.__module__ for stage in load_stages(EXAMPLES / "physics.py")}
    assert examples <= ran, examples - ran  # every example's stages were among them


COUNTED = '''
import numpy as np
import pyarrow as pa
from orderer.stages import order_insensitive

_NEXT = [0]  # a global counter: each task that runs the stage has its own


@order_insensitive(schema=[("event", pa.int64()), ("number", pa.int64())])
def numbered(events):
    """Numbers the rows it is given, on from the rows it was given before."""
    start = _NEXT[0]
    _NEXT[0] += events.num_rows
    return pa.table({"event": events["event"], "number": np.arange(start, _NEXT[0])})


@order_insensitive(schema=[("event", pa.int64())])
def untouched(events):
    return events.select(["event"])
'''


def test_a_stage_numbering_its_rows_declared_order_insensitive_is_named(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "counted_stages.py"
    module.write_text(textwrap.dedent(COUNTED))
    assert _check(spark, finished_run.data_dir, module, tmp_path / "out") == 1
    verdicts = _verdicts(capsys.readouterr().out)
    assert "DIFFERS" in verdicts["numbered"]
    assert "declared order-insensitive" in verdicts["numbered"]
    assert "declare it order_sensitive" in verdicts["numbered"]
    assert " same (" in verdicts["untouched"]


AGGREGATIONS = '''
import numpy as np
import pyarrow as pa
from orderer.stages import aggregation


def _histogram(counts):
    return pa.table({"multiplicity": np.nonzero(counts)[0], "count": counts[counts > 0]})


@aggregation(
    schema=[("multiplicity", pa.int64()), ("count", pa.int64())],
    initial=lambda: np.zeros(64, np.int64),
    combine=np.add,
    finish=_histogram,
)
def multiplicities(events, counts):
    """A histogram: the same whatever the split."""
    return counts + np.bincount(events["multiplicity"].to_numpy(), minlength=64)


@aggregation(
    schema=[("event", pa.int64())],
    initial=lambda: None,
    combine=lambda first, second: second if first is None else first,
    finish=lambda kept: pa.table({"event": [] if kept is None else kept}),
)
def first_events(events, kept):
    """The first three events of the first piece it sees: not a combination at all."""
    return events["event"].to_pylist()[:3] if kept is None else kept
'''


def test_aggregations_are_checked_by_their_finished_results(
    spark: Any, finished_run: FinishedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A histogram passes (its partial counts differ with the split, their sum does not); an
    aggregation whose combine keeps one side is named, with what an aggregation must do."""
    module = tmp_path / "combined_stages.py"
    module.write_text(textwrap.dedent(AGGREGATIONS))
    assert _check(spark, finished_run.data_dir, module, tmp_path / "out") == 1
    verdicts = _verdicts(capsys.readouterr().out)
    assert "aggregation" in verdicts["multiplicities"] and " same (" in verdicts["multiplicities"]
    first = verdicts["first_events"]
    assert "aggregation" in first and "DIFFERS" in first
    assert "accumulate and combine must give the same result for any split" in first
