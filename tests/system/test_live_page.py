"""The live page in a real browser (``make system``; tools/system/install.sh installs Debian's
chromium): ``evb spark-job --ui`` streaming a run while its sources still send, the page loaded
by headless Chromium with every name but loopback unresolvable and every proxy dead (no
internet: the plotting library is the package's own), its plots drawn; screenshots before and
after later micro-batches differ; the numbers of the page's JSON are the totals the job keeps
in its checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from orderer.apps.send import send_synthetic
from orderer.client import end_run
from orderer.replay.synthetic import SyntheticRun
from orderer.spark.live.board import Board
from orderer.spark.live.totals import RunTotals
from tests.e2e.conftest import ServerProcess, environment

RUN = SyntheticRun(
    n_sources=3, fragments_per_source=2400, rate=200.0, batch_size=10, jitter=0.01,
    sync_barriers=1, payload_size=8, seed=11,
)  # fmt: skip
"""12 s of three sources sending, read 600 fragments a micro-batch: a dozen micro-batches
while the page is looked at, however fast the host."""
OFFLINE = [
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
]
"""No name but loopback resolves, and anything but loopback (which a proxy never serves in
Chromium) would go to a dead proxy."""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("no chromium: run tools/system/install.sh (make system's tools)")
    return found


def _browser(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,1400",
         "--virtual-time-budget=4000", *OFFLINE, *flags],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def _wait(condition: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_live_page_in_a_browser_with_no_network(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    server = ServerProcess(tmp_path / "data", logs, "--build-window", "0.5", "--startup-delay",
                           "0.2", "--sources", "1,2,3").start()  # fmt: skip
    checkpoint = tmp_path / "checkpoint"
    job = subprocess.Popen(
        [sys.executable, "-m", "orderer.cli", "spark-job", "--target", server.target, "--dt",
         "100000", "--output", str(tmp_path / "out"), "--run", "live", "--checkpoint",
         str(checkpoint), "--trigger-seconds", "1", "--max-fragments-per-trigger", "600",
         "--ui", "127.0.0.1:0", "--quiet"],
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    sender = threading.Thread(
        target=send_synthetic, args=(server.target, RUN), kwargs={"progress": False}
    )
    try:
        assert job.stderr is not None
        url = ""
        while not url:  # the job says where its page is, first
            line = job.stderr.readline()
            assert line, "the job ended before saying where its page is"
            if "live page at " in line:
                url = line.split("live page at ", 1)[1].strip()
        drained = threading.Thread(target=job.stderr.read, daemon=True)  # never blocks the job
        drained.start()
        sender.start()
        run = url + "api/runs/live"
        first = _wait(lambda: (i := _json(run))["batch"] >= 1 and i, "a first micro-batch")
        before = _browser(f"--screenshot={tmp_path / 'before.png'}", url)
        assert before.returncode == 0, before.stderr[-2000:]
        dom = _browser("--dump-dom", url).stdout
        for entry in first["histograms"]:  # every histogram drawn by plotly, offline
            panel = dom.index(f'id="h-{entry["name"]}"')
            assert "main-svg" in dom[panel : panel + 20_000], entry["name"]
        assert "waiting for the first micro-batch" not in dom
        later = _wait(
            lambda: (i := _json(run))["batch"] >= first["batch"] + 2 and i, "two more micro-batches"
        )
        after = _browser(f"--screenshot={tmp_path / 'after.png'}", url)
        assert after.returncode == 0, after.stderr[-2000:]
        assert (tmp_path / "before.png").read_bytes() != (tmp_path / "after.png").read_bytes()
        assert later["fragments"] > first["fragments"]
        # the page's numbers are the totals kept in the checkpoint for the same micro-batch
        # (the checkpoint keeps the latest two: read them together, again if one went meanwhile)
        def together() -> tuple[dict[str, Any], RunTotals] | None:
            index = _json(run)
            kept = checkpoint / "evb-live" / f"totals-{index['batch']:012d}.json"
            try:
                return index, RunTotals.from_json(kept.read_text())
            except FileNotFoundError:
                return None

        later, kept = _wait(together, "the page's micro-batch and its totals file together")
        batch = later["batch"]
        rendered = Board()
        rendered.publish(kept)
        index = json.loads(rendered.index("live") or b"null")
        for key in ("batch", "events", "fragments", "late_fragments", "barrier_rows", "sources"):
            assert later[key] == index[key], key
        for entry in later["histograms"]:
            page = _json(f"{run}/histograms/{entry['name']}")
            if page["batch"] != batch:
                continue  # a later micro-batch came in between
            mine = json.loads(rendered.histogram("live", entry["name"]) or b"null")
            assert page["counts"] == mine["counts"] and page["entries"] == mine["entries"]
    finally:
        if sender.is_alive() or sender.ident is not None:
            sender.join(timeout=120)
        end_run(server.target)
        try:
            job.wait(timeout=180)
        finally:
            if job.poll() is None:
                job.kill()
            server.stop()
    assert job.returncode == 0
