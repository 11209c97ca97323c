"""Event building (orderer/spark/glom.py) against the sequential oracle, without Spark: every
policy, small and large windows, full events, barriers, late fragments, the no-build mode, and
any cut of the stream at event starts (what micro-batches and partitions do)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from orderer.errors import ConfigError
from orderer.spark.glom import GlomConfig, build_events, event_starts, glom_batches
from tests.spark.oracle import events_of, fragments_of, glom, random_stream


def _built(table: pa.Table, config: GlomConfig, chunk: int) -> list:
    batches = table.to_batches(max_chunksize=chunk)
    return events_of(pa.Table.from_batches(list(glom_batches(batches, config))))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("policy", ["earliest", "latest", "average"])
def test_glom_equals_the_sequential_oracle(seed: int, policy: str) -> None:
    rng = np.random.default_rng(seed)
    table = random_stream(seed, int(rng.integers(1, 1500)))
    dt = int(rng.choice([0, 1, 15, 60, 400, 10_000]))
    max_fragments = int(rng.choice([1, 2, 3, 7, 1000]))
    config = GlomConfig(dt=dt, max_fragments=max_fragments, timestamp_policy=policy)
    expected = glom(fragments_of(table), dt, max_fragments, policy)
    for chunk in (3, 97, 100_000):  # the executors' record batches, carried across
        assert _built(table, config, chunk) == expected


def test_no_build_mode_makes_one_event_per_fragment() -> None:
    table = random_stream(3, 500)
    events = _built(table, GlomConfig(dt=None), 64)
    assert events == glom(fragments_of(table), None)
    assert len(events) == 500 and {e.multiplicity for e in events} == {1}


def test_any_cut_at_event_starts_builds_the_same_events() -> None:
    table = random_stream(7, 4000, late_share=0.2)
    config = GlomConfig(dt=80, max_fragments=6)
    ts = table.column("timestamp").to_numpy().view(np.uint64)
    starts = event_starts(ts, table.column("barrier").to_numpy(), dt=80, max_fragments=6)
    rng = np.random.default_rng(1)
    cuts = sorted(set(rng.choice(starts, size=40).tolist()) | {0, table.num_rows})
    pieces = []
    for a, b in itertools.pairwise(cuts):
        pieces.extend(events_of(pa.Table.from_batches(
            list(glom_batches(table.slice(a, b - a).to_batches(max_chunksize=33), config))
        )))
    assert pieces == glom(fragments_of(table), 80, 6)


def test_late_fragments_far_below_close_the_event() -> None:
    ts = np.array([100, 105, 20, 106, 300, 290, 301], dtype=np.uint64)
    starts = event_starts(ts, np.zeros(7, dtype=np.int64), dt=10)
    assert starts.tolist() == [0, 2, 3, 4]  # 20 is 80 below 100; 290 is within 10 of 300


def test_timestamps_near_the_top_of_the_range_do_not_wrap() -> None:
    top = 2**63 - 5
    ts = np.array([top - 3, top, top + 2], dtype=np.uint64)
    assert event_starts(ts, np.zeros(3), dt=2**62).tolist() == [0]
    table = pa.table({
        "offset": pa.array([0, 1, 2], pa.int64()), "source": pa.array([1, 2, 3], pa.int64()),
        "timestamp": pa.array(ts.view(np.int64)), "barrier": pa.array([0, 0, 0], pa.int64()),
        "late": pa.array([False] * 3), "payload": pa.array([b""] * 3, pa.binary()),
    })
    event = build_events(table, GlomConfig(dt=2**62, timestamp_policy="average"))
    assert event.column("timestamp").to_pylist() == [(3 * top - 1) // 3]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dt": "x"}, r"dt: must be an integer \(got 'x'\)"),
        ({"dt": "-1"}, r"dt: must be an integer number of ticks >= 0 \(got -1\)"),
        ({"dt": "5", "maxFragments": "0"}, r"max_fragments: must be an integer >= 1 \(got 0\)"),
        ({"dt": "5", "timestampPolicy": "median"}, "timestamp_policy: must be earliest"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GlomConfig.from_options(options)


@pytest.mark.parametrize(
    ("policy", "stamp"), [("earliest", 100), ("latest", 95), ("average", (100 + 110 + 95) // 3)]
)
def test_the_event_timestamp_is_the_first_or_last_fragments_in_stream_order(
    policy: str, stamp: int
) -> None:
    """As NSCLDAQ's glom (GLOM_TIMESTAMP_FIRST / _LAST): a late fragment at the end of an event
    is neither its earliest nor its latest timestamp, yet ``latest`` takes it, being last; and
    ``earliest`` keeps the first fragment's 100 though the late one is smaller."""
    table = pa.table({
        "offset": pa.array([0, 1, 2], pa.int64()), "source": pa.array([1, 2, 3], pa.int64()),
        "timestamp": pa.array([100, 110, 95], pa.int64()),
        "barrier": pa.array([0, 0, 0], pa.int64()),
        "late": pa.array([False, False, True]), "payload": pa.array([b""] * 3, pa.binary()),
    })
    event = build_events(table, GlomConfig(dt=20, timestamp_policy=policy))
    assert event.column("multiplicity").to_pylist() == [3]
    assert event.column("timestamp").to_pylist() == [stamp]
