"""Every emitted fragment carries its arrival time (``EmittedBatch.arrival``): the ``t`` of the
record that brought it, on each of the core's emission paths (on time with and without
payloads, late, barriers, end of run), and slices, copies and concatenations keep it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from orderer import EmittedBatch, Orderer, OrdererConfig
from orderer.batch import ArrivalKind
from orderer.clock import SimulatedClock
from orderer.replay.synthetic import Stall, SyntheticRun, generate_records


@pytest.mark.parametrize("payload_size", [0, 6])
def test_each_emitted_fragment_carries_the_time_it_arrived(payload_size: int) -> None:
    spec = SyntheticRun(
        n_sources=4, fragments_per_source=500, rate=300.0, jitter=0.03, batch_size=3,
        sync_barriers=3, payload_size=payload_size, seed=4,
        stalls=(Stall(source=3, start=0.4, end=1.2),),
    )
    records = generate_records(spec)
    config = OrdererConfig(build_window=0.1, startup_delay=0.05, source_timeout=None)
    orderer = Orderer(config, clock=SimulatedClock(), track_arrival=True)
    orderer.replay_records(records)
    orderer.end_run(now=float(records.times()[-1]))
    emitted = orderer.take_emitted()
    assert emitted.arrival is not None
    fragments = records.kind == ArrivalKind.FRAGMENT
    arrived = {
        (int(s), int(ts)): float(t)
        for s, ts, t in zip(records.source[fragments], records.value[fragments],
                            records.times()[fragments], strict=True)
    }
    assert len(arrived) == int(fragments.sum())  # (source, ts) names a fragment here
    expected = [arrived[(int(s), int(ts))] for s, ts in zip(emitted.source, emitted.timestamp,
                                                              strict=True)]
    assert emitted.arrival.tolist() == expected
    assert (emitted.t >= emitted.arrival).all()
    # not asked for, none (the same output otherwise)
    plain = Orderer(config, clock=SimulatedClock())
    plain.replay_records(records)
    plain.end_run(now=float(records.times()[-1]))
    untracked = plain.take_emitted()
    assert untracked.arrival is None
    assert untracked.timestamp.tolist() == emitted.timestamp.tolist()
    # the paths this covers: late fragments, barriers, and plain on-time ones
    assert emitted.late.any() and (emitted.barrier > 0).any() and (~emitted.late).any()


def test_slices_copies_and_concatenations_keep_the_arrival_times() -> None:
    batch = EmittedBatch(
        5, np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3], np.uint32),
        np.array([7, 8, 9], np.uint64), np.zeros(3, np.uint32), np.zeros(3, np.bool_),
        np.array([0, 1, 2, 3], np.uint64), np.frombuffer(b"abc", np.uint8),
        np.array([0.5, 1.5, 2.5]),
    )
    assert batch.slice(1).arrival.tolist() == [1.5, 2.5]  # type: ignore[union-attr]
    assert batch.copy().arrival.tolist() == [0.5, 1.5, 2.5]  # type: ignore[union-attr]
    joined = EmittedBatch.concat([batch.slice(0, 1), batch.slice(1)])
    assert joined.arrival.tolist() == [0.5, 1.5, 2.5]  # type: ignore[union-attr]
    # a batch read back from the ordered log has none; joined with one, the result has none
    without = dataclasses.replace(batch, arrival=None)
    assert without.slice(1).arrival is None and without.copy().arrival is None
    assert EmittedBatch.concat([batch, without]).arrival is None


def test_tracking_is_switched_only_while_nothing_waits_to_be_taken() -> None:
    from orderer import FragmentBatch, InterfaceError

    orderer = Orderer(OrdererConfig(startup_delay=0.0), clock=SimulatedClock())
    orderer.submit(FragmentBatch.from_arrays(source=1, timestamp=[5]), now=0.0)
    orderer.end_run(now=0.0)
    with pytest.raises(InterfaceError, match="arrival tracking"):
        orderer._core.set_track_arrival(True)
