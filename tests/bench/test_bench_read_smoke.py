"""Smoke test of ``tests/bench/bench_read.py``: it runs end to end on tiny sizes (a real
``evb serve`` takes a run, then ``Subscribe`` with and without payloads and the ``--path``
reads), and ``--check`` holds the ``--path`` read to every payload byte sent. The figures
themselves are not checked (they depend on the machine)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.bench_read import main


def test_bench_read_runs_on_tiny_sizes(tmp_path: Path) -> None:
    figures_path = tmp_path / "read.json"
    argv = ["--payloads", "32,1024", "--fragments", "20000", "--repeat", "1", "--check",
            "--json", str(figures_path)]
    assert main(argv) == 0
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    assert [point["payload_bytes"] for point in figures["sizes"]] == [32, 1024]
    for point in figures["sizes"]:
        assert point["fragments"] == 20000 and point["checked"]
        for read in ("subscribe", "subscribe_omit_payload", "path_read", "path_read_executor"):
            assert point[read]["fragments_per_s"] > 0, read
