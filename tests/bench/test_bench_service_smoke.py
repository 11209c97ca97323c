"""Smoke test of ``tests/bench/bench_service.py``: it runs end to end on tiny sizes and exits 0.

The figures themselves are not checked (they depend on the machine); only that every phase ran
against real servers (``evb serve``, the bare peer and the durable bare peer, each a
subprocess), the JSON has them, and the payload sweep ran at two sizes with the second's
fragments cut to the bytes budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).with_name("bench_service.py")
ROOT = Path(__file__).resolve().parents[2]


def test_bench_service_runs_on_tiny_sizes(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [
            sys.executable, str(BENCH), "--fragments", "16000", "--streams", "2", "--repeat", "1",
            "--latency-points", "1e5@100,5e4@200", "--latency-seconds", "0.3",
            "--latency-warmup", "0", "--stall-seconds", "1", "--json", str(figures_path),
            "--payloads", "32,256", "--bytes-budget", str(8000 * 256),
        ],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(figures_path.read_text(encoding="utf-8"))
    for phase in ("ingest", "client", "bare", "durable"):
        assert figures[phase]["fragments"] == 16_000
        assert figures[phase]["fragments_per_s"] > 0
        assert figures[phase]["payload_mb_per_s"] > 0
    for phase in ("ingest", "bare", "durable"):  # the main thread is one of the threads
        busiest = figures[phase]["server_busiest_thread_cpu_us_per_1000"]
        assert busiest >= figures[phase]["server_loop_cpu_us_per_1000"]
        assert figures[phase]["server_busiest_thread"]
    assert figures["ratio_evb_over_bare"] > 0
    assert figures["ratio_evb_over_durable"] > 0
    sweep = figures["payload_sweep"]
    assert [(p["payload_bytes"], p["fragments"]) for p in sweep] == [(32, 16_000), (256, 8_000)]
    for point in sweep:
        for phase in ("ingest", "bare", "durable"):
            assert point[phase]["fragments"] == point["fragments"]
            assert point[phase]["payload_bytes"] == point["payload_bytes"]
        assert point["ratio_evb_over_bare"] > 0 and point["ratio_evb_over_durable"] > 0
        # every message was written to the durable peer's file once: the batches, as sent,
        # and the 16 ends of source (4 bytes each)
        assert point["durable"]["file_bytes"] == point["wire_bytes"] + 16 * 4
        assert point["evb_data_dir_bytes_per_payload_byte"] > 0
    assert sweep[0]["ingest"] == figures["ingest"]  # the main table's: the size of --payload
    budget = figures["cpu_budget_us_per_1000"]
    assert budget["at_target"] > budget["left_after_transport"]
    assert budget["evb_beyond_transport"] == (
        figures["ingest"]["server_cpu_us_per_1000"] - figures["bare"]["server_cpu_us_per_1000"]
    )
    assert len(figures["latency_points"]) == 2
    latency = figures["latency"]
    assert latency["fragments"] > 0
    for name in ("arrival_to_emission", "send_to_arrival", "send_to_delivered"):
        assert latency[name]["p99_ms"] >= latency[name]["p50_ms"] >= 0
    stall = figures["stall"]
    assert stall["rss_peak_mb"] > 0
    assert stall["emitted_at_the_end"] == stall["fragments_sent"] > 0
    assert "evb service benchmark" in result.stdout
    assert "busiest server thread" in result.stdout
    assert "durable bare peer" in result.stdout
    assert "payload sweep" in result.stdout
