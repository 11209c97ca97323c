"""Hypothesis fuzzer over the replay reader (``orderer/formats/json_lines.py``): arbitrary lines,
lines that are JSON of the wrong shape, and good runs with one line damaged. ``read_records``
either returns records (which then replay without error) or raises ``RecordError`` whose message
is ``line N: ...`` with N a line of the input: never another exception, never a hang (each input
has :data:`SECONDS`).

``EVB_SOAK=1`` (``make soak``) runs twenty times as many inputs, not derandomized.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orderer import OrdererConfig
from orderer.errors import RecordError
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from tests.soak import fuzz_settings

SECONDS = 5
CONFIG = OrdererConfig(build_window=1.0, startup_delay=0.0)
TRIED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    print(f"\nReplay reader fuzzers, inputs tried: {TRIED}")


def _fire(*_: Any) -> None:
    raise TimeoutError(f"one input took more than {SECONDS} s")


def _check(lines: list[str], name: str) -> None:
    """Records and a replay of them, or ``line N:`` naming a line that exists."""
    TRIED[name] = TRIED.get(name, 0) + 1
    signal.signal(signal.SIGALRM, _fire)
    signal.alarm(SECONDS)
    try:
        records = read_records(lines)
    except RecordError as error:
        match = re.match(r"line (\d+): \S", str(error))
        assert match, str(error)
        assert 1 <= int(match.group(1)) <= len(lines), str(error)
        assert lines[int(match.group(1)) - 1].strip(), "the error names a blank line"
        return
    else:
        emitted, counters = replay(records, CONFIG)
        assert counters["totals"]["received"] == len(emitted) + counters["totals"]["dropped"]
    finally:
        signal.alarm(0)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**64 - 2, 2**64 - 1, 2**64, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_keys = st.sampled_from(
    ["t", "source", "ts", "barrier", "payload", "watermark", "end", "dead", "barier"]
)
_records = st.dictionaries(_keys, _scalars | st.lists(_scalars, max_size=2), max_size=6)


@fuzz_settings(800)
@given(lines=st.lists(st.text(max_size=40), max_size=6))
def test_arbitrary_lines(lines: list[str]) -> None:
    _check(lines, "text")


@fuzz_settings(1200)
@given(records=st.lists(_records, max_size=8), raw=st.lists(_scalars, max_size=2))
def test_json_of_the_wrong_shape(records: list[dict[str, Any]], raw: list[Any]) -> None:
    lines = [json.dumps(r) for r in records] + [json.dumps(v) for v in raw]
    _check(lines, "json")


@st.composite
def _damaged_runs(draw: st.DrawFn) -> list[str]:
    """A good run (fragments, watermarks, ends, ascending t), then one line damaged."""
    lines, t = [], 0.0
    for _ in range(draw(st.integers(1, 10))):
        t += draw(st.sampled_from([0.0, 0.1, 1.0]))
        source = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["fragment", "watermark", "end"]))
        body: dict[str, Any] = {"t": t, "source": source}
        if kind == "fragment":
            body["ts"] = draw(st.integers(0, 2**64 - 2))
        elif kind == "watermark":
            body["watermark"] = draw(st.integers(0, 2**64 - 1))
        else:
            body["end"] = True
        lines.append(json.dumps(body))
    at = draw(st.integers(0, len(lines) - 1))
    damage = draw(st.sampled_from(["cut", "key", "value", "swap", "none"]))
    if damage == "cut":
        lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
    elif damage == "key":
        record = json.loads(lines[at])
        record[draw(_keys)] = draw(_scalars)
        lines[at] = json.dumps(record)
    elif damage == "value":
        record = json.loads(lines[at])
        record[draw(st.sampled_from(sorted(record)))] = draw(_scalars)
        lines[at] = json.dumps(record)
    elif damage == "swap" and len(lines) > 1:
        lines[0], lines[-1] = lines[-1], lines[0]
    return lines


@fuzz_settings(1000)
@given(lines=_damaged_runs())
def test_good_runs_with_one_damaged_line(lines: list[str]) -> None:
    _check(lines, "damaged")


def test_the_checks_can_tell_good_from_bad() -> None:
    good = [
        json.dumps({"t": 0, "source": 1, "ts": 5}),
        json.dumps({"t": 1, "source": 1, "end": True}),
    ]
    _check(good, "fixed")
    with pytest.raises(RecordError, match=r"^line 2: "):
        read_records([good[0], '{"t": 1, "source": 1, "barier": 2, "ts": 1}'])
