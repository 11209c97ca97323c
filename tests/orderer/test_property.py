"""Property tests: the Cython core, through the :class:`Orderer` API, equals the test oracle.

Hypothesis generates small multi-source runs (stalls, backlogs, disorder, duplicates, barriers of
several types, watermarks, ends, declared sources, both late policies, various windows and
timeouts, ``source_timeout: off``, sources marked dead and revived). The core gets the fragments
either one per ``submit`` or in random batches of equal arrival time (mixed sources), plus
watermark, end, mark and revive calls and live-timer ``advance`` calls between arrivals; the
oracle (``tests/oracle.py``) gets the same records one by one, as ``evb replay`` semantics define
them. Emitted sequences (source, ts, barrier, late, t) and every counter must be equal, and
fragments are conserved. The ``evb replay`` path (``read_records`` + ``replay``) is checked
against the oracle too.

``EVB_SOAK=1`` (``make soak``) runs many more, non-derandomized scenarios.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from orderer import FragmentBatch, Orderer, OrdererConfig, SimulatedClock
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from tests.oracle import oracle_run

MAX_ID = 2**32 - 1
MAX_TS = 2**64 - 2  # 2**64 - 1 is reserved
TIME_TOLERANCE = 1e-9

SOAK = bool(os.environ.get("EVB_SOAK"))


def _settings(examples: int, *, shrink: bool = True) -> settings:
    return settings(
        max_examples=examples * 20 if SOAK else examples,
        deadline=None,
        derandomize=not SOAK,
        database=None,
        phases=tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Core bug (reported to the lead): a run of same-source fragments inside one batch (and in the
# bulk replay) is taken in with one flush instead of a flush after every record. The flush after
# an earlier record can empty another queue or resolve a barrier, making that source's frontier
# *none*, so the later records must wait; the core pops them at once. Minimal repros:
#   {build_window: 20, startup_delay: 0, sources: [1, 2]}: t=0 s2 ts 10; then ONE batch at t=1 of
#   s1 ts 10, s1 ts 10 -> core (1,10),(1,10),(2,10) at 1.0; spec (1,10),(2,10) at 1.0, then (1,10)
#   waits (end of run).
#   {build_window: 20, startup_delay: 0, barrier_timeout: 0.5, sources: [1, 2]}: t=0 s2 ts 5,
#   t=0 s2 ts 10 barrier 1; ONE batch at t=1 of s1 ts 20, s1 ts 30 -> core emits (1,30) before
#   the barrier; spec: (2,5),(1,20),(2,10,b1) at 1.0 and (1,30) waits.
# These were core bugs (a same-source run in a batch got one flush); they stay as examples.


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    config: dict[str, Any]
    records: list[dict[str, Any]]
    batch_breaks: list[bool] = field(default_factory=list)  # start a new batch at record i
    advances: dict[int, float] = field(default_factory=dict)  # before record i: advance(now)
    end: str = "last"  # "last": end_run at the last t; "later": after it; "none": no end of run
    end_delay: float = 0.0


SOURCE_IDS = [1, 2, 3, 0, 7, MAX_ID]
DELTAS = [0.0, 0.0, 0.0, 0.1, 0.25, 0.5, 1.0, 0.3, 2.0, 3.7, 9.0, 25.0]
KINDS = ["ts"] * 16 + ["watermark", "watermark", "end", "end", "dead", "revive"]
JITTERS = [0, 0, 0, 1, 2, -1, -3, -10, -30, 0]
BARRIERS = [0] * 7 + [1, 1, 3, 7]
ADVANCE_FRACTIONS = [None, None, None, 0.5, 0.01, 0.99]


def _pick(code: int, choices: list[Any]) -> tuple[Any, int]:
    """Decode one choice from an integer (one hypothesis draw per record keeps it fast)."""
    code, index = divmod(code, len(choices))
    return choices[index], code


@st.composite
def configs(draw: st.DrawFn, ids: list[int]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "build_window": draw(st.sampled_from([1.0, 0.5, 2.0, 3.5, 0.1, 7.0])),
        "startup_delay": draw(st.sampled_from([0, 0.3, 1.0, 2.5, 0.1])),
        "source_timeout": draw(st.sampled_from([60, "off", 1.0, 2.5, 5.0, 0.2])),
        "late_policy": draw(st.sampled_from(["emit", "drop"])),
    }
    barrier_timeout = draw(st.sampled_from([None, 0.7, 2.0, 6.0, 0.1]))
    if barrier_timeout is not None:
        config["barrier_timeout"] = barrier_timeout
    declared = draw(st.lists(st.sampled_from([*ids, 42]), unique=True, max_size=3))
    if declared:
        config["sources"] = declared
    if draw(st.booleans()):  # complete begin-run barriers (type 1) restart the clocks
        config["reset_on_begin_run"] = True
    return config


@st.composite
def scenarios(draw: st.DrawFn, max_records: int = 30, min_records: int = 0) -> Scenario:
    """A random run: records with arrival times, batch boundaries and live-timer calls."""
    ids = draw(st.lists(st.sampled_from(SOURCE_IDS), min_size=1, max_size=4, unique=True))
    config = draw(configs(ids))
    # timestamps follow arrival time (x scale) with per-source skew, jitter and stalls;
    # scale 0 gives many equal timestamps across sources
    scale = draw(st.sampled_from([10, 2, 0]))
    skew = {i: draw(st.sampled_from([0, 0, 5, -5, 20, -20])) for i in ids}
    # some sources' timestamps near the top of uint64 (all of them, or only some)
    big = {i: draw(st.sampled_from([False, False, False, True])) for i in ids}
    t = draw(st.sampled_from([0.0, 3.0, 0.1]))
    codes = draw(st.lists(st.integers(0, 2**40 - 1), min_size=min_records, max_size=max_records))
    records: list[dict[str, Any]] = []
    breaks: list[bool] = []
    advances: dict[int, float] = {}
    for i, code in enumerate(codes):
        dt, code = _pick(code, DELTAS)
        fraction, code = _pick(code, ADVANCE_FRACTIONS)
        source, code = _pick(code, ids)
        kind, code = _pick(code, KINDS)
        jitter, code = _pick(code, JITTERS)
        barrier, code = _pick(code, BARRIERS)
        new_batch, code = _pick(code, [False, True])
        repeat, code = _pick(code, [None] * 5 + ["same source", "same fragment"])
        if repeat is not None and records:
            # bursts: the previous record's source again at the same time (same ts or not)
            dt, source = 0.0, records[-1]["source"]
            if repeat == "same fragment" and "ts" in records[-1]:
                records.append(dict(records[-1]))
                breaks.append(new_batch)
                continue
        if dt > 0 and records and fraction is not None:
            advances[i] = t + dt * fraction
        t += dt
        value = max(0, round(t * scale) + skew[source] + jitter)
        if big[source]:
            value = MAX_TS - 1000 + min(value, 1000)
        if kind == "ts":
            records.append({"t": t, "source": source, "ts": value, "barrier": barrier})
        elif kind == "watermark":
            records.append({"t": t, "source": source, "watermark": value})
        elif kind == "end":
            records.append({"t": t, "source": source, "end": True})
        else:  # an operator marks the source dead or revives it
            records.append({"t": t, "source": source, "dead": kind == "dead"})
        breaks.append(new_batch)
    end = draw(st.sampled_from(["last", "last", "later", "none"]))
    end_delay = draw(st.sampled_from([0.5, 30.0, 100.0])) if end == "later" else 0.0
    return Scenario(config, records, breaks, advances, end, end_delay)


# --------------------------------------------------------------------------- running


def run_core(scenario: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any], Orderer]:
    """Feed the scenario to the real Orderer: equal-time fragments in batches, live timer calls."""
    orderer = Orderer(scenario.config, clock=SimulatedClock())
    batch: list[dict[str, Any]] = []

    def submit() -> None:
        if batch:
            orderer.submit(
                FragmentBatch.from_arrays(
                    source=np.array([r["source"] for r in batch], dtype=np.uint32),
                    timestamp=np.array([r["ts"] for r in batch], dtype=np.uint64),
                    barrier=np.array([r.get("barrier", 0) for r in batch], dtype=np.uint32),
                ),
                now=batch[0]["t"],
            )
            batch.clear()

    for i, record in enumerate(scenario.records):
        if batch and (scenario.batch_breaks[i] or batch[0]["t"] != record["t"]):
            submit()
        if i in scenario.advances:
            submit()
            orderer.advance(scenario.advances[i])
        if "ts" in record:
            batch.append(record)
            continue
        submit()
        if "watermark" in record:
            orderer.watermark(record["source"], record["watermark"], now=record["t"])
        elif "dead" in record:
            orderer.set_source_state(record["source"], record["dead"], now=record["t"])
        else:
            orderer.end_source(record["source"], now=record["t"])
    submit()
    if scenario.records and scenario.end != "none":
        orderer.end_run(now=scenario.records[-1]["t"] + scenario.end_delay)
    emitted = orderer.take_emitted()
    items = list(emitted.records())
    assert [item.pop("seq") for item in items] == list(range(len(items)))
    return items, orderer.counters(), orderer


def run_oracle(scenario: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    end_time = None
    if scenario.records and scenario.end == "later":
        end_time = scenario.records[-1]["t"] + scenario.end_delay
    return oracle_run(
        scenario.records, scenario.config, end_run=scenario.end != "none", end_time=end_time
    )


def assert_same_emitted(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    def key(item: dict[str, Any]) -> tuple[Any, ...]:
        return (item["source"], item["ts"], item["barrier"], item["late"])

    assert [key(item) for item in got] == [key(item) for item in want]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert abs(g["t"] - w["t"]) <= TIME_TOLERANCE, f"item {i}: t {g['t']} != {w['t']}"


def assert_conservation(counters: dict[str, Any], queued: int) -> None:
    totals = counters["totals"]
    assert totals["received"] == totals["emitted"] + totals["dropped"] + queued
    for per in counters["sources"].values():
        assert per["dropped"] <= per["late"]
        assert per["barriers"] <= per["emitted"]


def check(scenario: Scenario) -> None:
    got, got_counters, orderer = run_core(scenario)
    want, want_counters = run_oracle(scenario)
    assert_same_emitted(got, want)
    assert got_counters == want_counters
    assert_conservation(got_counters, orderer.queued)
    if scenario.end != "none":
        assert orderer.queued == 0


# --------------------------------------------------------------------------- tests

# The minimal repros of BATCH_RUN_BUG, run first (and so always) by the batched tests.
REPRO_EQUAL_TIMESTAMPS = Scenario(
    {"build_window": 20, "startup_delay": 0, "sources": [1, 2]},
    [
        {"t": 0.0, "source": 2, "ts": 10, "barrier": 0},
        {"t": 1.0, "source": 1, "ts": 10, "barrier": 0},
        {"t": 1.0, "source": 1, "ts": 10, "barrier": 0},
    ],
    [False, False, False],
)
REPRO_BARRIER_RESOLVED = Scenario(
    {"build_window": 20, "startup_delay": 0, "barrier_timeout": 0.5, "sources": [1, 2]},
    [
        {"t": 0.0, "source": 2, "ts": 5, "barrier": 0},
        {"t": 0.0, "source": 2, "ts": 10, "barrier": 1},
        {"t": 1.0, "source": 1, "ts": 20, "barrier": 0},
        {"t": 1.0, "source": 1, "ts": 30, "barrier": 0},
    ],
    [False, True, True, False],
)


def _one_record_per_submit(scenario: Scenario) -> Scenario:
    scenario.batch_breaks = [True] * len(scenario.records)
    return scenario


@_settings(1500)
@given(scenarios(min_records=10))
def test_core_equals_oracle(scenario: Scenario) -> None:
    """One fragment per submit, with watermark, end and live-timer calls in between."""
    check(_one_record_per_submit(scenario))


@_settings(1500)
@given(scenarios(max_records=12))
def test_core_equals_oracle_short_runs(scenario: Scenario) -> None:
    """Short runs reach the corner cases (startup, first barriers, ends) more often."""
    check(_one_record_per_submit(scenario))


def _no_same_source_runs(scenario: Scenario) -> Scenario:
    """Batches of mixed sources in which no two neighbours come from the same source."""
    for i in range(1, len(scenario.records)):
        if scenario.records[i]["source"] == scenario.records[i - 1]["source"]:
            scenario.batch_breaks[i] = True
    return scenario


@_settings(1000)
@given(scenarios(min_records=10))
def test_core_equals_oracle_mixed_batches(scenario: Scenario) -> None:
    """Batches of equal arrival time whose neighbours are of different sources."""
    check(_no_same_source_runs(scenario))


@_settings(1500)
@given(scenarios())
@example(REPRO_EQUAL_TIMESTAMPS)
@example(REPRO_BARRIER_RESOLVED)
def test_core_equals_oracle_batched(scenario: Scenario) -> None:
    """Fragments of equal arrival time submitted in random batches, mixed sources: a batch is a
    sequence of records, each followed by a flush."""
    check(scenario)


def _jsonl(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(record) + "\n" for record in records]


def check_replay(scenario: Scenario) -> None:
    emitted, counters = replay(
        read_records(_jsonl(scenario.records)), OrdererConfig.from_mapping(scenario.config)
    )
    items = list(emitted.records())
    assert [item.pop("seq") for item in items] == list(range(len(items)))
    want, want_counters = oracle_run(scenario.records, scenario.config)
    assert_same_emitted(items, want)
    assert counters == want_counters
    assert_conservation(counters, 0)


@_settings(500)
@given(scenarios())
def test_replay_equals_oracle_distinct_times(scenario: Scenario) -> None:
    """``evb replay``'s path (JSON Lines, bulk replay, end of run) with every t distinct."""
    for i, record in enumerate(scenario.records):
        record["t"] += i / 1024
    check_replay(scenario)


@_settings(500)
@given(scenarios())
@example(REPRO_EQUAL_TIMESTAMPS)
@example(REPRO_BARRIER_RESOLVED)
def test_replay_equals_oracle(scenario: Scenario) -> None:
    """``evb replay``'s path: records parsed from JSON Lines, bulk replay, end of run."""
    check_replay(scenario)


def _long_scenario(seed: int) -> Scenario:
    """A longer run with real backlogs: sources that stall for a while and come back."""
    rng = random.Random(seed)
    ids = rng.sample(SOURCE_IDS, rng.randint(2, 4))
    config: dict[str, Any] = {
        "build_window": rng.choice([0.5, 1.0, 3.0]),
        "startup_delay": rng.choice([0, 1.0]),
        "source_timeout": rng.choice(["off", 2.0, 10.0]),
        "late_policy": rng.choice(["emit", "drop"]),
    }
    if rng.random() < 0.5:
        config["barrier_timeout"] = rng.choice([0.5, 4.0])
    if rng.random() < 0.3:
        config["sources"] = [ids[0], 42]
    t = 0.0
    stalled_until = dict.fromkeys(ids, 0.0)
    records: list[dict[str, Any]] = []
    for _ in range(rng.randint(300, 600)):
        t += rng.choice([0.0, 0.0, 0.05, 0.1, 0.3])
        source = rng.choice(ids)
        if stalled_until[source] > t:
            continue
        if rng.random() < 0.01:
            stalled_until[source] = t + rng.choice([2.0, 5.0, 15.0])
        ts = max(0, round(t * 100) + rng.choice([0, 0, 0, 1, -1, -5, -50]))
        roll = rng.random()
        if roll < 0.02:
            records.append({"t": t, "source": source, "end": True})
        elif roll < 0.03:
            records.append({"t": t, "source": source, "dead": rng.random() < 0.6})
        elif roll < 0.07:
            watermark = max(0, ts + rng.choice([0, 10, -10]))
            records.append({"t": t, "source": source, "watermark": watermark})
        else:
            barrier = rng.choice([1, 2, 3]) if rng.random() < 0.03 else 0
            records.append({"t": t, "source": source, "ts": ts, "barrier": barrier})
    breaks = [rng.random() < 0.3 for _ in records]
    advances = {
        i: records[i - 1]["t"] + (records[i]["t"] - records[i - 1]["t"]) / 2
        for i in range(1, len(records))
        if records[i]["t"] > records[i - 1]["t"] and rng.random() < 0.1
    }
    return Scenario(config, records, breaks, advances, rng.choice(["last", "none"]))


LONG_SEEDS = range(1000 if SOAK else 40)


def test_core_equals_oracle_long_runs() -> None:
    for seed in LONG_SEEDS:
        check(_one_record_per_submit(_long_scenario(seed)))


def test_core_equals_oracle_long_runs_batched() -> None:
    for seed in LONG_SEEDS:
        check(_long_scenario(seed))
