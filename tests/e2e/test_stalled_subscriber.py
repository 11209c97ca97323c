"""Stalled ``Subscribe`` consumers: subscribers that open the stream and never read, while the
sources send some 60 MB of output. The server reads the ordered log on demand and each reply
waits for the gRPC stream's flow control, so a stalled subscriber costs at most one reply and
the HTTP/2 windows, never the backlog: when the eight stalled subscribers finally go away, the
server frees a few MB per subscriber (had it queued the backlog for each, ~470 MB).
Meanwhile a live subscriber follows the run and has everything moments after the end of run.

The server runs as ``evb serve`` in a subprocess, its memory read from /proc (VmHWM, peak RSS).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import OrderedStreamReader, end_run, get_stats
from tests.e2e.conftest import ServerProcess, environment, evb_command

SOURCES, FRAGMENTS, PAYLOAD = 3, 40_000, 512
OUTPUT_MB = SOURCES * FRAGMENTS * PAYLOAD / 2**20
STALLED = 8
ALLOWANCE_MB = 20.0
"""Per stalled subscriber: one reply (at most 4 MiB of payload) held twice, as the batch and as
the serialized message gRPC waits to send, the HTTP/2 windows, and allocator slack (up to
~100 MB in all seen). A queued backlog would free ~59 MB each. What the RSS drop cannot tell
from that slack, a reply pinning its 65,536-row record batch (~34 MB each), the deterministic
test below checks."""
SERVE_FLAGS = ["--build-window", "0.2", "--startup-delay", "0", "--fsync", "never"]


def _memory_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


class _Follower(threading.Thread):
    """A live subscriber reading from offset 0 until told where the run ends."""

    def __init__(self, target: str) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.offset = 0
        self.until: int | None = None
        self.done = threading.Event()

    def run(self) -> None:
        reader = OrderedStreamReader(self.target, 0)
        for batch in reader:
            self.offset += len(batch)
            if self.until is not None and self.offset >= self.until:
                break
        self.done.set()


def test_stalled_subscribers_cost_bounded_memory_and_slow_nobody(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Arrow's default pool (mimalloc) gives pages freed long ago back to the system on its
    # next activity, which can land in the measuring window below (seen: 100-150 MB "freed" in
    # one run of three, before and after the fix this test guards); with the system allocator
    # the remaining slack is glibc trimming a heap top (seen up to 85 MB), within ALLOWANCE_MB.
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    assert server.process is not None
    pid = server.process.pid
    channel = grpc.insecure_channel(server.target)
    stub = pb_grpc.OrdererStub(channel)
    stalled = [stub.Subscribe(pb.SubscribeRequest(from_offset=0)) for _ in range(STALLED)]
    follower = _Follower(server.target)
    follower.start()
    command = evb_command(
        "send", "--target", server.target, "--n-sources", str(SOURCES),
        "--fragments", str(FRAGMENTS), "--payload-size", str(PAYLOAD), "--speed", "0",
        "--batch-size", "100", "--no-progress",
    )  # fmt: skip
    sender = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment()
    )
    _, err = sender.communicate(timeout=300)
    assert sender.returncode == 0, err
    end = end_run(server.target)
    assert end == SOURCES * (FRAGMENTS + 3)  # with the begin, sync and end barriers
    ended = time.monotonic()
    follower.until = end
    if follower.offset >= end:
        follower.done.set()
    assert follower.done.wait(60), f"the live subscriber got {follower.offset} of {end}"
    caught_up = time.monotonic() - ended
    assert get_stats(server.target).next_offset == end

    # what the stalled subscribers hold on the server is what their going away frees
    time.sleep(1.0)
    held = _memory_mb(pid, "VmRSS")
    for call in stalled:
        assert not call.done()  # they really were open (and stalled) all along
        call.cancel()
    channel.close()
    time.sleep(2.0)
    freed = held - _memory_mb(pid, "VmRSS")
    peak = _memory_mb(pid, "VmHWM")
    assert server.stop() == 0
    print(
        f"\n{STALLED} stalled subscribers, {OUTPUT_MB:.0f} MB of output: server peak"
        f" {peak:.0f} MB, {freed:.1f} MB freed when they left; the live subscriber had"
        f" everything {caught_up:.2f} s after the end of run"
    )
    assert freed < STALLED * ALLOWANCE_MB, (held, freed)  # pinned batches ~270 MB, backlogs ~470
    assert caught_up < 5.0


def test_a_reply_owns_its_memory_and_pins_no_record_batch(tmp_path: Path) -> None:
    """Deterministic companion of the test above: what ``subscribe`` hands out is a copy, not a
    view into a record batch of the ordered log (which a stalled subscriber would then pin)."""
    from orderer import FragmentBatch, OrdererConfig
    from orderer.client import AsyncSourceClient
    from tests.service.harness import run, serving, target

    async def body() -> None:
        config = OrdererConfig(build_window=0.05, startup_delay=0.0, sources=(1,))
        async with serving(tmp_path, config, subscribe_max_bytes=1000) as running:
            async with AsyncSourceClient(target(running), sources=[1]) as client:
                batch = FragmentBatch.from_arrays(
                    source=1,
                    timestamp=np.arange(5000, dtype=np.uint64),
                    payloads=[b"x" * 100] * 5000,
                )
                await client.send_fragments(batch)
                await client.end_source(1)
            await running.service.end_run()
            replies = running.service.subscribe(0)
            reply, _ = await anext(replies)
            await replies.aclose()
            assert 0 < len(reply) < 5000  # cut to subscribe_max_bytes
            for column in (reply.t, reply.timestamp, reply.payload_offsets, reply.payload):
                assert column.base is None and column.flags.owndata
            assert reply.payload.nbytes == int(reply.payload_offsets[-1]) <= 1000

    run(body())
