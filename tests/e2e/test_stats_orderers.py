"""``evb stats`` and ``evb top --once`` of a run over three real orderers (``evb serve
--orderers 3 ... --peers``): given one orderer's address (its answer names the others) or the
three in order, a line for the run, the counters summed, and one per orderer; the orderers
given out of order are refused in one line (exit 2); an orderer that does not answer is named
(exit 3). One orderer of a run of one is drawn by the code it always was
(``tests/e2e/test_top.py``, ``tests/apps/test_console.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orderer.client import get_stats
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_cli import evb
from tests.e2e.test_operator_scale_out import _free_ports

T = 100_000


@pytest.fixture
def run(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Three orderers of one run, each told the others (``--peers``), fed 2 x 300 fragments
    through one address."""
    ports = _free_ports(3)
    peers = ",".join(f"127.0.0.1:{port}" for port in ports)
    orderers = []
    for k, port in enumerate(ports):
        logs = tmp_path / f"orderer-{k}"
        logs.mkdir()
        server = ServerProcess(
            logs / "data", logs,
            "--sources", "1,2", "--build-window", "0.2", "--startup-delay", "0",
            "--orderers", "3", "--orderer-index", str(k), "--slice-ticks", str(T),
            "--peers", peers,
        )  # fmt: skip
        server.port = port
        orderers.append(server)
    try:
        for server in orderers:
            server.start()
        sent = evb(
            "send", "--target", orderers[0].target, "--n-sources", "2", "--fragments", "300",
            "--rate", "10000", "--speed", "0", "--payload-size", "8", "--no-progress",
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        yield orderers
    finally:
        for server in orderers:
            if server.alive():
                server.stop()


def _row(lines: list[str], first: str) -> list[str]:
    """The first line that begins with ``first`` (the run's table comes first), in words."""
    return next(line.split() for line in lines if line.split()[:1] == [first])


def test_stats_and_top_show_the_run_and_each_orderer(run: list[ServerProcess]) -> None:
    targets = [server.target for server in run]
    received = [get_stats(t).totals.received for t in targets]
    # the begin, sync and end barriers of both sources reach every orderer
    assert all(received) and sum(received) == 2 * 300 + 3 * 2 * 3

    answer = evb("stats", "--target", ",".join(targets), "--json")
    assert answer.returncode == 0, answer.stderr
    stats = json.loads(answer.stdout)
    assert stats["run"]["totals"]["received"] == sum(received)
    assert stats["run"]["orderers"] == 3 and stats["run"]["run_ended"] is False
    assert [o["target"] for o in stats["orderers"]] == targets
    assert [o["slicing"]["index"] for o in stats["orderers"]] == [0, 1, 2]

    table = evb("stats", "--target", targets[1])  # one address: its answer names the others
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"a run over 3 orderers, slices of {T} ticks"
    assert all(len(line) <= 80 and line.isascii() for line in lines), table.stdout
    assert _row(lines, "run")[:4] == ["run", "running", "1", f"{sum(received):,}"]
    for k in range(3):
        assert _row(lines, str(k))[:4] == [str(k), "running", "1", f"{received[k]:,}"]
        assert f"orderer {k}: {targets[k]}" in lines
        assert f"orderer {k} ({targets[k]})" in lines  # then its own sections

    top = evb("top", "--once", "--target", targets[0])
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].startswith(f"evb top  {','.join(targets)}  ")
    assert _row(lines, "run")[3] == f"{sum(received):,}"
    assert [_row(lines, str(k))[3] for k in range(3)] == [f"{n:,}" for n in received]

    swapped = evb("stats", "--target", ",".join([targets[1], targets[0], targets[2]]))
    assert swapped.returncode == 2
    assert swapped.stderr.strip() == (
        f"evb stats: target: {targets[1]} is orderer 1 of 3, not orderer 0 of 3: give the run's"
        " orderers in their order"
    )

    run[2].kill()
    down = evb("stats", "--target", ",".join(targets), "--timeout", "2", "--connect-timeout", "2")
    assert down.returncode == 3 and targets[2] in down.stderr, down.stderr
    assert len(down.stderr.strip().splitlines()) == 1 and down.stdout == ""


def test_end_run_begin_run_and_source_reach_every_orderer_and_do_nothing_twice(
    run: list[ServerProcess],
) -> None:
    """``evb end-run`` given one address ends the run at all three (``--peers``); with one
    orderer down it ends nothing and names that one (exit 3); a second ``evb end-run`` asks
    nothing of an orderer whose run has ended; ``evb begin-run`` over the three begins the next
    run at each."""
    targets = [server.target for server in run]
    swapped = evb("end-run", "--target", ",".join([targets[0], targets[2], targets[1]]))
    assert swapped.returncode == 2 and "not orderer 1 of 3" in swapped.stderr, swapped.stderr

    marked = evb("source", "dead", "2", "--target", targets[0])  # at every orderer
    assert marked.returncode == 0, marked.stderr
    assert [r["dead"] for r in json.loads(marked.stdout)["orderers"]] == [True] * 3
    assert all(get_stats(t).sources[2].marked_dead for t in targets)
    revived = evb("source", "revive", "2", "--target", ",".join(targets))
    assert revived.returncode == 0, revived.stderr
    assert not any(get_stats(t).sources[2].marked_dead for t in targets)

    run[2].kill()
    down = evb("end-run", "--target", ",".join(targets), "--timeout", "2",
               "--connect-timeout", "2")  # fmt: skip
    assert down.returncode == 3, down.stderr
    assert f"orderer 2 ({targets[2]}): cannot reach" in down.stderr, down.stderr
    assert "nothing was asked of the others" in down.stderr and len(down.stderr.splitlines()) == 1
    run[2].start()  # same port, same data directory
    assert not any(get_stats(t).run_ended for t in targets)

    ended = evb("end-run", "--target", targets[1])  # one address names the others
    assert ended.returncode == 0, ended.stderr
    rows = json.loads(ended.stdout)["orderers"]
    assert [(r["orderer"], r["ended_before"]) for r in rows] == [(0, False), (1, False), (2, False)]
    assert [r["next_offset"] for r in rows] == [get_stats(t).next_offset for t in targets]
    assert all(get_stats(t).run_ended for t in targets)
    again = evb("end-run", "--target", ",".join(targets))
    assert [r["ended_before"] for r in json.loads(again.stdout)["orderers"]] == [True] * 3

    begun = evb("begin-run", "--target", ",".join(targets))
    assert begun.returncode == 0, begun.stderr
    rows = json.loads(begun.stdout)["orderers"]
    assert [(r["orderer"], r["run"]) for r in rows] == [(0, 2), (1, 2), (2, 2)]
    assert [get_stats(t).run for t in targets] == [2, 2, 2]


def test_one_orderer_of_several_without_peers_is_not_ended_alone(tmp_path: Path) -> None:
    """Ending a third of a run by mistake cannot be undone: refused, one line, exit 2."""
    logs = tmp_path / "orderer"
    logs.mkdir()
    server = ServerProcess(
        logs / "data", logs, "--sources", "1", "--orderers", "3", "--orderer-index", "1",
        "--slice-ticks", str(T),
    )  # fmt: skip
    server.start()
    try:
        alone = evb("end-run", "--target", server.target)
        assert alone.returncode == 2
        assert alone.stderr.strip() == (
            f"evb end-run: target: {server.target} is orderer 1 of 3 and does not name the "
            "others (evb serve --peers): give every orderer's address, in their order "
            "(--target a:50051,b:50051,...)"
        )
        assert not get_stats(server.target).run_ended
    finally:
        server.stop()


def test_peers_that_do_not_resolve_here_are_named_with_what_to_do(tmp_path: Path) -> None:
    """The peers an orderer names are the cluster's names (a pod under the headless Service):
    from a laptop with one port-forwarded address they do not resolve. One line, exit 3, naming
    the orderer and saying to give every address as it is reached."""
    (port,) = _free_ports(1)
    logs = tmp_path / "orderer"
    logs.mkdir()
    peers = ",".join(
        [f"127.0.0.1:{port}", *(f"run-orderer-{k}.nowhere.invalid:50051" for k in (1, 2))]
    )
    server = ServerProcess(
        logs / "data", logs, "--sources", "1", "--orderers", "3", "--orderer-index", "0",
        "--slice-ticks", str(T), "--peers", peers,
    )  # fmt: skip
    server.port = port
    server.start()
    try:
        answer = evb("stats", "--target", server.target, "--connect-timeout", "2")
        assert answer.returncode == 3, answer.stderr
        assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
        assert "run-orderer-1.nowhere.invalid:50051" in answer.stderr
        assert "give every orderer's address as you reach it" in answer.stderr
    finally:
        server.stop()
