"""A blocking call's first connection costs no fixed delay: the Spark source makes several
blocking calls each micro-batch (stats, the boundary scan, the commit, one read per partition),
and ``grpc.channel_ready_future`` made each of them 200 ms long (its connectivity poller wakes
every 0.2 s and closing the channel waits for it). A real orderer on loopback."""

from __future__ import annotations

import time
from pathlib import Path

from orderer.client import get_stats
from orderer.spark.driver.demo import _Server

CALLS = 5
BOUND = 0.75
"""Seconds for all of them: the old wait took at least 5 x 0.2 s; on loopback a call takes a few
milliseconds, the rest is for two busy cores."""


def test_blocking_calls_pay_no_fixed_connect_delay(tmp_path: Path) -> None:
    server = _Server(tmp_path / "data", tmp_path / "serve.log", "--startup-delay", "0",
                     "--sources", "1")
    try:
        get_stats(server.target)  # the server's first answer, not timed
        started = time.monotonic()
        for _ in range(CALLS):
            stats = get_stats(server.target, connect_timeout=5.0)
        seconds = time.monotonic() - started
    finally:
        server.stop()
    assert stats.next_offset == 0
    assert seconds < BOUND, f"{CALLS} get_stats took {seconds:.3f} s"
