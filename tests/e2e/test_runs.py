"""Runs one after another in one real ``evb serve``: ``evb end-run``, ``evb begin-run``, a second
run whose clocks restart at 0, without and with ``--reset-on-begin-run`` (docs/ordering.md, "Runs
one after another"); the run number and the run's first output offset survive a kill -9."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ServerProcess
from tests.e2e.test_cli import evb

DATA = 5  # ordinary fragments per source and run


def _run_file(path: Path, t0: float) -> Path:
    """Sources 1 and 2: a begin-run barrier at ts 0, DATA fragments, an end-run barrier; the
    clocks start at 0 in every run, as NSCLDAQ's readouts do."""
    records: list[dict[str, Any]] = []
    for source in (1, 2):
        records.append({"t": t0, "source": source, "ts": 0, "barrier": 1})
    for i in range(1, DATA + 1):
        for source in (1, 2):
            records.append({"t": t0 + i * 0.01, "source": source, "ts": 1000 * i + source})
    for source in (1, 2):
        records.append({"t": t0 + 1.0, "source": source, "ts": 1000 * (DATA + 1), "barrier": 2})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _json(*args: str) -> Any:
    done = evb(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _stats(target: str) -> dict[str, Any]:
    return _json("stats", "--target", target, "--json")  # type: ignore[no-any-return]


def _send(target: str, path: Path) -> None:
    sent = evb("send", "--target", target, "--replay", str(path), "--speed", "0")
    assert sent.returncode == 0, sent.stderr


@pytest.mark.parametrize("reset", [False, True], ids=["without-reset", "with-reset"])
def test_two_runs_in_one_server(
    reset: bool, tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    flags = ["--sources", "1,2", "--startup-delay", "0", "--build-window", "30", "--run", "7"]
    server = server_factory(tmp_path / "data", *flags, *(["--reset-on-begin-run"] if reset else []))
    target = server.target

    _send(target, _run_file(tmp_path / "run7.jsonl", 0.0))
    assert _json("end-run", "--target", target)["next_offset"] == 2 * (DATA + 2)
    first = _stats(target)
    assert (first["run"], first["run_start_offset"], first["run_ended"]) == (7, 0, True)
    assert first["totals"]["late"] == 0
    assert first["config"]["reset_on_begin_run"] is reset

    # a run begins only after the previous one ended, with a higher number
    begun = _json("begin-run", "--target", target)
    assert begun == {"run": 8, "start_offset": 2 * (DATA + 2)}
    again = evb("begin-run", "--target", target)
    assert again.returncode == 2 and "run 8 has not ended" in again.stderr, again.stderr
    stats = _stats(target)
    assert (stats["run"], stats["run_ended"]) == (8, False)

    _send(target, _run_file(tmp_path / "run8.jsonl", 10.0))
    assert _json("end-run", "--target", target)["next_offset"] == 4 * (DATA + 2)
    second = _stats(target)
    # the contract: without the reset every ordinary fragment of run 8 below run 7's high-water
    # mark (1000 * DATA + 2) is late, all but the last (equal to it); with the reset, the
    # complete begin-run barrier forgets that mark and nothing is late
    assert second["totals"]["late"] == (0 if reset else 2 * DATA - 1)
    assert second["barriers"]["complete"] == 4
    lower = evb("begin-run", "--target", target, "--run", "8")
    assert lower.returncode == 2 and "run: 8 is not above the current run 8" in lower.stderr

    # the run number and the run's first offset are in the arrival log: a kill -9 keeps them
    server.kill()
    server.start()
    recovered = _stats(target)
    assert (recovered["run"], recovered["run_start_offset"]) == (8, 2 * (DATA + 2))
    assert recovered["run_ended"] and recovered["totals"] == second["totals"]
