"""A full log volume, for real: ``evb serve`` keeps its logs on a small tmpfs that the test fills
to the last byte in the middle of a run. The service must say clearly what is wrong (log line,
``UNAVAILABLE`` naming the volume, health ``NOT_SERVING``), stop acknowledging, and, once space
is freed, resume by itself: the client's resends complete the run and the ordered log holds every
fragment exactly once, in the order ``evb replay`` gives for the server's own arrival record."""

from __future__ import annotations

import collections
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orderer.batch import FragmentBatch
from orderer.client import OrderedStreamReader, SourceClient, end_run, get_stats
from orderer.config import OrdererConfig
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from orderer.service.logs import ArrivalLog
from orderer.service.server import LIVENESS_SERVICE
from tests.e2e.conftest import ServerProcess

SOURCES = (1, 2)
PER_PHASE = 5000
"""Fragments per source before and after the volume fills."""
CONFIG = OrdererConfig(build_window=0.2, startup_delay=0.1, sources=SOURCES)
SERVE_FLAGS = ["--build-window", "0.2", "--startup-delay", "0.1", "--sources", "1,2"]


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs: a volume that really runs out of space (needs CAP_SYS_ADMIN)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(volume)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (not privileged): {mounted.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def _fill(volume: Path) -> Path:
    """Write zeros until the volume refuses (ENOSPC): not a byte is left for the server."""
    filler = volume / "filler"
    block = bytes(64 << 10)
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(block)
        except OSError:
            pass
        try:
            while True:
                out.write(b"\0")
        except OSError:
            pass
    return filler


def _phase(first: int) -> list[FragmentBatch]:
    """PER_PHASE fragments per source, timestamps interleaved and rising across phases."""
    ts = np.arange(first, first + PER_PHASE, dtype=np.uint64) * 10
    return [
        FragmentBatch.from_arrays(
            source, ts + source, payloads=[b"%031d%d" % (i, source) for i in range(len(ts))]
        )
        for source in SOURCES
    ]


def _send(client: SourceClient, batches: list[FragmentBatch]) -> None:
    for batch in batches:
        client.send_fragments(batch)
    client.flush()


def _health(target: str, service: str = "") -> int:
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
    return int(reply.status)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _fill_mid_run(server: ServerProcess, client: SourceClient, volume: Path) -> Path:
    """Phase 0 acknowledged, the volume filled, phase 1 sent: the service must degrade."""
    _send(client, _phase(0))
    client.wait_acked(timeout=60)
    assert all(client.acked(s) == PER_PHASE for s in SOURCES)
    filler = _fill(volume)
    _send(client, _phase(PER_PHASE))
    _wait(lambda: _health(server.target) == health_pb2.HealthCheckResponse.NOT_SERVING,
          "the service reports NOT_SERVING")  # fmt: skip
    return filler


def _client(server: ServerProcess) -> SourceClient:
    return SourceClient(
        server.target, sources=SOURCES, batch_size=500, linger=0.01, backoff_max=0.3
    )


def _ordered_rows(server: ServerProcess, end: int) -> list[tuple[int, int, int, bool, bytes]]:
    return [
        (
            int(batch.source[i]),
            int(batch.timestamp[i]),
            int(batch.barrier[i]),
            bool(batch.late[i]),
            batch.payload_of(i),
        )
        for batch in OrderedStreamReader(server.target, 0, until=end)
        for i in range(len(batch))
    ]


def _check_everything_once(rows: list[tuple[int, int, int, bool, bytes]]) -> None:
    sent = collections.Counter(
        (int(s), int(ts)) for b in _phase(0) + _phase(PER_PHASE)
        for s, ts in zip(b.source, b.timestamp, strict=True)
    )  # fmt: skip
    assert collections.Counter((s, ts) for s, ts, *_ in rows) == sent  # each exactly once
    assert all(p == b"%031d%d" % ((ts // 10) % PER_PHASE, s) for s, ts, _, _, p in rows)


def _replayed(data_dir: Path, tmp_path: Path) -> list[tuple[int, int, int, bool]]:
    """What ``evb replay`` gives for the server's own arrival record."""
    arrivals = ArrivalLog.open(data_dir / "arrivals")
    assert arrivals.export_replay(tmp_path / "arrivals.jsonl") == 0
    arrivals.close()
    with (tmp_path / "arrivals.jsonl").open() as lines:
        emitted, _ = replay(read_records(lines), CONFIG)
    return [
        (int(s), int(ts), int(b), bool(late))
        for s, ts, b, late in zip(
            emitted.source, emitted.timestamp, emitted.barrier, emitted.late, strict=True
        )
    ]


def test_full_log_volume_stops_acks_then_resumes_losing_nothing(
    small_volume: Path, server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(small_volume / "data", *SERVE_FLAGS)
    client = _client(server)
    filler = None
    try:
        filler = _fill_mid_run(server, client, small_volume)
        assert f"log volume of {small_volume / 'data'} refuses writes" in server.log_text()
        assert "No space left on device" in server.log_text()
        # not ready, but alive: a restart would not cure a full volume
        assert _health(server.target, LIVENESS_SERVICE) == health_pb2.HealthCheckResponse.SERVING
        time.sleep(2.0)  # two storage retries: still no acknowledgement
        assert all(client.acked(s) == PER_PHASE for s in SOURCES)
        assert client.unacked() == PER_PHASE * len(SOURCES)
        with pytest.raises(ConnectionError, match=r"refuses writes .*No space left on device"):
            # twenty sources: twenty writes open each stream, which all but always meets
            # grpcio's write race (the status lost); the reason must come through anyway
            probe = SourceClient(server.target, sources=range(1, 21), reconnect_timeout=0.5)
            try:
                probe.send(1, 0)
                probe.flush()
                probe.wait_acked(timeout=10)
            finally:
                probe.close()
        assert server.alive()

        filler.unlink()
        filler = None
        _wait(lambda: _health(server.target) == health_pb2.HealthCheckResponse.SERVING,
              "the service serves again")  # fmt: skip
        assert "takes writes again" in server.log_text()
        client.wait_acked(timeout=60)
        assert all(client.acked(s) == 2 * PER_PHASE for s in SOURCES)
        for s in SOURCES:
            client.end_source(s)
        client.flush()
    finally:
        if filler is not None:
            filler.unlink()  # first: close() waits until everything sent is durable
        client.close()

    end = end_run(server.target)
    rows = _ordered_rows(server, end)
    assert end == 2 * PER_PHASE * len(SOURCES) == len(rows)
    _check_everything_once(rows)
    assert get_stats(server.target).totals.received == len(rows)
    assert server.stop() == 0
    assert [r[:4] for r in rows] == _replayed(small_volume / "data", tmp_path)


def test_stopped_while_the_volume_is_full_then_restarted_loses_nothing(
    small_volume: Path, server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """SIGTERM while degraded: a prompt exit, status 1 (input was left unwritten, never
    acknowledged); restarted once space is back, the resends complete the run."""
    server = server_factory(small_volume / "data", *SERVE_FLAGS)
    client = _client(server)
    filler = None
    try:
        filler = _fill_mid_run(server, client, small_volume)
        began = time.monotonic()
        assert server.stop() == 1
        assert time.monotonic() - began < 20
        assert "stopping with the log volume full" in server.log_text()
        assert all(client.acked(s) == PER_PHASE for s in SOURCES)

        filler.unlink()
        filler = None
        server.start()  # same data directory and port
        client.wait_acked(timeout=60)
        assert all(client.acked(s) == 2 * PER_PHASE for s in SOURCES)
        for s in SOURCES:
            client.end_source(s)
        client.flush()
    finally:
        if filler is not None:
            filler.unlink()
            if not server.alive():
                server.start()
        client.close()

    end = end_run(server.target)
    rows = _ordered_rows(server, end)
    assert end == 2 * PER_PHASE * len(SOURCES) == len(rows)
    _check_everything_once(rows)
    assert server.stop() == 0
    assert [r[:4] for r in rows] == _replayed(small_volume / "data", tmp_path)
