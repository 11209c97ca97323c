"""``evb serve`` refusing to start, as a user meets it: a port another server holds (gRPC's
SO_REUSEPORT used to let a second server share it, and the kernel split the clients between
the two), a data directory another server holds, a busy metrics port, and the usual mistakes in
``--listen``, ``--data-dir`` and ``--tls-cert``. Each ends within seconds, with exit status 2 and
one line naming the flag (no traceback), and leaves nothing behind: no data directory created,
the first server untouched and still receiving every client's data.
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from orderer import FragmentBatch
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.wire import convert
from tests.e2e.conftest import ServerProcess, environment, evb_command

REFUSED_WITHIN = 30.0
"""Seconds a refused ``evb serve`` gets to exit (it takes ~1 s; the cores are shared)."""
CLIENTS = 16
"""Connections to the first server: with a shared port, all 16 reaching one of two servers by
chance has odds of 1 in 32,768."""


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        evb_command("serve", "--stop-grace", "1", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )


def _refused(process: subprocess.Popen[str]) -> str:
    """The one line a refused ``evb serve`` printed (checked: exit 2, nothing else said)."""
    try:
        out, err = process.communicate(timeout=REFUSED_WITHIN)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"evb serve was not refused; it runs and said {out!r} {err[-300:]!r}")
    assert process.returncode == 2, (process.returncode, out, err)
    assert out == "" and "Traceback" not in err, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("evb serve: "), err
    return lines[0]


def _send_from_separate_connections(target: str, clients: int) -> None:
    """``clients`` Submit calls, each on a connection of its own, one source each."""
    for source in range(1, clients + 1):
        with grpc.insecure_channel(target) as channel:
            batch = FragmentBatch.from_arrays(
                source=source, timestamp=np.arange(10, dtype=np.uint64) * 10 + source
            )
            request = pb.SubmitRequest(batch=convert.batch_to_pb(batch, 0))
            replies = pb_grpc.OrdererStub(channel).Submit(iter([request]), timeout=30)
            assert any(reply.ack.durable_sequence == 10 for reply in replies)


def _received(target: str) -> dict[int, int]:
    with grpc.insecure_channel(target) as channel:
        stats = pb_grpc.OrdererStub(channel).GetStats(pb.GetStatsRequest(), timeout=30)
    return {counters.source: counters.received for counters in stats.sources}


@pytest.fixture
def first(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> ServerProcess:
    return server_factory(tmp_path / "d1")


@pytest.fixture
def second() -> Iterator[list[subprocess.Popen[str]]]:
    """Second servers, killed afterwards if one was not refused (the code before the fix)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(30)


def test_a_second_serve_on_a_served_port_is_refused_and_every_client_reaches_the_first(
    first: ServerProcess, second: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    other_dir = tmp_path / "d2"
    second.append(_serve("--listen", first.target, "--data-dir", str(other_dir)))
    with selectors.DefaultSelector() as selector:  # until it exits, or says it listens
        selector.register(second[0].stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        selector.select(REFUSED_WITHIN)
    # if it runs, as before the fix, the clients are split between the two servers
    _send_from_separate_connections(first.target, CLIENTS)
    assert _received(first.target) == {source: 10 for source in range(1, CLIENTS + 1)}
    line = _refused(second[0])
    assert line == (
        f"evb serve: --listen: address already in use (another evb serve?) (got '{first.target}')"
    )
    assert not other_dir.exists()  # refused before anything was written
    assert first.alive()


def test_a_second_serve_on_the_same_data_dir_is_refused(
    first: ServerProcess, second: list[subprocess.Popen[str]]
) -> None:
    second.append(_serve("--listen", "127.0.0.1:0", "--data-dir", str(first.data_dir)))
    line = _refused(second[0])
    assert line.startswith("evb serve: --data-dir: is in use by another evb serve"), line
    assert str(first.data_dir) in line
    _send_from_separate_connections(first.target, 2)
    assert _received(first.target) == {1: 10, 2: 10}


def test_a_busy_metrics_port_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = _refused(
            _serve(
                "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                "--metrics-port", str(port),
            )
        )
    assert line == (
        f"evb serve: --metrics-port: 0.0.0.0:{port}: address already in use (got {port})"
    )
    assert not (tmp_path / "d").exists()


def _unwritable(tmp_path: Path) -> Path:
    """A data directory nobody may create: under a read-only directory, or, for root (whom
    permissions do not stop), under /sys, where no one can create files."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked / "data"
    if not Path("/sys/kernel").is_dir():
        pytest.skip("running as root without /sys: no directory root cannot write")
    return Path("/sys/evb-test-data")


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    # flags given, and a regular expression of the line after "evb serve: " ({tmp}: tmp_path)
    "listen not HOST:PORT": (
        lambda _: ["--listen", "nonsense"],
        re.escape("--listen: must be HOST:PORT, e.g. 127.0.0.1:50051 or [::]:50051")
        + re.escape(" (got 'nonsense')"),
    ),
    "listen not local": (
        lambda _: ["--listen", "192.0.2.1:50051"],  # TEST-NET-1: never this host's address
        re.escape("--listen: not an address of this host (got '192.0.2.1:50051')"),
    ),
    "listen port out of range": (  # gRPC took it modulo 65536 and served on port 34463
        lambda _: ["--listen", "127.0.0.1:99999"],
        re.escape("--listen: the port must be a number from 0 to 65535 (got '127.0.0.1:99999')"),
    ),
    "data dir a file": (
        lambda tmp: ["--data-dir", str(tmp / "file")],
        re.escape("--data-dir: is not a directory (got '") + "{tmp}" + re.escape("/file')"),
    ),
    "data dir under a file": (
        lambda tmp: ["--data-dir", str(tmp / "file" / "data")],
        re.escape("--data-dir: cannot be created: ") + "{tmp}" + re.escape("/file is not a dir"),
    ),
    "data dir unwritable": (
        lambda tmp: ["--data-dir", str(_unwritable(tmp))],
        re.escape("--data-dir: cannot hold the logs: "),
    ),
    "tls cert missing": (  # the parameter's name, however the CLI spells it
        lambda tmp: ["--tls-cert", str(tmp / "no.pem"), "--tls-key", str(tmp / "no.key")],
        r"(--tls-cert|tls_cert): cannot be read \(No such file or directory\) \(got '{tmp}",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistake_in_serve_flags_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    flags, pattern = CASES[case]
    args = ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), *flags(tmp_path)]
    line = _refused(_serve(*args))
    assert re.match(pattern.replace("{tmp}", re.escape(str(tmp_path))), line[len("evb serve: "):])
    assert not (tmp_path / "d").exists()
