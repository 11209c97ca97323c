"""The barrier log across a kill -9 of ``evb serve``: nothing of it is written down, yet the
restarted server lists the very same barriers (offsets, times, types, missing sources), each
once, because recovery replays the whole arrival log, the hand-made dead mark included."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import OrderedStreamReader
from orderer.stats import Stats
from orderer.wire import convert
from tests.e2e.conftest import ServerProcess, environment, evb_command

SERVE_FLAGS = [
    "--build-window", "0.2", "--startup-delay", "0.1", "--barrier-timeout", "600",
    "--source-timeout", "off", "--sources", "1,2,3",
]  # fmt: skip
SEND_FLAGS = [
    "--n-sources", "3", "--only-sources", "1,2", "--fragments", "400", "--rate", "4000",
    "--batch-size", "20", "--sync-barriers", "3", "--seed", "5", "--no-end", "--no-progress",
]  # fmt: skip


def _call(target: str, method: str, request: Any) -> Any:
    with grpc.insecure_channel(target) as channel:
        return getattr(pb_grpc.OrdererStub(channel), method)(request, timeout=30)


def _stats(target: str) -> Stats:
    reply = _call(target, "GetStats", pb.GetStatsRequest(barrier_log_limit=10_000))
    return convert.stats_from_pb(reply)


def test_the_barrier_log_survives_kill_9_each_barrier_once(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    sent = subprocess.run(
        evb_command("send", "--target", server.target, *SEND_FLAGS),
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert sent.returncode == 0, sent.stderr
    # every barrier waits for source 3, which sends nothing: none resolved yet
    assert _stats(server.target).barrier_log == ()
    reply = _call(server.target, "SetSourceState", pb.SourceStateRequest(source=3, dead=True))
    assert (reply.was_known, reply.dead) == (True, True)
    deadline = time.monotonic() + 60
    while len(before := _stats(server.target).barrier_log) < 5:  # the rest as data drains
        assert time.monotonic() < deadline, before
        time.sleep(0.05)
    assert len(before) == 5  # begin run, three in the run, end run
    assert all(not b.complete and b.missing == (3,) for b in before)

    server.kill()
    assert "stopping" not in server.log_text()  # died without its shutdown
    server.start()
    stats = _stats(server.target)
    after = stats.barrier_log
    assert after == before
    assert len({b.offset for b in after}) == len(after)
    assert stats.barriers.incomplete == 5
    assert stats.barriers.by_type == {1: 2, 2: 2, 3: 6}

    end = stats.next_offset
    output = list(OrderedStreamReader(server.target, 0, until=end))
    barrier_offsets = [
        batch.first_seq + int(k) for batch in output for k in np.flatnonzero(batch.barrier)
    ]
    listed = [b.offset + k for b in after for k in range(len(b.types))]
    assert barrier_offsets == listed
    assert server.stop() == 0
