"""Tests of :mod:`orderer.apps.demo` (``evb demo``): it runs quickly and leaves a replayable run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orderer.apps.demo import run_demo
from orderer.cli import main


def test_run_demo_writes_the_run_and_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(output_dir=tmp_path / "demo", seed=1) == 0
    names = ("run.jsonl", "emitted.jsonl", "stats.json")
    run, out, stats = (tmp_path / "demo" / name for name in names)
    counters = json.loads(stats.read_text(encoding="utf-8"))
    emitted_lines = out.read_text(encoding="utf-8").splitlines()
    assert len(emitted_lines) == counters["totals"]["emitted"] > 0
    assert counters["totals"]["received"] == counters["totals"]["emitted"]
    assert counters["barriers"]["heterogeneous"] >= 1
    assert counters["missing"] == {"6": 1}
    assert counters["sources"]["5"]["late"] > 0
    assert run.stat().st_size > 0
    text = capsys.readouterr().out
    assert "Counters per source" in text and str(stats) in text


def test_evb_demo_command(tmp_path: Path) -> None:
    assert main(["demo", "--replay-only", "--output-dir", str(tmp_path), "--seed", "3"]) == 0
    assert (tmp_path / "emitted.jsonl").exists()
