"""What a shift crew gets after ``evb end-run``, with real processes (``evb serve``, ``evb tail
--follow``, ``evb send``): ``tail --follow`` stops by itself (exit 0) once the run ended and
all of it was printed, where it waited forever; a ``send`` between ``end-run`` and
``begin-run`` is taken into the ended run as the contract says (it reopens it, README "Runs one
after another"), and the sender is told so on stderr, naming the run and ``evb begin-run``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.e2e.test_cli import evb

FRAGMENTS = 200
"""Fragments per source of each send."""
STOPS_WITHIN = 20.0
"""Seconds ``tail --follow`` may take to stop after the end of run (it asks every 0.5 s; the
rest is two busy cores)."""


def _send(target: str, *more: str) -> subprocess.CompletedProcess[str]:
    done = evb(
        "send", "--target", target, "--n-sources", "2", "--fragments", str(FRAGMENTS),
        "--speed", "0", "--no-progress", *more,
    )
    assert done.returncode == 0, done.stderr
    return done


def _stats(target: str) -> dict[str, Any]:
    done = evb("stats", "--target", target, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _follow(target: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        evb_command("tail", "--target", target, "--follow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )


def _finished(tail: subprocess.Popen[str], within: float) -> tuple[int, list[str], str]:
    try:
        out, err = tail.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        tail.kill()
        out, err = tail.communicate()
        message = f"evb tail --follow still ran {within} s after the end of run: {err}"
        raise AssertionError(message) from None
    return tail.returncode, out.splitlines(), err


def test_tail_follow_stops_once_the_run_ended_and_all_of_it_was_printed(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--build-window", "0.2")
    target = server.target
    following = _follow(target)
    time.sleep(1.0)  # it follows a live run: nothing yet
    assert following.poll() is None, following.stderr
    _send(target)
    time.sleep(1.0)
    assert following.poll() is None  # a run going on: it keeps following
    ended = evb("end-run", "--target", target)
    assert ended.returncode == 0, ended.stderr
    end = json.loads(ended.stdout)["next_offset"]
    assert end >= 2 * FRAGMENTS  # and the synthetic run's barriers
    status, lines, err = _finished(following, STOPS_WITHIN)
    assert status == 0, err
    assert [json.loads(line)["seq"] for line in lines] == list(range(end))
    # started after the end: the whole run, then it stops at once
    status, lines, err = _finished(_follow(target), STOPS_WITHIN)
    assert status == 0 and len(lines) == end, err


def test_a_send_after_end_run_reopens_the_run_and_says_so(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--run", "7")
    target = server.target
    first = _send(target)
    assert "has ended" not in first.stderr
    received = _stats(target)["totals"]["received"]
    assert evb("end-run", "--target", target).returncode == 0
    late = _send(target)
    assert late.stderr.splitlines()[0] == (
        "evb send: run 7 has ended (evb end-run): these fragments reopen it and are its own;"
        " `evb begin-run` starts the next run"
    )
    stats = _stats(target)
    assert not stats["run_ended"] and stats["run"] == 7
    assert stats["totals"]["received"] == 2 * received  # taken, into run 7
    assert evb("end-run", "--target", target).returncode == 0
    assert evb("begin-run", "--target", target).returncode == 0
    next_run = _send(target)
    assert "has ended" not in next_run.stderr
    assert _stats(target)["run"] == 8
