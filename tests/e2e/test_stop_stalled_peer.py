"""``evb serve`` stops within its grace period while a subscriber does not read, on a busy host.

Why: the gRPC server's stop completes only once every connection is gone, and a connection
with a write in progress to a peer that does not read (its socket buffers full) ends only when
the kernel gives up on that write, at gRPC's TCP user timeout (20 s); gRPC's teardown at the
process's exit waits for it too. With ``--stop-grace 2`` the stop took 17-20 s whenever such a
write was in progress (under load, where a subscriber stopped with SIGSTOP had not drained its
socket, it was most of the time), past the orderer pod's grace period.
``RunningServer.stop`` (orderer/service/server.py) bounds its wait and ``serve`` exits
without gRPC's teardown once the logs are closed.

The stalled subscriber is made deterministic here: a raw HTTP/2 connection that announces
windows of 2 GiB (so gRPC's flow control never stops the server), a receive buffer of a few
kilobytes, and that never reads after its request. The test waits until the server's kernel
send queue towards it is full, so that the server has a write in progress, loads the host with
busy loops and sends SIGTERM.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.client import end_run
from tests.e2e.conftest import ServerProcess, environment, evb_command

GRACE = 2.0
"""``--stop-grace`` of the tests' servers (tests/e2e/conftest.py)."""
MARGIN = 5.0
"""Seconds past the grace the exit may take on a loaded host: the bound of the gRPC stop's
own slack (1 s), closing the logs, the interpreter's start of the signal's handling. Before
the fix, 15-18 s."""
BUSY_LOOPS = 4
"""Busy-loop processes during the stop: twice the cores of the machine the suite runs on."""
SEND_QUEUE_FULL = 1 << 20
"""Bytes in the server's kernel send queue towards the stalled peer that say it stalls (its
receive buffer holds a few kilobytes; the output is some 12 MB)."""
WAIT = 60.0


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream
    ) + payload


def _literal(name: str, value: str) -> bytes:
    """HPACK: a literal header field without indexing, new name, no Huffman coding."""
    raw_name, raw_value = name.encode(), value.encode()
    assert len(raw_name) < 127 and len(raw_value) < 127
    return bytes([0, len(raw_name)]) + raw_name + bytes([len(raw_value)]) + raw_value


def _read_frame(sock: socket.socket) -> tuple[int, int]:
    header = b""
    while len(header) < 9:
        chunk = sock.recv(9 - len(header))
        assert chunk, "the server closed the connection"
        header += chunk
    length = int.from_bytes(header[:3], "big")
    remaining = length
    while remaining:
        remaining -= len(sock.recv(min(remaining, 4096)))
    return header[3], header[4]


def stalled_subscriber(port: int) -> socket.socket:
    """A connection that subscribes from offset 0, then never reads again."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: no autotuning
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", port))
    window = (1 << 31) - 1
    settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, window)  # no push, 2 GiB
    sock.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + _frame(0x4, 0, 0, settings)
        + _frame(0x8, 0, 0, struct.pack(">I", window - 65535))  # the connection's window
    )
    while _read_frame(sock) != (0x4, 0):  # the server's SETTINGS, to acknowledge
        pass
    headers = b"".join(
        _literal(name, value)
        for name, value in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/evb.v1.Orderer/Subscribe"),
            (":authority", f"127.0.0.1:{port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )
    request = pb.SubscribeRequest(from_offset=0).SerializeToString()
    sock.sendall(
        _frame(0x4, 0x1, 0, b"")  # SETTINGS ACK
        + _frame(0x1, 0x4, 1, headers)  # HEADERS, END_HEADERS
        + _frame(0x0, 0x1, 1, b"\0" + struct.pack(">I", len(request)) + request)  # END_STREAM
    )
    return sock


def _send_queue(server_port: int, peer_port: int) -> int:
    """Bytes in the kernel's send queue of the server's end of the connection to ``peer_port``
    (/proc/net/tcp and tcp6, as gRPC's socket may be IPv6 with a mapped IPv4 address: local
    and remote address, then ``tx_queue:rx_queue`` in hex)."""
    ends = (f":{server_port:04X}", f":{peer_port:04X}")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if (fields[1][-5:], fields[2][-5:]) == ends:
                return int(fields[4].split(":")[0], 16)
    return 0


@pytest.fixture
def busy_host() -> Iterator[Callable[[], None]]:
    """``load()`` starts :data:`BUSY_LOOPS` busy loops, stopped after the test."""
    loops: list[subprocess.Popen[bytes]] = []

    def load() -> None:
        loops.extend(
            subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(BUSY_LOOPS)
        )

    yield load
    for loop in loops:
        loop.kill()
        loop.wait()


def test_a_stop_with_a_stalled_subscriber_ends_within_the_grace_on_a_busy_host(
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
    busy_host: Callable[[], None],
) -> None:
    server = server_factory(
        tmp_path / "data", "--build-window", "0.2", "--startup-delay", "0", "--fsync", "never"
    )
    sent = subprocess.run(
        evb_command(
            "send", "--target", server.target, "--n-sources", "2", "--fragments", "6000",
            "--payload-size", "1024", "--speed", "0", "--batch-size", "200", "--no-progress",
        ),
        capture_output=True, text=True, env=environment(), timeout=WAIT,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert end_run(server.target) == 2 * (6000 + 3)  # all of it durable: ~12 MB to subscribe
    peer = stalled_subscriber(server.port)
    try:
        peer_port = peer.getsockname()[1]
        deadline = time.monotonic() + WAIT
        while _send_queue(server.port, peer_port) < SEND_QUEUE_FULL:
            assert time.monotonic() < deadline, "the server never filled the peer's socket"
            time.sleep(0.05)
        busy_host()
        assert server.process is not None
        started = time.monotonic()
        server.process.terminate()
        try:
            status = server.process.wait(GRACE + MARGIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"evb serve still ran {GRACE + MARGIN} s after SIGTERM")
        took = time.monotonic() - started
    finally:
        peer.close()
    log = server.log_text()
    print(f"\nstopped {took:.2f} s after SIGTERM (grace {GRACE} s) with a stalled peer")
    assert status == 0, log
    assert "connections still open" in log  # the case this test is about was made
    assert "closing the logs failed" not in log and "Traceback" not in log, log
