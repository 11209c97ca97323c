"""Runs one after another: ``reset_on_begin_run`` (docs/ordering.md, "Runs one after another").

The core (through the API and through ``evb replay``'s reader) and the oracle agree on each case;
each case also pins what the contract says, so a reset that fires when it must not (or never)
fails here even if core and oracle were wrong together.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orderer import Orderer, OrdererConfig, SimulatedClock
from orderer.errors import ConfigError
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from tests.oracle import oracle_run

BASE = {"startup_delay": 0, "sources": [1, 2], "build_window": 20}


def _run(records: list[dict[str, Any]], **config: Any) -> tuple[list[tuple[Any, ...]], dict]:
    """Core (replay path) and oracle: the same emitted items and counters; returns them."""
    config = {**BASE, **config}
    want, want_counters = oracle_run(records, config)
    lines = [json.dumps(r) + "\n" for r in records]
    emitted, counters = replay(read_records(lines), OrdererConfig.from_mapping(config))
    got = [(r["source"], r["ts"], r["barrier"], r["late"]) for r in emitted.records()]
    assert got == [(r["source"], r["ts"], r["barrier"], r["late"]) for r in want]
    assert counters == want_counters
    return got, counters


def _two_runs(second_begin: dict[int, int]) -> list[dict[str, Any]]:
    """Run 1 up to ts 3000, ended by type-2 barriers; run 2 restarts at 0, each source opening
    it with the barrier type of ``second_begin`` (a source left out sends no barrier)."""
    records: list[dict[str, Any]] = [
        {"t": 0.0, "source": 1, "ts": 0, "barrier": 1},
        {"t": 0.0, "source": 2, "ts": 0, "barrier": 1},
        {"t": 1.0, "source": 1, "ts": 1000},
        {"t": 1.0, "source": 2, "ts": 1500},
        {"t": 2.0, "source": 1, "ts": 3000, "barrier": 2},
        {"t": 2.0, "source": 2, "ts": 3000, "barrier": 2},
    ]
    for source, kind in sorted(second_begin.items()):
        records.append({"t": 10.0, "source": source, "ts": 0, "barrier": kind})
    records += [
        {"t": 11.0, "source": 1, "ts": 100},
        {"t": 11.0, "source": 2, "ts": 200},
        {"t": 12.0, "source": 1, "ts": 300},
        {"t": 12.0, "source": 2, "ts": 400},
    ]
    return records


def _late(counters: dict[str, Any]) -> int:
    return int(counters["totals"]["late"])


def test_without_the_option_the_second_run_is_late() -> None:
    _, counters = _run(_two_runs({1: 1, 2: 1}))
    assert _late(counters) == 4


def test_complete_begin_run_barrier_resets_the_high_water_mark() -> None:
    got, counters = _run(_two_runs({1: 1, 2: 1}), reset_on_begin_run=True)
    assert _late(counters) == 0
    assert got[-4:] == [(1, 100, 0, False), (2, 200, 0, False), (1, 300, 0, False),
                        (2, 400, 0, False)]  # fmt: skip


def test_incomplete_begin_run_barrier_does_not_reset() -> None:
    # source 2 never sends its begin run: the barrier resolves incomplete (timeout or drain)
    _, counters = _run(_two_runs({1: 1}), reset_on_begin_run=True, barrier_timeout=0.5)
    assert counters["barriers"]["incomplete"] == 1
    assert _late(counters) > 0


def test_heterogeneous_complete_barrier_does_not_reset() -> None:
    _, counters = _run(_two_runs({1: 1, 2: 3}), reset_on_begin_run=True)
    assert counters["barriers"]["heterogeneous"] == 1
    assert _late(counters) == 4


def test_other_barrier_types_do_not_reset() -> None:
    _, counters = _run(_two_runs({1: 3, 2: 3}), reset_on_begin_run=True)
    assert _late(counters) == 4


def test_the_reset_forgets_previous_timestamps_and_watermarks() -> None:
    records = _two_runs({1: 1, 2: 1})
    records.insert(4, {"t": 1.5, "source": 2, "watermark": 2500})
    # right after the complete begin run: no high-water mark, source 2's watermark forgotten
    orderer = Orderer({**BASE, "reset_on_begin_run": True}, clock=SimulatedClock())
    lines = [json.dumps(r) + "\n" for r in records[:-4]]
    orderer.replay_records(read_records(lines))
    assert orderer.source_states()[2]["watermark"] is None
    assert orderer.high_water_mark is None
    # the previous timestamp is forgotten too: nothing after the begin run counts out of order
    _, counters = _run(records, reset_on_begin_run=True)
    assert counters["totals"]["out_of_order"] == 2  # the two begin-run barriers themselves


@pytest.mark.parametrize(
    ("mapping", "want"),
    [({"resetOnBeginRun": True}, True), ({"reset_on_begin_run": "false"}, False),
     ({"reset_on_begin_run": "True"}, True), ({}, False)],
)  # fmt: skip
def test_config_spellings(mapping: dict[str, Any], want: bool) -> None:
    config = OrdererConfig.from_mapping(mapping)
    assert config.reset_on_begin_run is want
    assert config.to_mapping(camel=True)["resetOnBeginRun"] is want


def test_bad_value_names_the_key() -> None:
    why = r"reset_on_begin_run: must be true or false \(got 'yes'\)"
    with pytest.raises(ConfigError, match=why):
        OrdererConfig.from_mapping({"reset_on_begin_run": "yes"})
    with pytest.raises(ConfigError, match="reset_on_begin_run"):
        OrdererConfig(reset_on_begin_run="false")  # type: ignore[arg-type]
