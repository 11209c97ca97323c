"""The reading of N orderers unit by unit (``orderer.replay.unit_plan``, what the Spark job's driver
and executors run) against the simulation's merge and building (``orderer.replay.sliced_merge``):
planned from slice indexes and piece heads alone, each unit's rows read from its ranges, the
merged stream is the simulation's row for row (numbers, positions, late flags, what the merge
drops), the units begin where the simulation's builders begin, and their events are glom's over
the merged stream; planned while the orderers' outputs grow, in micro-batches of any size and
again from any offset a checkpoint holds, the units are the same. Also the shared rules of
``orderer.replay.merged_stream`` applied a stretch at a time with what is carried in."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orderer.batch import EmittedBatch
from orderer.building.glom import event_starts
from orderer.config import OrdererConfig
from orderer.replay.merged_stream import (
    Before,
    high_water_after,
    late_flags,
    sure_starts,
    unit_bounds,
)
from orderer.replay.pieces import PieceCutter, PieceList
from orderer.replay.sliced import Router, _ordered
from orderer.replay.sliced_merge import Merged, Output, built_starts, merge
from orderer.replay.slicing import Slicing
from orderer.replay.unit_plan import Range, Unit, UnitPlanner, UnitStart, split_units, unit_rows
from orderer.stats import SliceIndex
from tests.replay.test_sliced import records_of, runs

_SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class _Orderers:
    """N orderers' outputs as a reader sees them: each exposed up to ``shown[k]`` rows, its run
    complete once all of it is shown and ``ended``."""

    slicing: Slicing
    outputs: list[EmittedBatch]
    shown: list[int]
    ended: bool = True

    def _complete(self, k: int) -> bool:
        return self.ended and self.shown[k] == len(self.outputs[k])

    def index(self, orderer: int, from_slice: int) -> SliceIndex:
        out = self.outputs[orderer]
        pieces = PieceList()
        cutter = PieceCutter(self.slicing, orderer)
        shown = self.shown[orderer]
        for a in range(0, shown, 5):  # cut in batches, as the service cuts each it emits
            b = min(shown, a + 5)
            pieces.fold(cutter.cut_rows(a, out.timestamp[a:b], out.barrier[a:b]))
        return pieces.read(from_slice, 0, complete=self._complete(orderer))

    def heads(self, orderer: int, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
        assert until <= self.shown[orderer], "read past the durable output"
        out = self.outputs[orderer]
        return out.timestamp[first:until], out.barrier[first:until]

    def read(self, part: Range) -> list[EmittedBatch]:
        assert part.until <= self.shown[part.orderer]
        out = self.outputs[part.orderer].slice(part.first, part.until)
        return [out.slice(a, min(len(out), a + 3)) for a in range(0, len(out), 3)]


def _emitted(output: Output) -> EmittedBatch:
    """An orderer's output as the batches a reader gets: each fragment's number as its payload."""
    s = output.stream()
    n = len(s)
    return EmittedBatch(
        0, np.zeros(n), np.zeros(n, np.uint32), s.ts, s.barrier, s.late,
        np.arange(n + 1, dtype=np.uint64) * np.uint64(8),
        s.id.astype("<u8").view(np.uint8),
    )  # fmt: skip


def _simulated(rows: list[dict], config: OrdererConfig, slicing: Slicing) -> tuple[
    list[Output], Merged
]:
    router = Router(slicing, config.source_timeout)
    ((outputs, _),), _ = _ordered([records_of(rows)], config, [router])
    merged = merge(outputs, slicing, drop_late=config.late_policy == "drop")
    return outputs, merged


def _plan_all(
    planner: UnitPlanner, orderers: _Orderers, steps: list[list[int]], max_rows: int | None
) -> list[Unit]:
    """Units planned while each orderer's output grows by ``steps`` (prefix lengths), then
    with everything shown; each plan starts where the last ended, from its JSON (a restart)."""
    start = UnitStart.initial(orderers.slicing.orderers)
    units: list[Unit] = []
    final = [len(o) for o in orderers.outputs]
    for shown in [*steps, final]:
        orderers.shown = shown
        orderers.ended = shown == final
        while True:
            planned = planner.plan(start, max_rows=max_rows)
            if not planned.units:  # nothing more yet, or an empty run's end
                assert planned.end == start or (planned.end.ended and not units)
                start = planned.end
                break
            again = planner.plan(start, until=planned.end)  # a restarted query plans the same
            assert again == planned
            units.extend(planned.units)
            start = UnitStart.from_json(json.loads(json.dumps(planned.end.to_json())))
            if start.ended:
                break
    assert start.ended
    assert start.needed == tuple(final)  # everything committed at the end
    return units


@_SETTINGS
@given(
    rows=runs(), n=st.integers(2, 4), ticks=st.sampled_from([7, 100, 1000]),
    dt=st.sampled_from([None, 0, 15, 400]), drop=st.booleans(),
    max_rows=st.sampled_from([None, 1, 4]), fractions=st.lists(st.floats(0, 1), max_size=3),
)
def test_units_read_from_indexes_and_heads_are_the_simulations(
    rows: list[dict], n: int, ticks: int, dt: int | None, drop: bool, max_rows: int | None,
    fractions: list[float],
) -> None:
    config = OrdererConfig.from_mapping(
        {"startup_delay": 0.5, "build_window": 2.0, "late_policy": "drop" if drop else "emit"}
    )
    slicing = Slicing(n, ticks)
    outputs, merged = _simulated(rows, config, slicing)
    emitted = [_emitted(o) for o in outputs]
    steps = [
        [int(len(e) * f) for e in emitted] for f in sorted(fractions)
    ]  # the outputs grow together, each to a share of itself
    orderers = _Orderers(slicing, emitted, [0] * n)
    planner = UnitPlanner(slicing, dt, orderers, drop_late=drop)
    units = _plan_all(planner, orderers, steps, max_rows)

    parts = [list(unit_rows(u, orderers.read, slicing, drop_late=drop)) for u in units]
    batches = [b for part in parts for b in part]
    ids = np.concatenate(
        [b.column("payload").to_numpy(zero_copy_only=False) for b in batches]
    ) if batches else np.zeros(0, object)
    got_ids = [int.from_bytes(p, "little") for p in ids]
    assert got_ids == merged.id.tolist()  # the merged stream, row for row
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    positions = np.arange(len(merged)) if merged.positions is None else merged.positions
    assert offsets == positions.tolist()
    late = [x for b in batches for x in b.column("late").to_pylist()]
    assert late == merged.late.tolist()

    # units begin at the simulation's units' first rows, and glom over them is glom's
    if dt is not None and len(merged):
        firsts = np.flatnonzero(np.concatenate([[True], merged.piece[1:] != merged.piece[:-1]]))
        bounds, _ = unit_bounds(firsts, sure_starts(merged.ts, merged.barrier, dt))
        rows_before = np.searchsorted(positions, [u.position for u in units])
        assert rows_before.tolist() == bounds[:-1].tolist()
    starts = []
    at = 0
    for part in parts:
        if not part:
            continue
        ts = np.concatenate([b.column("timestamp").to_numpy() for b in part]).view(np.uint64)
        barrier = np.concatenate([b.column("barrier").to_numpy() for b in part])
        starts.extend((event_starts(ts, barrier, dt=dt) + at).tolist())
        at += ts.size
    assert starts == built_starts(merged, dt)[0].tolist()
    assert starts == event_starts(merged.ts, merged.barrier, dt=dt).tolist()


def test_a_unit_waits_for_the_orderers_still_behind() -> None:
    """Orderer 1 has emitted nothing yet: no piece is known (it may still open slice 1), so
    nothing is planned; once it emits slice 3, slices 0 to 2 are known and closed."""
    slicing = Slicing(2, 10)
    out0 = EmittedBatch(
        0, np.zeros(4), np.zeros(4, np.uint32), np.array([1, 2, 21, 40], np.uint64),
        np.zeros(4, np.uint32), np.zeros(4, np.bool_), np.zeros(5, np.uint64), np.zeros(0, np.uint8)
    )  # fmt: skip
    out1 = EmittedBatch(
        0, np.zeros(2), np.zeros(2, np.uint32), np.array([30, 31], np.uint64),
        np.zeros(2, np.uint32), np.zeros(2, np.bool_), np.zeros(3, np.uint64), np.zeros(0, np.uint8)
    )  # fmt: skip
    orderers = _Orderers(slicing, [out0, out1], [4, 0], ended=False)
    planner = UnitPlanner(slicing, 5, orderers)
    start = UnitStart.initial(2)
    assert planner.plan(start).units == ()
    orderers.shown = [4, 2]  # orderer 1's piece of slice 3: slices 0 and 2 are closed
    planned = planner.plan(start)
    assert [u.ranges for u in planned.units] == [(Range(0, 0, 2),), (Range(0, 2, 3),)]
    end = planned.end
    assert (end.slice, end.orderer, end.offset, end.position) == (3, 1, 0, 3)
    assert end.needed == (3, 0)  # orderer 0 from its piece of slice 4, orderer 1 from 0
    assert end.high_water == 21


# ------------------------------------------------------------------ the rules, carried in


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    values=st.lists(st.tuples(st.integers(0, 60), st.sampled_from([0, 0, 0, 3])), max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=4), dt=st.sampled_from([0, 3, 10]),
)
def test_each_rule_a_stretch_at_a_time_is_the_rule_over_the_whole(
    values: list[tuple[int, int]], cuts: list[int], dt: int
) -> None:
    """Cut anywhere, with the row before and the high-water mark carried in, the sure starts and
    the late flags of each stretch are those of the whole stream."""
    ts = np.array([v for v, _ in values], dtype=np.uint64)
    barrier = np.array([b for _, b in values], dtype=np.uint32)
    whole_sure = sure_starts(ts, barrier, dt)
    whole_late = late_flags(ts, barrier)
    sure, late = [], []
    bounds = sorted({0, *(c for c in cuts if c < len(values)), len(values)})
    high = None
    for a, b in itertools.pairwise(bounds):
        before = None if a == 0 else Before(int(ts[a - 1]), int(barrier[a - 1]), high)
        sure += sure_starts(ts[a:b], barrier[a:b], dt, before).tolist()
        late += late_flags(ts[a:b], barrier[a:b], high).tolist()
        high = high_water_after(ts[a:b], barrier[a:b], high)
    assert sure == whole_sure.tolist()
    assert late == whole_late.tolist()


@given(rows=st.lists(st.integers(1, 50), max_size=30), parts=st.integers(1, 6))
@settings(max_examples=100, deadline=None, derandomize=True, database=None)
def test_units_are_dealt_into_partitions_whole_and_in_order(rows: list[int], parts: int) -> None:
    units = [Unit(i, None, (Range(0, i, i + 1),), n) for i, n in enumerate(rows)]
    groups = split_units(units, parts)
    assert [u for group in groups for u in group] == units
    assert len(groups) <= parts and all(groups)
