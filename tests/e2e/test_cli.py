"""``evb serve``, ``evb send``, ``evb tail``, ``evb stats``, ``evb end-run`` and ``evb
consumers`` as a user runs them (``evb top`` and ``evb source``: ``test_top.py``): a YAML file
in the custom resource's spelling with flags over it, a replay file sent to a live server, the
ordered output printed in the ``evb replay`` OUT format, the statistics readable in 80 columns,
a run ended by hand, and the exit statuses of errors."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orderer.apps.stats import write_stats
from orderer.cli import main
from orderer.client import get_stats
from orderer.replay.synthetic import SyntheticRun, generate_records, write_jsonl
from tests.e2e.conftest import ServerProcess, environment, evb_command


def evb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``evb ARGS`` in a subprocess, its output captured (no ``$COLUMNS``: 80 when piped)."""
    env = {key: value for key, value in environment().items() if key != "COLUMNS"}
    return subprocess.run(
        evb_command(*args),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_serve_send_tail_stats(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    config = tmp_path / "evb.yaml"
    config.write_text(
        "buildWindow: 5\nstartupDelay: 0.1\nsources: [1, 2, 3]\nstrictSources: true\n"
        "maxPayloadBytes: 4096\nsourceTimeout: 0\n"  # the custom resource's "off"
    )
    server = server_factory(tmp_path / "data", "--config", str(config), "--build-window", "0.3")
    spec = SyntheticRun(
        n_sources=3, fragments_per_source=300, rate=3000.0, payload_size=4, batch_size=5, seed=3
    )
    run = tmp_path / "run.jsonl"
    write_jsonl(generate_records(spec), run)

    sent = evb("send", "--target", server.target, "--replay", str(run), "--speed", "0")
    assert sent.returncode == 0, sent.stderr
    summary = json.loads(sent.stdout)
    assert summary["fragments"] == 3 * 300 + 3 * 3  # barriers: begin, sync, end per source

    stats = evb("stats", "--target", server.target, "--json")
    assert stats.returncode == 0, stats.stderr
    counters = json.loads(stats.stdout)
    assert counters["config"]["build_window"] == 0.3  # the flag over the file
    assert counters["config"]["source_timeout"] == "off"
    assert counters["config"]["sources"] == [1, 2, 3]
    assert counters["totals"]["received"] == summary["fragments"]
    assert all(counters["sources"][s]["ended"] for s in ("1", "2", "3"))
    table = evb("stats", "--target", server.target)
    assert table.returncode == 0 and "total" in table.stdout and "run" not in table.stderr

    tail = evb("tail", "--target", server.target, "--payload")
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [line["seq"] for line in lines] == list(range(counters["next_offset"]))
    assert set(lines[0]) == {"seq", "t", "source", "ts", "barrier", "late", "payload"}
    records = [json.loads(line) for line in run.read_text().splitlines()]
    expected = collections.Counter((r["source"], r["ts"]) for r in records if "ts" in r)
    assert collections.Counter((r["source"], r["ts"]) for r in lines) == expected
    part = evb("tail", "--target", server.target, "--from", "10", "--until", "15")
    assert [json.loads(line)["seq"] for line in part.stdout.splitlines()] == [10, 11, 12, 13, 14]


def test_bad_flags_and_files_exit_2_naming_the_culprit(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("buildWindw: 3\n")
    assert main(["serve", "--config", str(bad), "--data-dir", str(tmp_path / "d")]) == 2
    assert "buildWindw" in capsys.readouterr().err
    bad.write_text("- not\n- a mapping\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["serve", "--build-window", "-1", "--data-dir", str(tmp_path / "d")]) == 2
    assert "--build-window" in capsys.readouterr().err
    assert main(["send", "--target", "127.0.0.1:1", "--stall", "x"]) == 2
    assert "--stall" in capsys.readouterr().err
    assert main(["send", "--target", "127.0.0.1:1", "--speed", "-1"]) == 2


def test_an_unreachable_server_exits_3() -> None:
    result = evb("stats", "--target", "127.0.0.1:1", "--timeout", "0.5", timeout=60)
    assert result.returncode == 3
    assert "unavailable" in result.stderr


def _plain(text: str) -> None:
    """80 columns of ASCII: no box drawing, no styles, no padding to a fixed width."""
    for line in text.splitlines():
        assert len(line) <= 80 and line.isascii() and line == line.rstrip(), repr(line)


def test_stats_piped_is_plain_and_fits_80_columns(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--build-window", "0.2")
    sent = evb(
        "send", "--target", server.target, "--n-sources", "7", "--fragments", "500",
        "--rate", "20000", "--speed", "0", "--no-progress", "--no-end",
    )
    assert sent.returncode == 0, sent.stderr
    table = evb("stats", "--target", server.target)
    assert table.returncode == 0, table.stderr
    _plain(table.stdout)
    titles = ["Counters", "Queues", "Barriers", "Connections", "Consumers"]
    assert [line for line in table.stdout.splitlines() if line in titles] == titles
    counters = table.stdout.split("\nCounters\n")[1].split("\nQueues\n")[0]
    rows = [line.split() for line in counters.splitlines()]
    tables = sum(row[:1] == ["total"] for row in rows)  # as many as 80 columns need
    assert tables >= 2
    assert [row[0] for row in rows if row and row[0].isdigit()] == [*map(str, range(1, 8))] * tables

    # The same counters a million times bigger (a long run): still 80 columns, nothing lost
    stats = get_stats(server.target)
    names = ("received", "emitted", "late", "duplicates", "out_of_order", "max_lateness")
    sources = {
        source: dataclasses.replace(
            counters, **{name: getattr(counters, name) * 1_000_000 + 123_456 for name in names}
        )
        for source, counters in stats.sources.items()
    }
    stats = dataclasses.replace(stats, sources=sources, next_offset=stats.next_offset * 1_000_000)
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    write_stats(stats, out)
    _plain(out.getvalue())
    assert f"{stats.totals.received:,}" in out.getvalue()
    assert f"{stats.sources[7].received:,}" in out.getvalue()


def test_end_run_by_hand(tmp_path: Path, server_factory: Callable[..., ServerProcess]) -> None:
    """``evb end-run`` is what a hand-started ``evb spark-job --target`` waits for (it finishes
    once the stats say run_ended and it has read up to next_offset); before it, only Python or
    ``kubectl patch`` could end a run."""
    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--build-window", "30")
    sent = evb(
        "send", "--target", server.target, "--n-sources", "3", "--fragments", "200",
        "--rate", "10000", "--speed", "0", "--no-progress", "--no-end",
    )
    assert sent.returncode == 0, sent.stderr
    received = json.loads(sent.stdout)["fragments"]
    before = json.loads(evb("stats", "--target", server.target, "--json").stdout)
    assert not before["run_ended"] and before["next_offset"] < received  # the window holds some
    ended = evb("end-run", "--target", server.target)
    assert ended.returncode == 0, ended.stderr
    assert json.loads(ended.stdout) == {"next_offset": received}
    stats = json.loads(evb("stats", "--target", server.target, "--json").stdout)
    assert stats["run_ended"] and stats["next_offset"] == received
    tail = evb("tail", "--target", server.target)
    assert len(tail.stdout.splitlines()) == received
    again = evb("end-run", "--target", server.target)  # ending an ended run changes nothing
    assert again.returncode == 0 and json.loads(again.stdout) == {"next_offset": received}


def test_consumers_list_and_delete(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """``evb consumers`` shows each consumer's committed offset and lag; ``evb consumers delete``
    forgets one (its retention released); an unknown name exits 2 naming the known ones."""
    from orderer.client import commit

    server = server_factory(tmp_path / "data", "--startup-delay", "0", "--build-window", "0.1")
    sent = evb(
        "send", "--target", server.target, "--n-sources", "2", "--fragments", "100",
        "--rate", "10000", "--speed", "0", "--no-progress",
    )
    assert sent.returncode == 0, sent.stderr
    total = json.loads(sent.stdout)["fragments"]
    assert commit(server.target, "spark", 150) == (150, 150)
    assert commit(server.target, "old-job", 10) == (10, 10)

    listed = evb("consumers", "--target", server.target, "--json")
    assert listed.returncode == 0, listed.stderr
    consumers = json.loads(listed.stdout)
    assert {name: (c["committed"], c["lag"]) for name, c in consumers.items()} == {
        "old-job": (10, total - 10),
        "spark": (150, total - 150),
    }
    for consumer in consumers.values():  # the output they lack was emitted a moment ago
        assert 0 < consumer["lag_seconds"] < 120
        assert time.time() - 120 < consumer["last_commit"] <= time.time()
    table = evb("consumers", "--target", server.target).stdout.splitlines()
    assert table[0].split() == ["consumer", "committed", "lag", "lag", "s", "last", "commit"]
    assert table[3].split()[:3] == ["spark", "150", f"{total - 150:,}"]
    assert re.fullmatch(r"\d+\.\d", table[3].split()[3]) and table[3].endswith("s")

    deleted = evb("consumers", "delete", "old-job", "--target", server.target)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {"deleted": "old-job", "lowest": 150}
    assert list(json.loads(evb("consumers", "--target", server.target, "--json").stdout)) == [
        "spark"
    ]
    unknown = evb("consumers", "delete", "old-job", "--target", server.target)
    assert unknown.returncode == 2
    assert "NAME: is not a known consumer (known: spark) (got 'old-job')" in unknown.stderr
    nameless = evb("consumers", "delete", "--target", server.target)
    assert nameless.returncode == 2 and "needs the consumer's name" in nameless.stderr
