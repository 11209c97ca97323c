"""Tests of :mod:`orderer.replay.physics` in synthetic runs: deterministic, each source's
timestamps ascending, the payload decodes, and the physics is there: a coincidence peak over a
flat background in the Δt spectrum of the built events, implants followed by decays in their
pixel, scalers that count and wrap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from orderer.batch import ArrivalKind
from orderer.building.config import GlomConfig
from orderer.building.glom import build_events
from orderer.errors import ConfigError
from orderer.replay.physics import (
    BARRIER,
    CLOCK_CHANNEL,
    DECAY,
    HIT,
    IMPLANT,
    PAYLOAD,
    PAYLOAD_SIZE,
    SCALER,
    TRIGGER_CHANNEL,
    Physics,
    decode,
    fragment_table,
)
from orderer.replay.synthetic import Stall, SyntheticRun, generate_records, iter_batches
from tests.physics_runs import ordered_fragments

PHYSICS = Physics()
SPEC = SyntheticRun(
    n_sources=4, fragments_per_source=10_000, rate=1_000.0, batch_size=16, physics=PHYSICS, seed=5
)


@pytest.fixture(scope="module")
def fragments() -> pa.Table:
    return ordered_fragments(SPEC)


def test_same_seed_same_run_other_seed_other_run() -> None:
    a, b = generate_records(SPEC), generate_records(SPEC)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x is None and y is None) or np.array_equal(x, y), f.name
    c = generate_records(dataclasses.replace(SPEC, seed=6))
    assert not np.array_equal(a.payload, c.payload)


def test_without_physics_a_run_is_unchanged() -> None:
    """``physics=None`` is the default: the same spec with it spelled out is the same run."""
    plain = SyntheticRun(n_sources=3, fragments_per_source=500, payload_size=8, seed=2)
    a = generate_records(plain)
    b = generate_records(dataclasses.replace(plain, physics=None))
    assert np.array_equal(a.payload, b.payload) and np.array_equal(a.value, b.value)


def test_each_source_ascending_and_every_payload_sixteen_bytes() -> None:
    records = generate_records(SPEC)
    fragment = records.kind == ArrivalKind.FRAGMENT
    assert np.all(np.diff(records.payload_offsets[:-1][fragment]) >= 0)
    lengths = np.diff(records.payload_offsets)
    assert set(lengths[fragment].tolist()) == {PAYLOAD_SIZE}
    assert set(lengths[~fragment].tolist()) <= {0}
    for source in SPEC.source_ids:
        mine = fragment & (records.source == source)
        assert np.all(np.diff(records.value[mine].astype(np.int64)) >= 0), source


def test_the_sources_play_their_roles() -> None:
    records = generate_records(SPEC)
    fragment = records.kind == ArrivalKind.FRAGMENT
    payload = records.payload.view(PAYLOAD)
    source = records.source[fragment]
    kinds = {s: set(payload["kind"][source == s].tolist()) for s in SPEC.source_ids}
    assert kinds == {
        1: {HIT, IMPLANT, DECAY, BARRIER},
        2: {HIT, BARRIER},
        3: {HIT, BARRIER},
        4: {SCALER, BARRIER},
    }
    barrier = records.barrier[fragment] != 0
    assert np.array_equal(payload["kind"] == BARRIER, barrier)
    # the ADC is the energy through the source's calibration, to the nearest channel
    for index, s in enumerate(SPEC.source_ids[:-1]):
        gain, offset = PHYSICS.calibration(index)
        hits = payload[(source == s) & ~barrier]
        error = gain * hits["adc"].astype(np.float64) + offset - hits["energy"]
        assert np.abs(error).max() <= gain / 2 + 1e-3, s


def test_iter_batches_carries_the_same_payloads() -> None:
    records = generate_records(SPEC)
    fragment = records.kind == ArrivalKind.FRAGMENT
    for source in SPEC.source_ids:
        live = b"".join(
            batch.payload.tobytes() for _, batch in iter_batches(SPEC) if batch.source[0] == source
        )
        mine = records.payload.reshape(-1, PAYLOAD_SIZE)[records.source[fragment] == source]
        assert live == mine.tobytes(), source


def test_decode_reads_arrow_slices_lists_and_refuses_wrong_sizes(fragments: pa.Table) -> None:
    column = fragments.column("payload")
    whole = decode(column)
    assert whole.dtype == PAYLOAD and whole.shape[0] == fragments.num_rows
    middle = column.combine_chunks().slice(1000, 50)
    assert np.array_equal(decode(middle), whole[1000:1050])
    assert np.array_equal(decode(middle.to_pylist()), whole[1000:1050])
    assert np.array_equal(decode(middle.cast(pa.large_binary())), whole[1000:1050])
    assert decode([]).shape == (0,)
    with pytest.raises(ValueError, match="payload 1 is 3 bytes"):
        decode([bytes(16), b"abc"])
    with pytest.raises(ValueError, match="null"):
        decode(pa.array([None], pa.binary()))


def test_the_dt_spectrum_shows_a_coincidence_peak_over_a_flat_background(
    fragments: pa.Table,
) -> None:
    """Events built with a wide window (2,000 ticks); Δt of each later fragment of another
    trigger source to the event's first: within the trigger jitter the counts per tick stand
    hundreds of times over the flat level of random coincidences beyond it (1,700 times in
    this run: 950 a tick against 0.55)."""
    dt = 2_000
    rows = fragment_table(build_events(fragments, GlomConfig(dt=dt)))
    event = rows["event"].to_numpy()
    timestamp = rows["timestamp"].to_numpy()
    source = rows["source"].to_numpy()
    first = np.flatnonzero(np.diff(event, prepend=-1) != 0)
    which = np.repeat(first, np.diff(np.append(first, event.shape[0])))
    later = (np.arange(event.shape[0]) != which) & (source != source[which])
    later &= (source != SPEC.source_ids[-1]) & (source[which] != SPEC.source_ids[-1])
    spectrum = np.bincount(timestamp[later] - timestamp[which][later], minlength=dt + 1)
    jitter = PHYSICS.trigger_jitter
    peak = spectrum[: jitter + 1].mean()
    flat = spectrum[4 * jitter :]
    halves = np.array_split(flat, 2)
    assert peak > 200 * flat.mean(), (peak, flat.mean())
    assert flat.sum() > 500  # there is a background to stand over (about 1,000 here)
    assert abs(halves[0].mean() - halves[1].mean()) < 0.25 * flat.mean()  # and it is flat


def test_every_implant_of_a_long_lived_nucleus_decays_in_its_pixel() -> None:
    """With no background decays and every decay seen, the decays are the implants' own:
    as many, in the same pixels, and their times from the implants exponential with the
    half-life (mean time tau = half-life / ln 2, within 5 standard errors)."""
    physics = Physics(background_decay_rate=0.0, implant_rate=50.0, half_life=0.01)
    spec = SyntheticRun(n_sources=2, fragments_per_source=20_000, rate=1_000.0, physics=physics,
                        barriers=False, seed=3)
    records = generate_records(spec)
    payload = records.payload.view(PAYLOAD)
    value = records.value[records.kind == ArrivalKind.FRAGMENT]
    implants = payload["kind"] == IMPLANT
    decays = payload["kind"] == DECAY
    assert abs(int(decays.sum()) - int(implants.sum())) <= 5  # those decaying after the end
    assert set(payload["pixel"][decays].tolist()) <= set(payload["pixel"][implants].tolist())
    t_implant = np.sort(value[implants].astype(np.int64))
    t_decay = np.sort(value[decays].astype(np.int64))
    n = min(t_implant.shape[0], t_decay.shape[0])
    tau = physics.half_life / np.log(2) * spec.tick_rate
    mean = (t_decay[:n].sum() - t_implant[:n].sum()) / n  # sums of times do not need pairs
    assert abs(mean - tau) < 5 * tau / np.sqrt(n)


def test_scalers_count_the_triggers_and_the_clock_and_wrap() -> None:
    records = generate_records(SPEC)
    payload = records.payload.view(PAYLOAD)
    scaler = payload["kind"] == SCALER
    reads = payload[scaler]
    period = round(PHYSICS.scaler_period * SPEC.tick_rate)
    for channel in (TRIGGER_CHANNEL, CLOCK_CHANNEL):
        mine = reads[reads["pixel"] == channel]
        assert mine.shape[0] == round(SPEC.duration / PHYSICS.scaler_period)
        assert int(mine["count"][0]) == PHYSICS.scaler_start
        increments = np.diff(mine["count"])  # uint32: differences wrap as the counters do
        if channel == CLOCK_CHANNEL:
            assert np.any(mine["count"][1:] < mine["count"][:-1])  # the counter wrapped
            ticks = PHYSICS.scaler_clock * PHYSICS.scaler_period
            assert np.all(np.abs(increments.astype(np.int64) - ticks) <= 1)
        else:
            triggers = PHYSICS.trigger_rate + PHYSICS.implant_rate
            assert abs(increments.mean() / PHYSICS.scaler_period - triggers) < 0.05 * triggers
    timestamps = records.value[records.kind == ArrivalKind.FRAGMENT][scaler]
    assert np.all(np.diff(np.unique(timestamps).astype(np.int64)) >= period - 1)


def test_barriers_and_stalls_lie_over_the_physics() -> None:
    spec = dataclasses.replace(
        SPEC, sync_barriers=2, stalls=(Stall(source=2, start=2.0, end=3.0),),
        incomplete_barrier=3,
    )
    records = generate_records(spec)
    fragment = records.kind == ArrivalKind.FRAGMENT
    payload = records.payload.view(PAYLOAD)
    source, timestamp = records.source[fragment], records.value[fragment]
    barrier = records.barrier[fragment]
    assert np.array_equal(payload["kind"] == BARRIER, barrier != 0)
    assert [int((barrier[source == s] != 0).sum()) for s in spec.source_ids] == [4, 4, 3, 4]
    gap = (source == 2) & (timestamp >= spec.timestamp_origin + 2 * 10**8) & (
        timestamp < spec.timestamp_origin + 3 * 10**8
    )
    assert not gap.any()


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"trigger_rate": -1.0}, "physics.trigger_rate"),
        ({"half_life": 0.0}, "physics.half_life"),
        ({"trigger_efficiency": 1.5}, "physics.trigger_efficiency"),
        ({"trigger_jitter": -1}, "physics.trigger_jitter"),
        ({"pixels": (300, 300)}, "physics.pixels"),
        ({"scaler_start": 2**32}, "physics.scaler_start"),
        ({"gains": (1.0,)}, "physics.gains"),
        ({"scaler_period": float("nan")}, "physics.scaler_period"),
    ],
)
def test_bad_physics_names_the_parameter(change: dict[str, object], parameter: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Physics(**change)  # type: ignore[arg-type]
    assert caught.value.parameter == parameter


def test_physics_needs_two_sources_and_its_own_payload_size() -> None:
    with pytest.raises(ConfigError, match="n_sources"):
        SyntheticRun(n_sources=1, physics=PHYSICS)
    with pytest.raises(ConfigError, match="payload_size"):
        SyntheticRun(payload_size=8, physics=PHYSICS)
    assert SyntheticRun(payload_size=16, physics=PHYSICS).fragment_payload_size == PAYLOAD_SIZE
