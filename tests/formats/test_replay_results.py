"""`evb replay`'s result files as users get them wrong: OUT that is INPUT, a second run into the
same OUT, a typo in INPUT or a bad record on a rerun, STATS and OUT one file, a missing
directory. Each ends in exit 2 with a message naming the flag and the file, and nothing that
was there is lost (the files are compared byte for byte), and no temporary file is left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orderer.cli import main
from orderer.formats import log_format
from orderer.formats.json_lines import read_records
from tests.conftest import example_dirs
from tests.replay.test_replay_stream import write_input

EXAMPLE = next(p for p in example_dirs() if p.name == "barrier-complete")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A recorded run (one of the worked examples) in a directory of its own."""
    return Path(shutil.copy(EXAMPLE / "input.jsonl", tmp_path / "run.jsonl"))


def _replay(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str]:
    status = main(["replay", *map(str, args)])
    return status, capsys.readouterr().err


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("flag", ["--output", "--stats"])
def test_a_result_onto_the_input_is_refused_and_the_input_kept(
    run: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    before = _files(run.parent)
    # the same file under another spelling, and even with --overwrite
    status, err = _replay(capsys, run, flag, run.parent / "." / run.name, "--overwrite")
    assert status == 2
    assert f"evb replay: {flag}: is the input {run}" in err
    assert _files(run.parent) == before


def test_a_segment_of_a_data_directory_is_input_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (EXAMPLE / "input.jsonl").open() as lines:
        records = read_records(lines)
    data = write_input(records, tmp_path / "data", "log", rows=2)
    segment = log_format.log_segments(data / log_format.ARRIVALS, log_format.ARRIVALS)[0]
    kept = segment.read_bytes()
    status, err = _replay(capsys, data, "--output", segment, "--overwrite")
    assert status == 2
    assert f"--output: is the input {segment}" in err
    assert segment.read_bytes() == kept


def test_a_second_run_into_the_same_output_is_refused_unless_asked(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, stats = run.parent / "out.arrow", run.parent / "stats.json"
    assert _replay(capsys, run, "--output", out, "--stats", stats)[0] == 0
    first = _files(run.parent)
    status, err = _replay(capsys, run, "--output", out, "--build-window", 5)
    assert status == 2
    assert f"--output: exists already (an earlier result?); give --overwrite to replace it, " \
        f"or another name (got '{out}')" in err
    status, err = _replay(capsys, run, "--stats", stats)
    assert status == 2 and "--stats: exists already" in err
    assert _files(run.parent) == first
    # asked: replaced, and by the new setting's output
    status, _ = _replay(capsys, run, "--output", out, "--stats", stats, "--overwrite",
                        "--late-policy", "drop", "--build-window", 0.001)
    assert status == 0
    assert _files(run.parent)["stats.json"] != first["stats.json"]


@pytest.mark.parametrize("suffix", [".jsonl", ".arrow", ".parquet"])
def test_a_failed_rerun_keeps_the_earlier_output(
    run: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    out, stats = run.parent / f"out{suffix}", run.parent / "stats.json"
    assert _replay(capsys, run, "--output", out, "--stats", stats)[0] == 0
    earlier = _files(run.parent)
    # a typo in INPUT
    status, err = _replay(capsys, run.parent / "rnu.jsonl", "--output", out, "--stats", stats,
                          "--overwrite")
    assert status == 2 and "rnu.jsonl: no such file" in err
    assert _files(run.parent) == earlier
    # a bad record after good ones: the replay had begun writing
    bad = run.parent / "bad.jsonl"
    bad.write_text(run.read_text() + '{"t": 99, "source": 1, "ts": "x"}\n')
    earlier = _files(run.parent)
    status, err = _replay(capsys, bad, "--output", out, "--stats", stats, "--overwrite")
    assert status == 2 and "line 8:" in err
    assert _files(run.parent) == earlier  # nothing replaced, nothing partial left beside it


def test_results_that_cannot_be_written_are_refused_before_anything_is_read(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(run.parent)
    status, err = _replay(capsys, run, "--output", run.parent / "o.jsonl",
                          "--stats", run.parent / "o.jsonl")
    assert status == 2 and "--stats: is also --output; give each its own file" in err
    status, err = _replay(capsys, run, "--output", run.parent / "nowhere" / "o.arrow")
    assert status == 2 and f"its directory {run.parent / 'nowhere'} does not exist" in err
    assert _files(run.parent) == before


def test_a_sweep_refuses_an_existing_setting_output_before_writing_any(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = str(run.parent / "sweep-{}.arrow")
    assert _replay(capsys, run, "--output", pattern, "--build-window", "1,2")[0] == 0
    first = _files(run.parent)
    status, err = _replay(capsys, run, "--output", pattern, "--build-window", "3,1")
    assert status == 2 and "sweep-build-window=1.arrow" in err
    assert _files(run.parent) == first  # build-window=3 was not written either


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_stream_as_the_output_is_written_in_place_not_replaced(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], overwrite: list[str]
) -> None:
    """``--output /dev/stdout`` (here a FIFO, its stand-in that a test may touch): no earlier
    result to keep, so no --overwrite needed, and the output goes through the stream; renaming
    a staged file over it replaced the node (as root, /dev/stdout itself) and nothing was read."""
    import os
    import stat
    import threading

    regular = tmp_path / "out.jsonl"
    assert _replay(capsys, run, "--output", regular)[0] == 0
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    status, err = _replay(capsys, run, "--output", fifo, *overwrite)
    reader.join(timeout=30)
    assert status == 0, err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert received == [regular.read_bytes()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo", "out.jsonl", "run.jsonl"]
