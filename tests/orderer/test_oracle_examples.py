"""The test oracle (``tests/oracle.py``) agrees with every worked example of docs/ordering.md.

This validates the oracle itself, so that the property tests can trust it. The agreement criterion
is the examples README's: emitted items equal in order on source, ts, barrier and late, every t
within 1e-6, and equal ``totals`` and ``barriers`` counters. The oracle also matches ``missing``
and the per-source counters, which the examples give in full.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import example_dirs
from tests.oracle import oracle_run

EXPECTED_EXAMPLES = {
    "stalled-source",
    "barrier-complete",
    "barrier-heterogeneous",
    "barrier-incomplete-timeout",
    "dead-source-barrier",
    "watermark-release",
    "end-and-drop",
    "declared-silent-source",
    "marked-dead-barrier",
}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_all_examples_present() -> None:
    assert {p.name for p in example_dirs()} >= EXPECTED_EXAMPLES


@pytest.mark.parametrize("example", example_dirs(), ids=lambda p: p.name)
def test_oracle_agrees_with_example(example: Path) -> None:
    config = json.loads((example / "config.json").read_text(encoding="utf-8"))
    records = _read_jsonl(example / "input.jsonl")
    expected = _read_jsonl(example / "expected.jsonl")
    expected_stats = json.loads((example / "expected-stats.json").read_text(encoding="utf-8"))

    emitted, counters = oracle_run(records, config)

    def key(item: dict[str, Any]) -> tuple[Any, ...]:
        return (item["source"], item["ts"], item["barrier"], item["late"])

    assert [key(e) for e in emitted] == [key(e) for e in expected]
    for got, want in zip(emitted, expected, strict=True):
        assert got["t"] == pytest.approx(want["t"], abs=1e-6), (got, want)
    assert counters["totals"] == expected_stats["totals"]
    assert counters["barriers"] == expected_stats["barriers"]
    assert counters["missing"] == expected_stats["missing"]
    assert counters["sources"] == expected_stats["sources"]
