"""Real processes for the end-to-end tests: ``evb serve`` as a subprocess on loopback (port 0,
the port read from its first line of output), started and stopped cleanly by fixtures."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
"""Generous: other test runs share the two cores."""


def evb_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "orderer.cli", *args]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


class ServerProcess:
    """``evb serve`` in a subprocess; ``restart`` keeps the port and the data directory."""

    def __init__(self, data_dir: Path, log_dir: Path, *flags: str) -> None:
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.flags = flags
        self.port = 0
        self.process: subprocess.Popen[str] | None = None
        self.starts = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        self.starts += 1
        log = (self.log_dir / f"serve-{self.starts}.log").open("w")
        self.process = subprocess.Popen(
            evb_command(
                "serve",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--data-dir",
                str(self.data_dir),
                "--stop-grace",
                "2",
                *self.flags,
            ),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environment(),
        )
        log.close()
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(START_TIMEOUT):
                self.kill()
                raise RuntimeError(f"evb serve did not start; see {self.log_dir}")
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.kill()
            raise RuntimeError(f"evb serve said {line!r}; see {self.log_dir}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> int:
        """SIGTERM: the graceful stop; returns the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.log_dir.glob("serve-*.log")))


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers with ``server_factory(data_dir, *flags)``; all are stopped afterwards."""
    started: list[ServerProcess] = []

    def make(data_dir: Path, *flags: str) -> ServerProcess:
        log_dir = tmp_path / f"logs-{len(started)}"
        log_dir.mkdir()
        server = ServerProcess(data_dir, log_dir, *flags)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        if server.alive():
            server.stop()


@contextlib.contextmanager
def orderers_of_one_run(
    base: Path, orderers: int, slice_ticks: int, *flags: str
) -> Iterator[list[ServerProcess]]:
    """``evb serve`` orderer k of ``orderers`` (data in ``base/o{k}``, logs in ``base/logs-{k}``)
    for k in index order, each with ``flags``; those still running are stopped afterwards."""
    started: list[ServerProcess] = []
    try:
        for k in range(orderers):
            logs = base / f"logs-{k}"
            logs.mkdir()
            started.append(ServerProcess(
                base / f"o{k}", logs, "--orderers", str(orderers), "--orderer-index", str(k),
                "--slice-ticks", str(slice_ticks), *flags,
            ).start())  # fmt: skip
        yield started
    finally:
        for server in started:
            if server.alive():
                server.stop()
