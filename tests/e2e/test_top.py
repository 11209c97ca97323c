"""``evb top``, ``evb source dead|revive`` and the new keys of ``evb stats --json`` against a real
``evb serve``: a source that never came holds the begin-of-run barrier until it is marked dead
by hand, and then the barrier log, ``evb top --once`` and ``evb stats`` all say so; the live view
keeps going while the server is away and quits with status 0 on Ctrl-C and on q."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from orderer.client import SourceMark, get_stats, set_source_state, set_source_state_async
from orderer.errors import InterfaceError
from tests.conftest import EXAMPLES
from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.e2e.test_cli import evb

SOURCE_KEYS = {
    "queued", "queued_bytes", "oldest_ts", "newest_ts", "last_arrival", "paused", "dead",
    "marked_dead", "out_of_order_last",
}
BARRIER_KEYS = {"offset", "t", "complete", "homogeneous", "types", "missing"}


def _stalled_run(server_factory: Callable[..., ServerProcess], data: Path) -> ServerProcess:
    """Sources 1 to 3 declared, only 1 and 2 send: the begin-of-run barrier waits for source 3
    (the barrier timeout is 4 x 30 s, far beyond the test)."""
    server = server_factory(
        data, "--sources", "1,2,3", "--startup-delay", "0", "--build-window", "30"
    )
    sent = evb(
        "send", "--target", server.target, "--n-sources", "3", "--only-sources", "1,2",
        "--fragments", "200", "--rate", "10000", "--speed", "0", "--payload-size", "8",
        "--no-progress", "--no-end",
    )
    assert sent.returncode == 0, sent.stderr
    return server


def test_a_source_marked_dead_by_hand_releases_its_barrier_and_shows_everywhere(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = _stalled_run(server_factory, tmp_path / "data")
    target = server.target
    before = json.loads(evb("stats", "--target", target, "--json").stdout)
    assert before["barrier_log"] == [] and before["next_offset"] == 0
    queued = before["sources"]["1"]  # 200 fragments and 3 barriers (begin, sync, end)
    assert queued["queued"] == 203 and queued["queued_bytes"] == 203 * 8

    dead = evb("source", "dead", "3", "--target", target)
    assert dead.returncode == 0 and dead.stderr == "", dead.stderr
    assert json.loads(dead.stdout) == {"source": 3, "was_known": True, "dead": True}

    stats = json.loads(evb("stats", "--target", target, "--json").stdout)
    assert {"barrier_log", "sources", "connections", "consumers"} <= set(stats)
    first = stats["barrier_log"][0]
    assert set(first) == BARRIER_KEYS
    assert (first["offset"], first["complete"], first["missing"]) == (0, False, [3])
    assert first["types"] == {"1": 1, "2": 1}
    assert all(set(values) >= SOURCE_KEYS for values in stats["sources"].values())
    assert stats["sources"]["3"]["marked_dead"] and stats["sources"]["3"]["dead"]
    assert isinstance(stats["connections"], list) and stats["consumers"] == {}
    limited = json.loads(evb("stats", "--target", target, "--json", "--barriers", "1").stdout)
    assert limited["barrier_log"] == stats["barrier_log"][-1:]

    top = evb("top", "--once", "--target", target)
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert all(len(line) <= 80 and line.isascii() for line in lines), top.stdout
    assert re.fullmatch(rf"evb top  {target}  \d\d:\d\d:\d\d  running", lines[0]), lines[0]
    assert lines[1].startswith("next offset ") and "window 30 s" in lines[1]
    assert [line for line in lines if line in ("Sources", "Barriers", "Consumers",
                                               "Connections")] == [
        "Sources", "Barriers", "Consumers", "Connections"
    ]
    assert re.search(r"^\s+0\s+\S+\s+INCOMPLETE\s+homogeneous type 1\s+3$", top.stdout, re.M)
    assert re.search(r"^\s+3\s.*dead \(marked\)$", top.stdout, re.M), top.stdout

    revived = evb("source", "revive", "3", "--target", target)
    assert json.loads(revived.stdout) == {"source": 3, "was_known": True, "dead": False}
    assert not get_stats(target, barrier_log_limit=1).sources[3].marked_dead

    unknown = evb("source", "dead", "9", "--target", target)
    assert unknown.returncode == 2, unknown.stderr
    assert "source: 9 is not known to this orderer (known: 1, 2, 3)" in unknown.stderr
    assert 9 not in get_stats(target, barrier_log_limit=1).sources


def test_the_client_calls_and_a_strict_servers_refusal(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """``set_source_state`` and its asyncio twin; with ``--strict-sources`` an undeclared
    source is refused with the server's words, exit status 2 on the command line."""
    server = server_factory(tmp_path / "data", "--sources", "1,2", "--strict-sources")
    assert set_source_state(server.target, 2, True) == SourceMark(was_known=True, dead=True)
    revived = asyncio.run(set_source_state_async(server.target, 2, False))
    assert revived == SourceMark(was_known=True, dead=False)
    with pytest.raises(InterfaceError, match="source: 7 is not a declared source"):
        set_source_state(server.target, 7, True)
    with pytest.raises(InterfaceError, match=r"source: -1 is not an integer"):
        set_source_state(server.target, -1, True)
    with pytest.raises(InterfaceError, match="barrier_log_limit"):
        get_stats(server.target, barrier_log_limit=-1)
    refused = evb("source", "revive", "7", "--target", server.target)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("evb source: source: 7 is not a declared source"), (
        refused.stderr
    )


def _read_until(stream: IO[str] | int, pattern: str, seconds: float = 60) -> str:
    """What ``stream`` (a pipe, or a pty's file descriptor) says until ``pattern`` matches."""
    seen = ""
    deadline = time.monotonic() + seconds
    fd = stream if isinstance(stream, int) else stream.fileno()
    while not re.search(pattern, seen, re.S):
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} in {seen[-3000:]!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536).decode(errors="replace")
            assert chunk, f"the stream ended before {pattern!r}: {seen[-3000:]!r}"
            seen += chunk
    return seen


def test_top_keeps_going_while_the_server_is_away_and_quits_on_ctrl_c(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """Piped, frames follow each other; the second has rates; a killed server is shown in the
    header (the view does not end) and its return is picked up; SIGINT ends it with status 0."""
    server = _stalled_run(server_factory, tmp_path / "data")
    top = subprocess.Popen(
        evb_command("top", "--target", server.target, "--interval", "0.3",
                    "--connect-timeout", "0.5"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env=environment(),
    )
    try:
        assert top.stdout is not None
        seen = _read_until(top.stdout, r"(evb top .*){2}Connections")
        assert re.search(r"\d+/s in, \d+/s out", seen), seen
        server.kill()
        seen = _read_until(top.stdout, r"UNREACHABLE, retrying: .*Sources")
        assert top.poll() is None
        server.start()
        _read_until(top.stdout, r"\d\d  running\n")  # what it printed since the kill: back
        top.send_signal(signal.SIGINT)
        status = top.wait(30)
        assert top.stderr is not None
        errors = top.stderr.read().decode()
        assert status == 0 and "Traceback" not in errors, (status, errors)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait(30)


def test_top_on_a_terminal_quits_on_q(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """On a terminal (a pty here) the view redraws in place; q quits with status 0 and gives
    the terminal back as it found it (the alternate screen left)."""
    server = server_factory(tmp_path / "data", "--startup-delay", "0")
    main, secondary = pty.openpty()
    env = {**environment(), "COLUMNS": "80", "LINES": "40", "TERM": "xterm"}
    top = subprocess.Popen(
        evb_command("top", "--target", server.target, "--interval", "0.2"),
        stdin=secondary, stdout=secondary, stderr=secondary, env=env, close_fds=True,
    )
    os.close(secondary)
    try:
        seen = _read_until(main, r"running.*Connections")
        assert "\x1b[?1049h" in seen  # the alternate screen
        os.write(main, b"q")
        assert top.wait(30) == 0
        rest = ""
        while select.select([main], [], [], 1)[0]:
            try:
                chunk = os.read(main, 65536).decode(errors="replace")
            except OSError:  # the terminal's other end is closed
                break
            if not chunk:
                break
            rest += chunk
        assert "\x1b[?1049l" in rest and "Traceback" not in rest
    finally:
        if top.poll() is None:
            top.kill()
            top.wait(30)
        os.close(main)


def test_a_replay_sent_to_a_server_carries_its_dead_marks_in_file_order(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """``evb send --replay`` of the marked-dead-barrier example: its ``dead`` record becomes a
    SetSourceState call once what came before it is acknowledged, so the server resolves the
    first barrier incomplete (source 2 missing) and, source 2 alive again by its next fragment,
    the second complete, as ``evb replay`` does."""
    server = server_factory(  # declared: the client does not keep the order across sources
        tmp_path / "data", "--build-window", "30", "--startup-delay", "0", "--source-timeout",
        "off", "--sources", "1,2",
    )
    example = EXAMPLES / "marked-dead-barrier" / "input.jsonl"
    sent = evb("send", "--target", server.target, "--replay", str(example), "--speed", "0")
    assert sent.returncode == 0, sent.stderr
    log = get_stats(server.target).barrier_log
    assert [(b.complete, b.missing, b.types) for b in log] == [
        (False, (2,), {1: 3}),
        (True, (), {1: 3, 2: 3}),
    ]
