"""SIGTERM stops every long-running ``evb`` command promptly and cleanly, as Ctrl-C does
(``orderer/cli/signals.py``): a real ``evb serve`` on loopback, the command as a subprocess,
SIGTERM once it is at work, then its exit status within :data:`PROMPT` seconds and no traceback.

Why: Kubernetes stops containers with SIGTERM, and ``evb forward`` is the forwarder
Deployment's PID 1; a command that ignores SIGTERM is killed after the grace period (exit 137)
on every rollout. Before, ``evb forward``, ``tail --follow``, ``top`` and ``send`` were killed
by SIGTERM's default action (no ``finally`` ran) and, as PID 1, not stopped at all.
``evb serve`` (tests/e2e/conftest.py stops it so) and the Spark job (tests/spark) have their
own handlers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from orderer.cli.signals import EXIT_TERMINATED
from orderer.client import get_stats
from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.e2e.test_cli import evb

PROMPT = 10.0
"""Seconds from SIGTERM to the exit: far below the forwarder's grace period, with room for the
two shared cores."""
READY_TIMEOUT = 60.0


def _start(
    tmp_path: Path, *args: str, stdin: int | None = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        evb_command(*args),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / f"{args[0]}.stderr").open("w"),
        text=True,
        env=environment(),
    )


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        assert process.poll() is None, f"the command ended before {what}"
        assert time.monotonic() < deadline, f"no {what} in {READY_TIMEOUT} s"
        time.sleep(0.1)


def _catches_sigterm(pid: int) -> bool:
    """The process has a SIGTERM handler (``SigCgt`` in /proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def _terminate(tmp_path: Path, process: subprocess.Popen[str], name: str) -> int:
    """SIGTERM, then the exit status; fails if the command outlives :data:`PROMPT` or leaves a
    traceback."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(PROMPT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{name} still ran {PROMPT} s after SIGTERM") from None
    took = time.monotonic() - started
    stderr = (tmp_path / f"{name}.stderr").read_text()
    assert "Traceback" not in stderr, stderr
    assert took < PROMPT
    return int(process.returncode)


def _with_fragments(server: ServerProcess) -> None:
    sent = evb(
        "send", "--target", server.target, "--n-sources", "2", "--fragments", "50",
        "--rate", "10000", "--speed", "0", "--no-progress", "--no-end",
    )
    assert sent.returncode == 0, sent.stderr


def _fragments_in(server: ServerProcess) -> int:
    stats = get_stats(server.target)
    return sum(s.queued for s in stats.sources.values()) + stats.next_offset


def test_forward_stops_on_sigterm(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    lower = server_factory(tmp_path / "lower", "--startup-delay", "0", "--build-window", "0.2")
    upper = server_factory(tmp_path / "upper", "--startup-delay", "0")
    _with_fragments(lower)
    forward = _start(tmp_path, "forward", "--from", lower.target, "--to", upper.target)
    log = tmp_path / "forward.stderr"
    _wait_for(lambda: "forwarding" in log.read_text(), forward, "'forwarding' on stderr")
    assert _terminate(tmp_path, forward, "forward") == EXIT_TERMINATED


def test_tail_follow_stops_on_sigterm(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--build-window", "0.2")
    _with_fragments(server)
    tail = _start(tmp_path, "tail", "--target", server.target, "--follow")
    assert tail.stdout is not None
    first = tail.stdout.readline()  # printed once tail is following
    assert json.loads(first)
    assert _terminate(tmp_path, tail, "tail") == EXIT_TERMINATED


def test_top_stops_on_sigterm_with_status_0_as_on_ctrl_c(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0")
    top = _start(tmp_path, "top", "--target", server.target, "--interval", "0.2")
    assert top.stdout is not None
    assert top.stdout.readline()  # a first frame: top is in its refresh loop
    assert _terminate(tmp_path, top, "top") == 0


def test_send_synthetic_stops_on_sigterm(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0")
    send = _start(
        tmp_path, "send", "--target", server.target, "--n-sources", "1", "--fragments",
        "1000000", "--rate", "100", "--no-progress",
    )
    _wait_for(lambda: _fragments_in(server) > 0, send, "fragment at the server")
    assert _terminate(tmp_path, send, "send") == EXIT_TERMINATED


def test_send_from_standard_input_stops_on_sigterm(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """``evb send --nscldaq -`` waiting for a stream that has not come yet."""
    server = server_factory(tmp_path / "data", "--startup-delay", "0")
    send = _start(
        tmp_path, "send", "--target", server.target, "--nscldaq", "-", stdin=subprocess.PIPE
    )
    deadline = time.monotonic() + READY_TIMEOUT
    while not _catches_sigterm(send.pid) and time.monotonic() < deadline and send.poll() is None:
        time.sleep(0.1)
    time.sleep(1.0)  # into its read of standard input
    try:
        assert _terminate(tmp_path, send, "send") == EXIT_TERMINATED
    finally:
        assert send.stdin is not None
        send.stdin.close()
