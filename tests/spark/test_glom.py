"""Event building (orderer/building/glom.py) against the sequential oracle, without Spark: every
policy, small and large windows, full events, barriers, late fragments, the no-build mode, and
any cut of the stream at event starts (what micro-batches and partitions do)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orderer.building.config import GlomConfig
from orderer.building.glom import build_events, event_starts, glom_batches
from orderer.errors import ConfigError
from orderer.spark.source.glom import glom_from_options
from tests.soak import fuzz_settings
from tests.spark.oracle import events_of, fragments_of, glom, glom_main, random_stream


def _built(table: pa.Table, config: GlomConfig, chunk: int) -> list:
    batches = table.to_batches(max_chunksize=chunk)
    return events_of(pa.Table.from_batches(list(glom_batches(batches, config))))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("policy", ["earliest", "latest", "average"])
def test_glom_equals_the_sequential_oracle(seed: int, policy: str) -> None:
    rng = np.random.default_rng(seed)
    table = random_stream(seed, int(rng.integers(1, 1500)))
    dt = int(rng.choice([0, 1, 15, 60, 400, 10_000]))
    max_fragments = int(rng.choice([0, 1, 2, 3, 7, 1000]))
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


# --- --maxfragments as glom has it: NSCLDAQ 12.0-maint, main/daq/evbtools/glom/glomMain.cpp ---
@pytest.mark.parametrize(
    ("max_fragments", "sizes"),
    [
        (0, [1] * 10),
        (1, [2, 2, 2, 2, 2]),
        (2, [3, 3, 3, 1]),
        (3, [4, 4, 2]),
        (None, [10]),  # the default, glom's: 1000
    ],
)
def test_max_fragments_n_makes_events_of_up_to_n_plus_1_as_glom(
    max_fragments: int | None, sizes: list[int]
) -> None:
    """glomMain.cpp, ``accumulateEvent``: ``if (nobuild || (!firstEvent && ((tsdiff) > dt)) ||
    (fragmentCount > maxFragments)) flushEvent();`` comes *before* ``fragmentCount++`` and the
    fragment's ``addDataToAccumulatedEvent``, so the open event closes only once it already holds
    N + 1 fragments: ``--maxfragments 1`` builds pairs, 0 one event per fragment. The default is
    glom.ggo's (``maxfragments ... default="1000"``). A stuck clock, the case the limit is for
    ("timestamp stuck" in glom's comment): ten fragments at one timestamp."""
    ts, barrier = [500] * 10, [0] * 10
    config = GlomConfig(dt=5) if max_fragments is None else GlomConfig(5, max_fragments)
    assert config.max_fragments == (1000 if max_fragments is None else max_fragments)
    assert config.largest_event == config.max_fragments + 1
    assert config.builds == (config.max_fragments > 0)
    n = config.max_fragments
    starts = event_starts(np.array(ts, dtype=np.uint64), np.array(barrier), dt=5, max_fragments=n)
    assert np.diff(np.append(starts, 10)).tolist() == sizes
    assert [len(event) for event in glom_main(ts, barrier, 5, n)] == sizes
    table = pa.table({
        "offset": pa.array(range(10), pa.int64()), "source": pa.array([1, 2] * 5, pa.int64()),
        "timestamp": pa.array(ts, pa.int64()), "barrier": pa.array(barrier, pa.int64()),
        "late": pa.array([False] * 10), "payload": pa.array([b"x"] * 10, pa.binary()),
    })
    assert build_events(table, config).column("multiplicity").to_pylist() == sizes
    assert [e.multiplicity for e in glom(fragments_of(table), 5, n)] == sizes
    assert [e.multiplicity for e in _built(table, config, 3)] == sizes


@pytest.mark.parametrize("max_fragments", [0, 1, 2, 3, 1000])
@pytest.mark.parametrize("seed", range(4))
def test_event_starts_and_the_oracle_are_glom_mains_loop(seed: int, max_fragments: int) -> None:
    """Random ordered streams (late fragments, barriers, events long enough to be cut): the events
    of :func:`event_starts` and of the sequential oracle are those of glom's own loop,
    transcribed statement by statement from glomMain.cpp (``main``, ``accumulateEvent``,
    ``flushEvent``: tests/spark/oracle.py ``glom_main``)."""
    table = random_stream(seed, 3000, late_share=0.1, barrier_share=0.005, spread=10)
    ts = table.column("timestamp").to_numpy()
    barrier = table.column("barrier").to_numpy()
    dt = (0, 30, 60, 400)[seed]
    by_glom = glom_main(ts.tolist(), barrier.tolist(), dt, max_fragments)
    glom_starts = [event[0] for event in by_glom]
    starts = event_starts(ts.view(np.uint64), barrier, dt=dt, max_fragments=max_fragments)
    assert starts.tolist() == glom_starts
    oracle = glom(fragments_of(table), dt, max_fragments)
    assert [list(e.offsets) for e in oracle] == by_glom
    if max_fragments < 1000 and dt:  # the limit cut some events here
        assert max(len(event) for event in by_glom) == max_fragments + 1


_STAMPS = st.one_of(
    st.integers(0, 60),  # close together: events of several fragments, late ones among them
    st.integers(0, 2**63 - 1),  # anywhere the data source lets through
    st.sampled_from([0, 1, 2**62, 2**63 - 2, 2**63 - 1]),
)


@fuzz_settings(300)
@given(
    fragments=st.lists(st.tuples(_STAMPS, st.sampled_from([0, 0, 0, 0, 0, 1, 7])), max_size=120),
    dt=st.one_of(st.integers(0, 70), st.sampled_from([2**62, 2**63, 2**64 - 1, 2**64, 2**70])),
    max_fragments=st.sampled_from([1, 2, 3, 5, 1000]),
)
def test_the_compiled_event_starts_are_glom_mains(
    fragments: list[tuple[int, int]], dt: int, max_fragments: int
) -> None:
    """The compiled chain (``orderer/_core/glom_starts.pyx``) on any stream the data source lets
    through (timestamps below 2**63, where glom's modulo-2**64 window and evb's exact one
    agree), any window (up to and past 2**64) and any limit: glom's own loop's starts."""
    ts = [t for t, _ in fragments]
    barrier = [b for _, b in fragments]
    expected = [event[0] for event in glom_main(ts, barrier, min(dt, 2**64 - 1), max_fragments)]
    starts = event_starts(
        np.array(ts, dtype=np.uint64), np.array(barrier, dtype=np.int64), dt=dt,
        max_fragments=max_fragments,
    )
    assert starts.dtype == np.int64
    assert starts.tolist() == expected


def test_no_build_is_glom_nobuild_and_maxfragments_0() -> None:
    """glom's ``--nobuild`` and ``--maxfragments 0`` both flush before every fragment
    (glomMain.cpp, ``accumulateEvent``); evb's ``--no-build`` (dt None) and max_fragments 0
    make the same one-fragment events."""
    table = random_stream(5, 400)
    ts, barrier = table.column("timestamp").to_numpy(), table.column("barrier").to_numpy()
    singles = [[i] for i in range(400)]
    assert glom_main(ts.tolist(), barrier.tolist(), 10**6, 1000, nobuild=True) == singles
    assert glom_main(ts.tolist(), barrier.tolist(), 10**6, 0) == singles
    assert event_starts(ts.view(np.uint64), barrier, dt=10**6, max_fragments=0).tolist() == list(
        range(400)
    )
    assert not GlomConfig(10**6, 0).builds
    with pytest.raises(ValueError, match="max_fragments must be >= 0"):
        event_starts(ts.view(np.uint64), barrier, dt=5, max_fragments=-1)


def test_the_window_does_not_wrap_at_2_64_where_globs_does() -> None:
    """glom measures the window in unsigned 64-bit arithmetic, both ways round (glomMain.cpp,
    ``accumulateEvent``: ``tsdiff1 = timestamp-firstTimestamp; tsdiff2 = firstTimestamp -
    timestamp;`` the smaller of the two): 2**64 - 10 and then 5 are 15 ticks apart for glom, one
    event with dt 100; evb's ``|ts - first|`` makes two. They differ only for timestamps more
    than 2**63 apart, and the data source refuses every timestamp from 2**63 up, naming its
    offset, so no event the job writes differs."""
    from orderer.batch import EmittedBatch
    from orderer.building.glom import fragment_rows
    from orderer.errors import InterfaceError

    ts = [2**64 - 10, 5]
    assert glom_main(ts, [0, 0], 100) == [[0, 1]]
    assert event_starts(np.array(ts, dtype=np.uint64), np.zeros(2), dt=100).tolist() == [0, 1]
    top = [2**63 - 1, 0]  # the farthest apart the source lets through: no wrap either way
    assert glom_main(top, [0, 0], 100) == [[0], [1]]
    assert event_starts(np.array(top, dtype=np.uint64), np.zeros(2), dt=100).tolist() == [0, 1]
    batch = EmittedBatch(
        first_seq=40, t=np.zeros(2), source=np.ones(2, dtype=np.uint32),
        timestamp=np.array(ts, dtype=np.uint64), barrier=np.zeros(2, dtype=np.uint32),
        late=np.zeros(2, dtype=bool), payload_offsets=np.zeros(3, dtype=np.uint64),
        payload=np.zeros(0, dtype=np.uint8),
    )
    with pytest.raises(InterfaceError, match="offset 40: timestamp 18446744073709551606"):
        fragment_rows(batch)


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
        ({"dt": "5", "maxFragments": "-1"}, r"max_fragments: must be an integer >= 0 \(got -1\)"),
        ({"dt": "5", "maxFragments": "many"}, r"maxFragments: must be an integer \(got 'many'\)"),
        ({"dt": "5", "timestampPolicy": "median"}, "timestamp_policy: must be earliest"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        glom_from_options(options)


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
