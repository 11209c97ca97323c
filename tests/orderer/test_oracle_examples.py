"""The test oracle (``tests/oracle.py``) agrees with every worked example of ORDERING.md.

This validates the oracle itself, so that the property tests can trust it. The agreement criterion
is the examples README's: emitted items equal in order on source, ts, barrier and late, every t
within 1e-6, and equal ``totals`` and ``barriers`` counters (we also check ``missing`` and the
per-source counters, which the examples give in full).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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
}


def _examples_dir() -> Path:
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "spec" / "examples", here.parents[3] / "shared" / "spec" / "examples"]
    if "EVB_SPEC_EXAMPLES" in os.environ:
        candidates.insert(0, Path(os.environ["EVB_SPEC_EXAMPLES"]))
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    pytest.skip(f"ORDERING.md examples not found (looked in {[str(c) for c in candidates]})")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_all_examples_present() -> None:
    names = {p.name for p in _examples_dir().iterdir() if p.is_dir()}
    assert names >= EXPECTED_EXAMPLES


@pytest.mark.parametrize("name", sorted(EXPECTED_EXAMPLES))
def test_oracle_agrees_with_example(name: str) -> None:
    folder = _examples_dir() / name
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    records = _read_jsonl(folder / "input.jsonl")
    expected = _read_jsonl(folder / "expected.jsonl")
    expected_stats = json.loads((folder / "expected-stats.json").read_text(encoding="utf-8"))

    emitted, counters = oracle_run(records, config)

    def key(item: dict) -> tuple:
        return (item["source"], item["ts"], item["barrier"], item["late"])

    assert [key(e) for e in emitted] == [key(e) for e in expected]
    for got, want in zip(emitted, expected, strict=True):
        assert got["t"] == pytest.approx(want["t"], abs=1e-6), (got, want)
    assert counters["totals"] == expected_stats["totals"]
    assert counters["barriers"] == expected_stats["barriers"]
    assert counters["missing"] == expected_stats["missing"]
    assert counters["sources"] == expected_stats["sources"]
