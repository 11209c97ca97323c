"""kill -9 of ``evb serve`` in the middle of a run, a restart on the same data directory and
port: the ``evb send`` processes reconnect and resend, and the final ordered log holds every
acknowledged fragment exactly once."""

from __future__ import annotations

import collections
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from orderer.client import OrderedStreamReader, end_run, get_stats
from orderer.replay.synthetic import SyntheticRun, iter_batches
from tests.e2e.conftest import ServerProcess, environment, evb_command

SPEC = SyntheticRun(
    n_sources=3, fragments_per_source=4000, rate=1000.0, batch_size=10, sync_barriers=2, seed=11
)
SEND_FLAGS = [
    "--n-sources", "3", "--fragments", "4000", "--rate", "1000", "--batch-size", "10",
    "--sync-barriers", "2", "--seed", "11", "--client-batch", "100", "--linger", "0.02",
    "--no-progress",
]  # fmt: skip
SERVE_FLAGS = ["--build-window", "0.5", "--startup-delay", "0.2", "--sources", "1,2,3"]


def _received(target: str) -> int:
    try:
        return get_stats(target, timeout=5).totals.received
    except ConnectionError:
        return 0


def test_kill_9_mid_run_loses_and_duplicates_nothing_acknowledged(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    senders = [
        subprocess.Popen(
            evb_command("send", "--target", server.target, "--only-sources", str(k), *SEND_FLAGS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for k in SPEC.source_ids
    ]
    total = sum(len(batch) for _, batch in iter_batches(SPEC))
    # mid-run: a good part arrived, the senders are still going (no event crosses processes)
    deadline = time.monotonic() + 120
    while _received(server.target) < total // 4:
        assert time.monotonic() < deadline, "the senders did not get going"
        assert all(s.poll() is None for s in senders), "a sender finished before the crash"
        time.sleep(0.05)
    server.kill()
    before = server.log_text()
    assert "stopping" not in before  # it really died without its shutdown
    server.start()  # same data directory, same port

    summaries = []
    for sender in senders:
        out, err = sender.communicate(timeout=300)
        assert sender.returncode == 0, err
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    assert all(s["reconnects"] >= 1 for s in summaries)
    acked = {int(k): v for s in summaries for k, v in s["acked"].items()}
    expected = collections.Counter(
        (int(s), int(ts), int(b))
        for _, batch in iter_batches(SPEC)
        for s, ts, b in zip(batch.source, batch.timestamp, batch.barrier, strict=True)
    )
    per_source = collections.Counter(s for s, _, _ in expected.elements())
    assert acked == dict(per_source)  # every fragment was acknowledged in the end

    end = end_run(server.target)
    got = collections.Counter(
        (int(s), int(ts), int(b))
        for batch in OrderedStreamReader(server.target, 0, until=end)
        for s, ts, b in zip(batch.source, batch.timestamp, batch.barrier, strict=True)
    )
    assert end == total == sum(got.values())
    assert got == expected  # each exactly once
    stats = get_stats(server.target)
    assert stats.totals.received == total
    assert stats.next_offset == total
    assert server.stop() == 0
