"""``evb forward`` into a run over three orderers, with real ``evb serve`` processes: one lower
orderer A fed by ``evb send``, its forwarder, and B, three orderers of one sliced run
(docs/scale-out.md).

What B must hold, across a kill -9 of the forwarder (rerun from its commit) or of one of B's
orderers (restarted on its data directory): each of A's ordinary fragments once, at the owner
of its slice only, and each of A's barriers once at every orderer (its copy at the owner is the
one the merged stream keeps), so that the merged stream holds every fragment of A's output
exactly once. A list of B's orderers that is not the run's, in order, is refused in one line,
exit 2, before anything is committed to A.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orderer.client import OrderedStreamReader, commit, end_run, get_committed, get_stats
from orderer.replay.slicing import Slicing
from tests.e2e.conftest import ServerProcess, environment, evb_command
from tests.e2e.test_forward import SEND_FLAGS, SERVE_FLAGS, Fragment, _Forwarder, _fragments

N = 3
T = 20_000_000
"""0.2 s of the run's 100 MHz clock: about a dozen slices over the 2.5 s run, each orderer
several, each slice about 200 fragments of every source."""
SLICING = Slicing(N, T)


def _orderers(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], sources: str
) -> list[ServerProcess]:
    return [
        server_factory(
            tmp_path / f"b{k}", *SERVE_FLAGS, "--sources", sources, "--orderers", str(N),
            "--orderer-index", str(k), "--slice-ticks", str(T),
        )
        for k in range(N)
    ]  # fmt: skip


def _received(servers: list[ServerProcess]) -> int:
    total = 0
    for server in servers:
        with contextlib.suppress(ConnectionError):  # a killed orderer, not back yet
            total += get_stats(server.target, timeout=5, connect_timeout=1).totals.received
    return total


def _items(target: str, until: int) -> list[Fragment]:
    """An orderer's output up to ``until``: (source, timestamp, barrier type, payload)."""
    return [item for item, _ in _fragments(list(OrderedStreamReader(target, 0, until=until)))]


def _forward_into_three(
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
    *,
    kill: str,
    as_source: int | None = None,
    forget_counts: bool = False,
) -> tuple[list[Fragment], list[list[Fragment]], dict[str, Any]]:
    """A's output, each of B's orderers' outputs, and the (last) forwarder's summary; ``kill``:
    ``forward`` or ``orderer`` (B's orderer 1) gets a kill -9 once B took a third of the run;
    ``forget_counts``: while the forwarder is down, its commit's metadata is replaced by none
    (as an older forwarder's), so that the rerun counts A's log again."""
    upstream = server_factory(tmp_path / "a", *SERVE_FLAGS, "--sources", "1,2,3,4")
    down = _orderers(tmp_path, server_factory, "1,2,3,4" if as_source is None else str(as_source))
    sender = subprocess.Popen(
        evb_command("send", "--target", upstream.target, *SEND_FLAGS),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
    )  # fmt: skip
    extra = [] if as_source is None else ["--as-source", str(as_source)]
    to = ",".join(server.target for server in down)
    forwarder = _Forwarder(tmp_path, "--from", upstream.target, "--to", to, *extra)
    name = f"forward-to-{down[0].target}"
    deadline = time.monotonic() + 60
    while _received(down) < 10_000 // 3 or not get_committed(upstream.target, name).offset:
        assert time.monotonic() < deadline, "B did not get going"
        time.sleep(0.05)
    assert forwarder.process.poll() is None  # mid-run: A's run ends once the sender is done
    if kill == "forward":
        forwarder.process.kill()
        forwarder.process.wait(30)
        time.sleep(0.5)  # A's run goes on meanwhile
        if forget_counts:
            committed = get_committed(upstream.target, name)
            assert committed.offset > 0 and committed.metadata
            commit(upstream.target, name, committed.offset, metadata=b"")
        forwarder.start()
    else:
        down[1].kill()
        down[1].start()  # same data directory, same port
    _, err = sender.communicate(timeout=120)
    assert sender.returncode == 0, err
    end = end_run(upstream.target)
    summary = forwarder.finish()
    assert summary["next_offset"] == end
    outputs = [_items(server.target, end_run(server.target)) for server in down]
    upper = _items(upstream.target, end)
    return upper, outputs, summary


def _expected_at(orderer: int, forwarded: list[Fragment]) -> collections.Counter[Fragment]:
    """What orderer ``orderer`` of B must hold of the fragments forwarded: the ordinary ones of
    its slices and every barrier."""
    return collections.Counter(
        item for item in forwarded if item[2] != 0 or (item[1] // T) % N == orderer
    )


def _check(upper: list[Fragment], outputs: list[list[Fragment]], forwarded: list[Fragment]) -> None:
    assert len(upper) == 4 * 2500 + 4 * 4  # the whole run: 2 sync barriers, begin and end
    for k, output in enumerate(outputs):
        assert collections.Counter(output) == _expected_at(k, forwarded), f"orderer {k}"
    # the merged stream's rows (ordinary fragments, and the barrier copies their slice's owner
    # keeps) are A's output, each once
    kept = collections.Counter(
        item
        for k, output in enumerate(outputs)
        for item in output
        if item[2] == 0 or (item[1] // T) % N == k
    )
    assert kept == collections.Counter(forwarded)
    assert all(any(item[2] == 0 for item in output) for output in outputs)  # all took a share


@pytest.mark.parametrize("kill", ["forward", "orderer"])
def test_kill_9_mid_run_every_fragment_of_a_once_in_the_merged_stream(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], kill: str
) -> None:
    upper, outputs, summary = _forward_into_three(tmp_path, server_factory, kill=kill)
    _check(upper, outputs, upper)
    assert summary["sources"] == [1, 2, 3, 4]
    if kill == "forward":  # resumed at its commit, numbered from the counts the commit carried
        assert summary["from_offset"] > 0 and not summary["recounted"]
    else:
        assert summary["reconnects"] >= 1


def test_as_source_into_three_orderers_across_a_kill_9_of_the_forwarder_that_recounts(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """Everything goes as source 100: each barrier group of A is one barrier (source 1's,
    which keeps its type; the others of the group follow as ordinary fragments, routed as
    such). The rerun finds no counts with its commit and numbers each orderer's share from A's
    log below it, groups and routing as the first pass made them."""
    upper, outputs, summary = _forward_into_three(
        tmp_path, server_factory, kill="forward", as_source=100, forget_counts=True
    )
    forwarded = [(100, ts, kind if s == 1 else 0, payload) for s, ts, kind, payload in upper]
    _check(upper, outputs, forwarded)
    assert summary["sources"] == [100]
    assert summary["from_offset"] > 0 and summary["recounted"]


def test_a_list_that_is_not_the_runs_orderers_in_order_is_refused_in_one_line(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """Another order, a missing orderer, one orderer started without ``--peers`` alone, or a
    list holding the upstream: one line naming what is wrong, exit 2, and no consumer
    registered at A (nothing committed)."""
    upstream = server_factory(tmp_path / "a", *SERVE_FLAGS)
    b0, b1, b2 = (s.target for s in _orderers(tmp_path, server_factory, "1"))
    cases = {
        f"{b1},{b0},{b2}": f"target: {b1} is orderer 1 of 3, not orderer 0 of 3",
        f"{b0},{b1}": f"target: {b0} is orderer 0 of 3, not orderer 0 of 2",
        b2: f"{b2} is orderer 2 of 3 and does not name the others",
        f"{b0},{upstream.target}": f"holds {upstream.target}, the upstream itself",
    }
    for to, message in cases.items():
        done = subprocess.run(
            evb_command("forward", "--from", upstream.target, "--to", to),
            capture_output=True, text=True, env=environment(), timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert done.stdout == ""
    for name in (f"forward-to-{b0}", f"forward-to-{b1}", f"forward-to-{b2}"):
        assert not get_committed(upstream.target, name).known
