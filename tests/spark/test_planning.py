"""How the source plans reads, without Spark or a server (the scan of the orderer's timestamps
is replaced by slices of an in-memory stream): a read ends only at an event start, never beyond
its limit unless one event is longer, takes the open event only once the run ended, and its
partitions are offset ranges that start at event starts."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from orderer.building.glom import event_starts
from orderer.errors import ConfigError
from orderer.spark.source import planning
from orderer.spark.source.options import Options
from tests.spark.oracle import random_stream

STREAM = random_stream(11, 2000, late_share=0.1)
TS = STREAM.column("timestamp").to_numpy().view(np.uint64)
BARRIER = STREAM.column("barrier").to_numpy()


@pytest.fixture
def planner(monkeypatch: pytest.MonkeyPatch) -> planning.Planner:
    def scan(options: Any, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
        return TS[first:until], BARRIER[first:until]

    monkeypatch.setattr(planning, "_scan_target", scan)
    options = Options.parse(
        {"target": "unused:1", "dt": "60", "maxFragments": "5", "numPartitions": "3"}
    )
    return planning.Planner(options)


def test_reads_end_at_event_starts_within_their_limit(planner: planning.Planner) -> None:
    starts = set(event_starts(TS, BARRIER, dt=60, max_fragments=5).tolist())
    first = 0
    for limit in (1, 2, 7, 37, 3, 100, None, 5):
        end = planner.end(first, 1500, False, limit)
        if first == max(s for s in starts if s < 1500):  # only the open event is left
            assert end == first
            continue
        assert end in starts and end > first
        if limit is not None and limit >= 5:
            assert end - first <= limit
        for a, b in planner.partitions(first, end):
            assert a in starts and a < b <= end
        first = end
    assert first < 1500  # the open event at the live end waits


def test_the_open_event_goes_only_once_the_run_ended(planner: planning.Planner) -> None:
    starts = event_starts(TS, BARRIER, dt=60, max_fragments=5)
    last = int(starts[starts < 2000][-1])
    assert planner.end(last, 2000, False, None) == last  # nothing complete yet
    assert planner.end(last, 2000, True, None) == 2000  # the end of the run closes it


@pytest.mark.parametrize("max_fragments", [1, 2, 5])
def test_an_event_longer_than_the_limit_is_read_whole(
    monkeypatch: pytest.MonkeyPatch, max_fragments: int
) -> None:
    """A stuck clock: every event is as long as ``maxFragments`` lets it be, max_fragments + 1
    fragments (glom's --maxfragments, glomMain.cpp ``accumulateEvent``), longer than a limit of
    one fragment; the read ahead for it reaches its end, the next event's start."""
    ts, barrier = np.full(100, 7, dtype=np.uint64), np.zeros(100, dtype=np.int64)

    def scan(options: Any, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
        return ts[first:until], barrier[first:until]

    monkeypatch.setattr(planning, "_scan_target", scan)
    options = Options.parse(
        {"target": "unused:1", "dt": "5", "maxFragments": str(max_fragments)}
    )
    planner = planning.Planner(options)
    first = 0
    for _ in range(4):
        end = planner.end(first, 100, False, 1)
        assert end == first + max_fragments + 1
        assert planner.partitions(first, end) == [(first, end)]
        first = end


def test_partitions_cover_the_range_in_order() -> None:
    starts = np.array([0, 3, 4, 10, 11, 12, 30, 31, 50], dtype=np.int64)
    assert planning.plan_partitions(starts, 0, 60, 3) == [(0, 30), (30, 50), (50, 60)]
    assert planning.plan_partitions(starts, 0, 60, 1) == [(0, 60)]
    assert planning.plan_partitions(starts, 5, 5, 2) == []
    parts = planning.plan_partitions(starts, 0, 60, 7)
    assert parts[0][0] == 0 and parts[-1][1] == 60
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(parts))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give exactly one of the options target and path"),
        ({"target": "a:1", "path": "/x"}, "give exactly one"),
        ({"target": "a:1", "numPartitions": "0"}, "numPartitions: must be >= 1"),
        ({"target": "a:1", "maxFragmentsPerTrigger": "many"}, "maxFragmentsPerTrigger: must be"),
        ({"target": "a:1", "dt": "1.5"}, "dt: must be an integer"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Options.parse(options)


@pytest.mark.parametrize("chunk", [1, 7, 64, 333, 5000])
@pytest.mark.parametrize(("first", "until", "parts"), [(0, 2000, 3), (17, 1999, 7), (5, 40, 2),
                                                       (0, 2000, 1), (100, 100, 2)])
def test_the_log_is_planned_one_chunk_at_a_time_as_from_all_its_starts(
    chunk: int, first: int, until: int, parts: int
) -> None:
    """The batch read of a log directory plans its partitions from one record batch at a time
    (bounded driver memory), and the plan is the one all the run's event starts give."""
    for glom in ({"dt": "60", "maxFragments": "5"}, {"dt": "400"}, {}):
        options = Options.parse({"path": "/unused", **glom})
        starts = first + options.starts(TS[first:until], BARRIER[first:until])
        chunks = ((at, TS[at : at + chunk], BARRIER[at : at + chunk])
                  for at in range(0, 2000, chunk))
        planned = planning.plan_log(chunks, first, until, parts, options.starts)
        assert planned == planning.plan_partitions(starts, first, until, parts)
