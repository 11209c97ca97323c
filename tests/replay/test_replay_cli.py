"""`evb replay` as a user runs it: the spec's worked examples, bad records, bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import example_dirs

EVB = [sys.executable, "-m", "orderer.cli"]


def _flags(config: dict) -> list[str]:
    flags = []
    for key, value in config.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        flags += [flag, str(value)]
    return flags


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EVB, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_replay_agrees_with_worked_example(example: Path, tmp_path: Path, repo: Path) -> None:
    config = json.loads((example / "config.json").read_text())
    out, stats = tmp_path / "out.jsonl", tmp_path / "stats.json"
    result = _run(
        [
            "replay",
            str(example / "input.jsonl"),
            "--output",
            str(out),
            "--stats",
            str(stats),
            *_flags(config),
        ],
        cwd=repo,
    )
    assert result.returncode == 0, result.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    expected = [json.loads(line) for line in (example / "expected.jsonl").read_text().splitlines()]
    assert [(g["source"], g["ts"], g["barrier"], g["late"]) for g in got] == [
        (e["source"], e["ts"], e["barrier"], e["late"]) for e in expected
    ]
    assert [g["seq"] for g in got] == list(range(len(got)))
    for g, e in zip(got, expected, strict=True):
        assert abs(g["t"] - e["t"]) <= 1e-6, (g, e)
    got_stats = json.loads(stats.read_text())
    expected_stats = json.loads((example / "expected-stats.json").read_text())
    for section in ("totals", "barriers", "missing", "sources"):
        assert got_stats[section] == expected_stats[section], section


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"t": 0, "source": 1, "ts": 5}', "not json"], "line 2: not valid JSON"),
        (
            ['{"t": 1, "source": 1, "ts": 5}', '{"t": 0.5, "source": 1, "ts": 6}'],
            "line 2: t=0.5 is before the previous record's t=1.0",
        ),
        (['{"t": 0, "source": -1, "ts": 5}'], "line 1: source=-1 is outside"),
        (['{"t": 0, "source": 1, "ts": 18446744073709551615}'], "line 1: ts=18446744073709551615"),
        (
            ['{"t": 0, "source": 1}'],
            "line 1: a record needs exactly one of 'ts', 'watermark', 'end'",
        ),
        (['{"t": 0, "source": 1, "ts": 1, "end": true}'], "line 1: a record needs exactly one"),
        (['{"t": 0, "source": 1, "ts": 1, "barier": 1}'], "line 1: unknown field 'barier'"),
        (
            ['{"t": 0, "source": 1, "ts": 1, "payload": "%%%"}'],
            "line 1: payload is not valid base64",
        ),
        (['{"t": 0, "source": 1, "end": false}'], "line 1: end must be true"),
        (['{"t": "soon", "source": 1, "ts": 1}'], "line 1: t must be a finite number"),
        (['{"source": 1, "ts": 1}'], "line 1: missing field 't'"),
        (["[1, 2]"], "line 1: a record must be a JSON object"),
        (['{"t": 0, "source": 1, "ts": 1.5}'], "line 1: ts must be an integer"),
    ],
)
def test_bad_record_names_the_line(
    lines: list[str], message: str, tmp_path: Path, repo: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = _run(["replay", str(source), "--output", str(tmp_path / "out.jsonl")], cwd=repo)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--build-window", "-1", "--build-window: must be > 0"),
        ("--build-window", "abc", "--build-window: must be a number of seconds"),
        ("--startup-delay", "-0.5", "--startup-delay: must be >= 0"),
        ("--barrier-timeout", "0", "--barrier-timeout: must be > 0"),
        ("--source-timeout", "never", "--source-timeout: must be a number of seconds"),
        ("--late-policy", "keep", "--late-policy: must be 'emit' or 'drop'"),
        ("--sources", "1,x", "--sources: must be a comma-separated list of ids"),
        ("--sources", "1,1", "--sources: source ids must be unique"),
    ],
)
def test_bad_flag_names_the_flag(
    flag: str, value: str, message: str, tmp_path: Path, repo: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"t": 0, "source": 1, "ts": 5}\n')
    result = _run(
        ["replay", str(source), "--output", str(tmp_path / "out.jsonl"), flag, value], cwd=repo
    )
    assert result.returncode == 2
    assert message in result.stderr, result.stderr


def test_source_timeout_off_and_payloads(tmp_path: Path, repo: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"t": 0, "source": 1, "ts": 5, "payload": "aGVsbG8="}\n'
        '{"t": 0, "source": 2, "watermark": 10}\n'
    )
    out = tmp_path / "out.jsonl"
    result = _run(
        [
            "replay",
            str(source),
            "--output",
            str(out),
            "--source-timeout",
            "off",
            "--startup-delay",
            "0",
        ],
        cwd=repo,
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["ts"] for line in out.read_text().splitlines()] == [5]


def test_missing_input_file(tmp_path: Path, repo: Path) -> None:
    result = _run(
        ["replay", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o")], cwd=repo
    )
    assert result.returncode == 2
    assert "no such file" in result.stderr


def test_an_input_path_through_a_file_and_an_output_onto_a_directory(
    tmp_path: Path, repo: Path
) -> None:
    """What users type wrong: a path with a file where a directory should be (a glob that did
    not expand), an output that is a directory. Each ends in a message naming the path."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"t": 0, "source": 1, "ts": 5}\n')
    result = _run(["replay", str(source / "x.jsonl"), "--output", str(tmp_path / "o")], cwd=repo)
    assert result.returncode == 2, result.stderr
    assert f"{source / 'x.jsonl'}: Not a directory" in result.stderr
    assert "Traceback" not in result.stderr
    result = _run(["replay", str(source), "--output", str(tmp_path)], cwd=repo)
    assert result.returncode == 2, result.stderr
    assert f"--output: is a directory; give a file name (got '{tmp_path}')" in result.stderr
    assert "Traceback" not in result.stderr


def test_empty_input_gives_empty_output(tmp_path: Path, repo: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("")
    out, stats = tmp_path / "out.jsonl", tmp_path / "stats.json"
    result = _run(["replay", str(source), "--output", str(out), "--stats", str(stats)], cwd=repo)
    assert result.returncode == 0, result.stderr
    assert out.read_text() == ""
    assert json.loads(stats.read_text())["totals"]["received"] == 0
