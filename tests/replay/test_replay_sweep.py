"""``evb replay`` sweeps: every setting of a comma-list grid gets, in one pass over the input,
exactly the output and counters of a replay with that setting alone; the table and the STATS
list name the settings; a sweep with a single output path is refused."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from orderer.cli import main
from orderer.replay.sweep import DelayHistogram
from orderer.replay.synthetic import Stall, SyntheticRun, generate_records, write_jsonl
from tests.conftest import example_dirs
from tests.replay.test_replay_stream import write_input


def _base_flags(example: Path) -> list[str]:
    config = json.loads((example / "config.json").read_text())
    flags = []
    for key, value in config.items():
        if key in ("build_window", "startup_delay", "barrier_timeout", "source_timeout"):
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def _check_sweep(source: Path, grid: dict[str, list[str]], base: list[str], tmp: Path) -> None:
    """The sweep against each setting alone, all into the same files (``--overwrite``)."""
    base = [*base, "--overwrite"]
    sweep_flags = [x for name, values in grid.items() for x in (f"--{name}", ",".join(values))]
    stats = tmp / "sweep.json"
    assert main(["replay", str(source), "--output", str(tmp / "out-{}.arrow"),
                 "--stats", str(stats), *sweep_flags, *base]) == 0
    listed = json.loads(stats.read_text())
    combos = list(itertools.product(*grid.values()))
    assert [entry["setting"] for entry in listed] == [
        {name.replace("-", "_"): value for name, value in zip(grid, combo, strict=True)}
        for combo in combos
    ]
    for combo, entry in zip(combos, listed, strict=True):
        flags = [x for name, value in zip(grid, combo, strict=True) for x in (f"--{name}", value)]
        label = ",".join(f"{name}={value}" for name, value in zip(grid, combo, strict=True))
        alone, alone_stats = tmp / "alone.arrow", tmp / "alone.json"
        assert main(["replay", str(source), "--output", str(alone), "--stats",
                     str(alone_stats), *flags, *base]) == 0
        assert entry["counters"] == json.loads(alone_stats.read_text()), label
        assert (tmp / f"out-{label}.arrow").read_bytes() == alone.read_bytes(), label


@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_each_setting_of_a_sweep_is_the_replay_of_that_setting_alone(
    example: Path, tmp_path: Path
) -> None:
    config = json.loads((example / "config.json").read_text())
    window = str(config.get("build_window", 20.0))
    delay = str(config.get("startup_delay", 2.0))
    grid = {
        "build-window": sorted({window, "0.5", "3"}),
        "startup-delay": sorted({delay, "0", "0.25"}),
    }
    _check_sweep(example / "input.jsonl", grid, _base_flags(example), tmp_path)


def test_a_sweep_of_a_randomised_run_matches_each_setting_alone(tmp_path: Path) -> None:
    spec = SyntheticRun(
        n_sources=5, fragments_per_source=400, rate=200.0, jitter=0.02, batch_size=4,
        sync_barriers=2, payload_size=8, seed=11,
        stalls=(Stall(source=2, start=0.5, end=1.5),),
    )
    records = generate_records(spec)
    source = write_input(records, tmp_path / "run.parquet", "parquet", rows=97)
    grid = {
        "build-window": ["0.01", "0.2", "1"],
        "barrier-timeout": ["0.05", "2"],
        "source-timeout": ["off", "0.3"],
    }
    _check_sweep(source, grid, ["--startup-delay", "0.1"], tmp_path)
    # the JSON input is the same run
    write_jsonl(records, tmp_path / "run.jsonl")
    _check_sweep(tmp_path / "run.jsonl", {"build-window": ["0.01", "1"]}, [], tmp_path)


def test_a_sweep_prints_a_table_and_refuses_one_output_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = example_dirs()[0]
    run = str(example / "input.jsonl")
    assert main(["replay", run, "--build-window", "0.5,2", "--startup-delay", "0,1"]) == 0
    table = capsys.readouterr().out
    for label in ("build-window=0.5", "build-window=2", "startup-delay=0", "startup-delay=1"):
        assert label in table
    assert "late" in table and "p99" in table
    assert main(["replay", run, "--build-window", "0.5,2", "--output",
                 str(tmp_path / "out.arrow")]) == 2
    error = capsys.readouterr().err
    assert "--output" in error and "one file per setting" in error
    assert main(["replay", run, "--build-window", "0.5,0.5"]) == 2
    assert "distinct" in capsys.readouterr().err
    assert main(["replay", run, "--build-window", "0.5,x"]) == 2
    assert "--build-window" in capsys.readouterr().err


def test_delay_percentiles_are_within_the_bin_width() -> None:
    rng = np.random.default_rng(2)
    delays = rng.exponential(0.05, 100_000)
    histogram = DelayHistogram()
    for part in np.array_split(delays, 7):
        histogram.add(part)
    assert histogram.maximum == delays.max()
    for q in (0.5, 0.99):
        exact = float(np.quantile(delays, q, method="inverted_cdf"))
        got = histogram.quantile(q)
        assert got is not None and exact <= got <= exact * 1.012
    assert DelayHistogram().quantile(0.5) is None
