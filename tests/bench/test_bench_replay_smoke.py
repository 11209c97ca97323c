"""Smoke test of ``tests/bench/bench_replay.py``: it runs end to end on tiny sizes (an arrival
log written as the service writes it, replayed to .arrow and stats only in child processes,
beside the JSON path). The figures themselves are not checked (they depend on the machine)."""

from __future__ import annotations

import json
from pathlib import Path

from orderer.config import OrdererConfig
from orderer.replay.stream import replay_path
from tests.bench.bench_replay import main, write_arrival_log


def test_bench_replay_runs_on_tiny_sizes(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    sizes = ["--records", "40000", "--small-records", "8000", "--jsonl-records", "3000"]
    assert main([*sizes, "--scratch", str(tmp_path), "--json", str(figures_path)]) == 0
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    for key in ("arrow", "stats_only", "default_flags", "arrow_small", "jsonl"):
        assert figures[key]["records_per_second"] > 0 and figures[key]["peak_rss"] > 0
    assert figures["arrow"]["records"] >= 40_000
    assert figures["ratio_arrow_over_jsonl"] > 0 and figures["write_bandwidth"] > 0


def test_the_generated_log_holds_every_fragment_once(tmp_path: Path) -> None:
    rows = write_arrival_log(tmp_path, 16_000, message=100)
    counters = replay_path(tmp_path, None, None, OrdererConfig(startup_delay=0.2))
    assert counters["totals"]["received"] == counters["totals"]["emitted"] == rows - 16
    assert counters["barriers"]["complete"] == 5  # begin, three syncs, end
