"""Smoke test of ``tests/bench/bench_nscldaq.py``: it runs end to end on tiny sizes, every
fragment of both paths acknowledged by its own real ``evb serve`` (the bench asserts it). The
figures themselves are not checked (they depend on the machine)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.bench_nscldaq import main


def test_bench_nscldaq_runs_on_tiny_sizes(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    sizes = ["--fragments", "3000", "--sources", "3", "--repeat", "2"]
    assert main([*sizes, "--json", str(figures_path)]) == 0
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    assert figures["fragments"] == 3000 and len(figures["rounds"]) == 2
    for round_ in figures["rounds"]:
        for path in ("nscldaq", "own_batches", "reader_alone"):
            assert round_[path]["fragments_per_s"] > 0 and round_[path]["mb_per_s"] > 0
    low, high = figures["ranges"]["ratio_nscldaq_over_own"]
    assert 0 < low <= high
