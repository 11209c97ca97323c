"""kill -9 of a data source (``evb send``) in the middle of its run, then a restart with
``--resume``: it skips what the server already holds of its source and sends the rest, so the
final ordered log holds every fragment of the run exactly once; the other sources never notice.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from orderer.client import OrderedStreamReader, end_run, get_stats
from orderer.replay.synthetic import SyntheticRun, iter_batches
from tests.e2e.conftest import ServerProcess, environment, evb_command

SPEC = SyntheticRun(
    n_sources=3, fragments_per_source=6000, rate=1500.0, batch_size=10, sync_barriers=2, seed=5
)
SEND_FLAGS = [
    "--n-sources", "3", "--fragments", "6000", "--rate", "1500", "--batch-size", "10",
    "--sync-barriers", "2", "--seed", "5", "--client-batch", "64", "--linger", "0.02",
    "--no-progress",
]  # fmt: skip
SERVE_FLAGS = ["--build-window", "0.5", "--startup-delay", "0.2", "--sources", "1,2,3"]
VICTIM = 2


def _received(target: str, source: int) -> int:
    stats = get_stats(target, timeout=5)
    known = stats.sources.get(source)
    return 0 if known is None else known.received


def _sender(target: str, source: int, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        evb_command("send", "--target", target, "--only-sources", str(source), *SEND_FLAGS, *more),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )


def test_a_source_killed_mid_run_resumes_and_nothing_is_lost_or_doubled(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    senders = {k: _sender(server.target, k) for k in SPEC.source_ids}
    per_source = SPEC.fragments_per_source + SPEC.sync_barriers + 2  # begin and end of run
    deadline = time.monotonic() + 120
    while _received(server.target, VICTIM) < per_source // 3:
        assert time.monotonic() < deadline, "the victim did not get going"
        assert senders[VICTIM].poll() is None, "the victim finished before it was killed"
        time.sleep(0.02)
    senders[VICTIM].send_signal(signal.SIGKILL)  # mid-stream: no flush, no close
    senders[VICTIM].wait(30)
    held = _received(server.target, VICTIM)
    assert 0 < held < per_source
    senders[VICTIM] = _sender(server.target, VICTIM, "--resume", "--speed", "0")

    summaries = {}
    for source, sender in senders.items():
        out, err = sender.communicate(timeout=300)
        assert sender.returncode == 0, err
        summaries[source] = json.loads(out.strip().splitlines()[-1])
    # the restarted sender sent only what the server did not hold yet
    assert summaries[VICTIM]["fragments"] <= per_source - held + 64 * 4
    expected = collections.Counter(
        (int(s), int(ts), int(b))
        for _, batch in iter_batches(SPEC)
        for s, ts, b in zip(batch.source, batch.timestamp, batch.barrier, strict=True)
    )
    total = sum(expected.values())
    end = end_run(server.target)
    got = collections.Counter(
        (int(s), int(ts), int(b))
        for batch in OrderedStreamReader(server.target, 0, until=end)
        for s, ts, b in zip(batch.source, batch.timestamp, batch.barrier, strict=True)
    )
    assert end == total == sum(got.values())
    assert got == expected  # each exactly once
    stats = get_stats(server.target)
    assert stats.sources[VICTIM].duplicates == 0
    assert server.stop() == 0
