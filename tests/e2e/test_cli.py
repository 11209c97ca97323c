"""``evb serve``, ``evb send``, ``evb tail`` and ``evb stats`` as a user runs them: a YAML file
in the custom resource's spelling with flags over it, a replay file sent to a live server, the
ordered output printed in the ``evb replay`` OUT format, and the exit statuses of errors."""

from __future__ import annotations

import collections
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from orderer.cli import main
from orderer.synthetic import SyntheticRun, generate_records, write_jsonl
from tests.e2e.conftest import ServerProcess, environment, evb_command


def _evb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        evb_command(*args),
        capture_output=True,
        text=True,
        env=environment(),
        timeout=timeout,
        check=False,
    )


def test_serve_send_tail_stats(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    config = tmp_path / "evb.yaml"
    config.write_text(
        "buildWindow: 5\nstartupDelay: 0.1\nsources: [1, 2, 3]\nstrictSources: true\n"
        "maxPayloadBytes: 4096\nsourceTimeout: off\n"
    )
    server = server_factory(tmp_path / "data", "--config", str(config), "--build-window", "0.3")
    spec = SyntheticRun(
        n_sources=3, fragments_per_source=300, rate=3000.0, payload_size=4, batch_size=5, seed=3
    )
    run = tmp_path / "run.jsonl"
    write_jsonl(generate_records(spec), run)

    sent = _evb("send", "--target", server.target, "--replay", str(run), "--speed", "0")
    assert sent.returncode == 0, sent.stderr
    summary = json.loads(sent.stdout)
    assert summary["fragments"] == 3 * 300 + 3 * 3  # barriers: begin, sync, end per source

    stats = _evb("stats", "--target", server.target, "--json")
    assert stats.returncode == 0, stats.stderr
    counters = json.loads(stats.stdout)
    assert counters["config"]["build_window"] == 0.3  # the flag over the file
    assert counters["config"]["source_timeout"] == "off"
    assert counters["config"]["sources"] == [1, 2, 3]
    assert counters["totals"]["received"] == summary["fragments"]
    assert all(counters["sources"][s]["ended"] for s in ("1", "2", "3"))
    table = _evb("stats", "--target", server.target)
    assert table.returncode == 0 and "total" in table.stdout and "run" not in table.stderr

    tail = _evb("tail", "--target", server.target, "--payload")
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [line["seq"] for line in lines] == list(range(counters["next_offset"]))
    assert set(lines[0]) == {"seq", "t", "source", "ts", "barrier", "late", "payload"}
    records = [json.loads(line) for line in run.read_text().splitlines()]
    expected = collections.Counter((r["source"], r["ts"]) for r in records if "ts" in r)
    assert collections.Counter((r["source"], r["ts"]) for r in lines) == expected
    part = _evb("tail", "--target", server.target, "--from", "10", "--until", "15")
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
    result = _evb("stats", "--target", "127.0.0.1:1", "--timeout", "0.5", timeout=60)
    assert result.returncode == 3
    assert "unavailable" in result.stderr
