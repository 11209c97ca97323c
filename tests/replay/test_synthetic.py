"""Tests of :mod:`orderer.replay.synthetic`: the generated runs are deterministic, well formed,
replayable and have the features their spec asks for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from orderer import ConfigError, Orderer, OrdererConfig, SimulatedClock
from orderer.batch import EmittedBatch
from orderer.formats.json_lines import END, FRAGMENT, read_records
from orderer.replay.simulate import replay
from orderer.replay.synthetic import (
    BEGIN_RUN,
    END_RUN,
    SYNC,
    SYNC_OTHER,
    Stall,
    SyntheticRun,
    generate_records,
    iter_batches,
    write_jsonl,
)

SPEC = SyntheticRun(
    n_sources=4,
    fragments_per_source=2_000,
    rate=500.0,
    jitter=0.02,
    batch_size=8,
    stalls=(Stall(source=2, start=0.5, end=1.0), Stall(source=3, start=2.0, end=2.6, backlog=True)),
    sync_barriers=2,
    heterogeneous_barrier=True,
    incomplete_barrier=4,
    payload_size=5,
    seed=7,
)
CONFIG = OrdererConfig(build_window=0.2, startup_delay=0.5, sources=SPEC.source_ids)


def _columns(records: object) -> list[np.ndarray]:
    return [getattr(records, f.name) for f in dataclasses.fields(records)]  # type: ignore[arg-type]


def test_same_seed_same_run_other_seed_other_run() -> None:
    a, b = generate_records(SPEC), generate_records(SPEC)
    for x, y in zip(_columns(a), _columns(b), strict=True):
        np.testing.assert_array_equal(x, y)
    c = generate_records(dataclasses.replace(SPEC, seed=8))
    assert not np.array_equal(a.value, c.value)


def test_records_sorted_by_arrival_and_each_source_in_timestamp_order() -> None:
    records = generate_records(SPEC)
    assert np.all(np.diff(records.t) >= 0)
    for source in SPEC.source_ids:
        mine = (records.source == source) & (records.kind == FRAGMENT)
        assert np.all(np.diff(records.value[mine].astype(np.int64)) >= 0)
        ends = np.flatnonzero((records.source == source) & (records.kind == END))
        assert ends.tolist() == [np.flatnonzero(records.source == source)[-1]]


def test_barriers_heterogeneous_and_incomplete() -> None:
    records = generate_records(SPEC)
    for source in SPEC.source_ids:
        mine = (records.source == source) & (records.kind == FRAGMENT)
        types = records.barrier[mine][records.barrier[mine] != 0].tolist()
        first_sync = SYNC_OTHER if source == 1 else SYNC
        expected = [BEGIN_RUN, first_sync, SYNC, END_RUN]
        if source == 4:
            expected.pop()  # lost its end-run barrier
        assert types == expected, source
        assert records.barrier[mine][0] == BEGIN_RUN
        assert records.value[mine][0] == SPEC.timestamp_origin


def test_stall_leaves_a_gap_and_backlog_arrives_late() -> None:
    records = generate_records(SPEC)
    tick = SPEC.tick_rate
    ts2 = records.value[(records.source == 2) & (records.kind == FRAGMENT)]
    produced = (ts2 - SPEC.timestamp_origin) / tick
    assert not np.any((produced >= 0.5) & (produced < 1.0))
    mine = (records.source == 3) & (records.kind == FRAGMENT)
    produced = (records.value[mine] - SPEC.timestamp_origin) / tick
    held = (produced >= 2.0) & (produced < 2.4)
    assert held.sum() > 100
    assert np.all(records.t[mine][held] >= 2.6)


def test_a_hung_source_loses_the_barriers_of_its_gap() -> None:
    spec = dataclasses.replace(SPEC, stalls=(Stall(source=2, start=1.0, end=1.5),))
    records = generate_records(spec)
    mine = (records.source == 2) & (records.kind == FRAGMENT)
    assert records.barrier[mine][records.barrier[mine] != 0].tolist() == [BEGIN_RUN, SYNC, END_RUN]
    _, counters = replay(records, CONFIG)
    assert counters["missing"] == {"2": 1, "4": 1}


def test_payload_is_the_timestamp_pattern() -> None:
    records = generate_records(SPEC)
    fragments = np.flatnonzero(records.kind == FRAGMENT)
    offsets = records.payload_offsets
    for i in fragments[:50].tolist() + fragments[-50:].tolist():
        payload = records.payload[int(offsets[i]) : int(offsets[i + 1])].tobytes()
        assert payload == int(records.value[i]).to_bytes(8, "little")[:5]
    assert np.all(offsets[np.flatnonzero(records.kind == END) + 1]
                  == offsets[np.flatnonzero(records.kind == END)])


def test_replay_conserves_fragments_and_sees_the_features() -> None:
    records = generate_records(SPEC)
    emitted, counters = replay(records, CONFIG)
    n_fragments = int(np.count_nonzero(records.kind == FRAGMENT))
    totals = counters["totals"]
    assert totals["received"] == n_fragments
    assert totals["emitted"] + totals["dropped"] == n_fragments == len(emitted)
    assert counters["sources"]["3"]["late"] > 0  # the backlog
    assert counters["barriers"] == {
        "complete": 3, "incomplete": 1, "homogeneous": 3, "heterogeneous": 1,
    }
    assert counters["missing"] == {"4": 1}
    # the emitted multiset is the input multiset
    sent = np.sort(records.value[records.kind == FRAGMENT])
    np.testing.assert_array_equal(np.sort(emitted.timestamp), sent)


def test_write_jsonl_round_trips_through_read_records(tmp_path: Path) -> None:
    records = generate_records(dataclasses.replace(SPEC, fragments_per_source=300))
    path = tmp_path / "run.jsonl"
    write_jsonl(records, path)
    back = read_records(path.read_text(encoding="utf-8").splitlines())
    for x, y in zip(_columns(records), _columns(back), strict=True):
        np.testing.assert_array_equal(x, y)
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"t", "source", "ts", "barrier", "payload"}


def test_iter_batches_is_the_same_run_as_the_records() -> None:
    spec = dataclasses.replace(SPEC, end_of_source=False)
    records = generate_records(spec)
    batches = list(iter_batches(spec))
    times = [t for t, _ in batches]
    assert times == sorted(times)
    for _, batch in batches:
        assert len(set(batch.source.tolist())) == 1
        assert 1 <= len(batch) <= spec.batch_size
    np.testing.assert_array_equal(np.concatenate([b.timestamp for _, b in batches]), records.value)
    np.testing.assert_array_equal(np.concatenate([b.barrier for _, b in batches]), records.barrier)
    arrival = np.concatenate([np.full(len(b), t) for t, b in batches])
    np.testing.assert_array_equal(arrival, records.t)
    # fed live, the orderer emits what the replay emits
    orderer = Orderer(CONFIG, clock=SimulatedClock())
    for t, batch in batches:
        orderer.submit(batch, now=t)
    orderer.end_run(now=times[-1])
    live = orderer.take_emitted()
    replayed, _ = replay(records, CONFIG)
    for name in ("t", "source", "timestamp", "barrier", "late", "payload_offsets", "payload"):
        np.testing.assert_array_equal(getattr(live, name), getattr(replayed, name), name)
    assert isinstance(live, EmittedBatch)


def test_ordering_no_late_without_trouble() -> None:
    spec = SyntheticRun(n_sources=8, fragments_per_source=5_000, rate=2_000.0, batch_size=50,
                        jitter=0.01, seed=3)
    emitted, counters = replay(generate_records(spec), OrdererConfig(sources=spec.source_ids))
    assert counters["totals"]["late"] == 0
    assert np.all(np.diff(emitted.timestamp.astype(np.int64)) >= 0)


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"n_sources": 0}, "n_sources"),
        ({"rate": 0.0}, "rate"),
        ({"batch_size": 0}, "batch_size"),
        ({"jitter": -1.0}, "jitter"),
        ({"stalls": (Stall(source=99, start=0.0, end=1.0),)}, "stalls"),
        ({"stalls": (Stall(source=1, start=2.0, end=1.0),)}, "stalls"),
        ({"incomplete_barrier": 99}, "incomplete_barrier"),
    ],
)
def test_bad_spec_names_the_parameter(change: dict[str, object], parameter: str) -> None:
    with pytest.raises(ConfigError) as error:
        dataclasses.replace(SPEC, **change)  # type: ignore[arg-type]
    assert error.value.parameter == parameter
