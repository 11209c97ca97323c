"""Smoke test of ``tests/bench/bench_orderer.py``: it runs end to end on tiny sizes and exits 0.

The figures themselves are not checked (they depend on the machine); only that every section ran
and the JSON has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).with_name("bench_orderer.py")
ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_on_tiny_sizes(tmp_path: Path) -> None:
    figures_path = tmp_path / "bench-output" / "figures.json"  # not there yet, as in a clone
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [
            sys.executable, str(BENCH), "--fragments", "20000", "--sources", "8",
            "--batch", "500", "--backlog", "10000", "--replay-records", "5000",
            "--repeat", "1", "--slice-ticks", "5000000", "--json", str(figures_path),
        ],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    assert figures["throughput"]["fragments"] >= 20_000
    assert figures["heapq"]["fragments"] == figures["throughput"]["fragments"]
    assert figures["memory"]["queued"] >= 10_000
    assert figures["replay"]["records"] > 4_000
    assert figures["ratio_core_over_heapq"] > 0
    share = figures["sliced_share"]  # orderer 0 of a run over 2: about half, and its watermarks
    assert 0 < share["fragments"] < figures["throughput"]["fragments"]
    assert share["watermarks"] > 0 and figures["ratio_share_over_whole"] > 0
    assert "evb orderer benchmark" in result.stdout
