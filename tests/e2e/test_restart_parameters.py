"""Real ``evb serve`` processes restarted on a run's data directory with other flags than the
run began with (orderer/service/restart.py). 51f603a recovered the run with the new command
line: a bare restart after ``--build-window 1 --startup-delay 0`` exited 1 with
``InternalOrdererError: the ordered log holds 9009 fragments but replaying the arrival log emits
only 0``, a traceback."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from orderer.client import get_stats
from orderer.stats import Stats
from tests.e2e.conftest import ServerProcess, environment, evb_command

FRAGMENTS = 3 * 3003  # evb send --n-sources 3 --fragments 3000: barriers included


def _wait_for_offset(target: str, offset: int, timeout: float = 60.0) -> Stats:
    deadline = time.monotonic() + timeout
    while True:
        stats = get_stats(target, timeout=5)
        if stats.next_offset == offset or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in directory.rglob("*")
        if path.is_file()
    }


def test_a_bare_restart_continues_the_run_and_other_flags_are_weighed(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    data = tmp_path / "data"
    server = server_factory(data, "--build-window", "1", "--startup-delay", "0")
    sent = subprocess.run(
        evb_command(
            "send", "--target", server.target, "--n-sources", "3", "--fragments", "3000",
            "--speed", "0", "--no-progress",
        ),
        capture_output=True, text=True, env=environment(), timeout=120, check=False,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert _wait_for_offset(server.target, FRAGMENTS).next_offset == FRAGMENTS
    assert server.stop() == 0

    # the shift crew's restart: no flags at all; the run goes on as it was
    bare = server_factory(data)
    stats = get_stats(bare.target, timeout=5)
    assert stats.next_offset == FRAGMENTS
    assert stats.config.build_window == 1.0
    assert stats.config.startup_delay == 0.0
    assert bare.stop() == 0
    assert "Traceback" not in bare.log_text()

    # a parameter that cannot change during a run: refused, one line, exit 2, nothing written
    files = _files(data)
    refused = subprocess.run(
        evb_command(
            "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data), "--sources", "1,2"
        ),
        capture_output=True, text=True, env=environment(), timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert _files(data) == files
    assert refused.stderr.splitlines() == [
        f"evb serve: --sources: the run in {data} began with none, not 1,2, and sources cannot "
        "change during a run: leave it out to keep the run's, or begin a new run in another "
        "data directory"
    ]

    # a live parameter: changed after recovery, logged with both values, kept by the run
    changed = server_factory(data, "--build-window", "2")
    assert get_stats(changed.target, timeout=5).config.build_window == 2.0
    assert changed.stop() == 0
    assert "build_window: 1 -> 2 (--build-window differs from the run's)" in changed.log_text()
    again = server_factory(data)
    stats = get_stats(again.target, timeout=5)
    assert stats.config.build_window == 2.0
    assert stats.config.startup_delay == 0.0
    assert stats.next_offset == FRAGMENTS
