"""``evb spark-job --explain``: the plan of the ``--stages``, printed without Spark, and the
mistakes a user makes with the two flags, each one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from orderer.spark.driver.job import main

STAGES = Path(__file__).parents[1] / "spark" / "stages_module.py"
JOB = ["--target", "localhost:1", "--output", "out", "--dt", "100"]


def test_explain_prints_every_stage_with_its_class_order_and_parallelism(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*JOB, "--partitions", "4", "--stages", str(STAGES), "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("evb stages: 4 stage(s), 2 order-sensitive")
    rows = {line.split()[0]: line for line in lines[2:]}
    assert "sequencer" in rows["fragments"] and "gives its own: offset" in rows["fragments"]
    assert "sorted by source, offset" in rows["gaps"]
    assert "4 partitions by hash of source" in rows["gaps"]
    assert "one partition (global order)" in rows["running"]
    assert "order-insensitive" in rows["sizes"] and "full: 4 partitions" in rows["sizes"]


def test_explain_twice_in_one_process_loads_the_same_file_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for _ in range(2):
        assert main([*JOB, "--stages", str(STAGES), "--explain"]) == 0
    assert capsys.readouterr().out.count("evb stages:") == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--explain"], "--explain: explains the --stages: give them"),
        (["--stages", "missing.py"], "--stages: no such file"),
        (["--stages", "stages.txt"], "--stages: must be a Python file"),
    ],
)
def test_mistakes_end_in_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main([*JOB, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_stage_reading_no_stage_is_refused_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "typo_stages.py"
    module.write_text(
        "import pyarrow as pa\nfrom orderer.stages import order_insensitive\n"
        "@order_insensitive(schema=[('event', pa.int64())], reads='calibratd')\n"
        "def gates(table):\n    return table\n"
    )
    assert main([*JOB, "--stages", str(module), "--explain"]) == 2
    assert "stage gates: reads: no such stage" in capsys.readouterr().err
