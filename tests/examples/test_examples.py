"""The examples of ``examples/`` run through the stage machinery without Spark, on a synthetic
run with physics, and find what the run was generated with.

How they run (what the Spark job does, by hand): the run's fragments in timestamp order are
built into events (:func:`orderer.building.glom.build_events`), the example's stages are planned
(:func:`orderer.stages.plan.plan`) and run step by step over micro-batches of the events
(:func:`orderer.stages.steps.apply`, ``apply_sensitive``), each step's input shuffled and split
into partitions as a parallel engine hands it over (an order-sensitive stage's by the hash of
its key), the order-sensitive stages' states carried from one micro-batch to the next, an
aggregation's partitions accumulated apart and combined with its running accumulator, its
results the finish of the run so far (:func:`orderer.stages.steps.accumulate`, ``combine``,
``finish``). The answers are then compared with a direct numpy computation over the whole run,
and with one micro-batch in one partition: micro-batching and parallelism change nothing.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Hashable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import EVENT_SCHEMA, build_events
from orderer.replay.physics import HIT, SCALER, Physics, fragment_table
from orderer.replay.synthetic import SyntheticRun
from orderer.stages.api import EVENTS, Order, Stage
from orderer.stages.load import load_stages
from orderer.stages.plan import plan
from orderer.stages.steps import GLOBAL, accumulate, apply, apply_sensitive, combine, finish
from tests.physics_runs import ordered_fragments

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PHYSICS = Physics()
SPEC = SyntheticRun(
    n_sources=4, fragments_per_source=50_000, rate=1_000.0, physics=PHYSICS, seed=11
)
"""50 s: 10,000 implants, 1,000 background decays, 500 scaler reads a channel."""
DT = 100
"""Glom window, ticks: five times the trigger jitter."""
MICRO_BATCHES, PARTITIONS = 7, 3


@pytest.fixture(scope="module")
def events() -> pa.Table:
    return pa.Table.from_batches([build_events(ordered_fragments(SPEC), GlomConfig(dt=DT))])


def example(name: str) -> tuple[ModuleType, tuple[Stage, ...]]:
    """The example's stages, loaded as ``--stages`` loads them, and its module."""
    stages = load_stages(EXAMPLES / f"{name}.py")
    return sys.modules[name], stages


def run(
    stages: tuple[Stage, ...], events: pa.Table, micro_batches: int, partitions: int
) -> dict[str, pa.Table]:
    """Every stage's output over the events, micro-batch by micro-batch, in shuffled
    partitions, states carried (the module docstring says how)."""
    steps = plan(stages, EVENT_SCHEMA).stages
    states: dict[str, dict[Hashable, Any]] = {step.stage.name: {} for step in steps}
    outputs: dict[str, list[pa.Table]] = {step.stage.name: [] for step in steps}
    rng = np.random.default_rng(micro_batches * 100 + partitions)
    bounds = np.linspace(0, events.num_rows, micro_batches + 1).astype(int)
    for start, stop in itertools.pairwise(bounds.tolist()):
        results = {EVENTS: events.slice(start, stop - start)}
        for step in steps:
            stage = step.stage
            source = results[stage.reads]
            source = source.take(rng.permutation(source.num_rows))
            if stage.order is Order.AGGREGATION:  # the finished table of the run so far
                state = states[stage.name]
                total = state[GLOBAL] if GLOBAL in state else stage.initial()
                for part in _partitions(source, stage, partitions, rng):
                    total = combine(step, total, accumulate(step, part, stage.initial()))
                state[GLOBAL] = total
                results[stage.name] = finish(step, total)
                outputs[stage.name] = [results[stage.name]]
                continue
            pieces = []
            for part in _partitions(source, stage, partitions, rng):
                if stage.order is Order.SENSITIVE:
                    out, new = apply_sensitive(step, part, states[stage.name])
                    states[stage.name].update(new)
                else:
                    out = apply(step, part)
                pieces.append(out)
            results[stage.name] = pa.concat_tables(pieces)
            outputs[stage.name].append(results[stage.name])
    return {name: pa.concat_tables(tables) for name, tables in outputs.items()}


def _partitions(
    table: pa.Table, stage: Stage, partitions: int, rng: np.random.Generator
) -> list[pa.Table]:
    """As Spark splits a step's input: an order-sensitive stage's by its key's hash (one
    partition without a key), any other's anyhow."""
    if stage.order is Order.SENSITIVE:
        if stage.key is None:
            return [table]
        which = table[stage.key].to_numpy().astype(np.int64) % partitions
    else:
        which = rng.integers(0, partitions, table.num_rows)
    return [table.filter(pa.array(which == p)) for p in range(partitions)]


def stream_fragments(events: pa.Table) -> pa.Table:
    """Every fragment of the run in stream order, payload decoded (the direct computation's
    input)."""
    return fragment_table(events).sort_by("offset")


# --------------------------------------------------------------------- implant-decay


def test_implant_decay_recovers_the_half_life(events: pa.Table) -> None:
    """About 10,000 implants, each decay matched to the latest implant in its pixel within ten
    half-lives, over about 160 random decays that fell in a window: the fit's statistical
    error is 1.37 % of the half-life (1/sqrt(10,000) = 1 % for a pure exponential; the
    background and the window's cut widen it). The fitted value must lie within 3 of its
    standard errors of the generated one, and that error below 1.5 %: within 4.5 % at worst.
    This seed's run gives 20.50 ms for 20 ms (+2.5 %, 1.8 errors); eight other seeds gave
    -1.1 % to +1.1 % (mean -0.3 %), three runs ten times as long (0.42 % errors) +0.05 % to
    +0.7 %, and runs with ten times the implants a pixel -0.3 % and -0.5 % (where a fit
    without the implant rate is 3.6 % short): no bias seen beyond the statistics."""
    module, stages = example("implant_decay")
    out = run(stages, events, MICRO_BATCHES, PARTITIONS)
    rate = module.implant_rate(out["pixel_hits"])
    assert abs(rate - PHYSICS.implant_rate / PHYSICS.n_pixels) < 0.05 * rate
    fit = module.half_life(out["decays"]["decay_time"], rate)
    truth = PHYSICS.half_life
    assert fit.error < 0.015 * truth, fit
    assert abs(fit.half_life - truth) < 3 * fit.error, (fit, truth)
    assert fit.background < 0.1 * fit.signal, fit
    counts, _ = module.decay_histogram(out["decays"]["decay_time"])
    assert counts.sum() == out["decays"].num_rows
    assert counts[0] > 10 * counts[-1]  # falls: ten half-lives across the window


def test_implant_decay_does_not_depend_on_micro_batches(events: pa.Table) -> None:
    _, stages = example("implant_decay")
    whole = run(stages, events, 1, 1)["decays"].sort_by("offset")
    split = run(stages, events, MICRO_BATCHES, PARTITIONS)["decays"].sort_by("offset")
    assert split.num_rows > 9_000
    assert split.equals(whole)


# --------------------------------------------------------------------- dead time


def test_dead_time_matches_numpy(events: pa.Table) -> None:
    module, stages = example("dead_time")
    summary = module.live_time(run(stages, events, MICRO_BATCHES, PARTITIONS)["dead_time"])
    fragments = stream_fragments(events)
    source = fragments["source"].to_numpy()
    timestamp = fragments["timestamp"].to_numpy()
    dead_time = module.DEAD_TIME
    expected = []
    for s in SPEC.source_ids:
        gap = np.diff(timestamp[source == s])
        dead = dead_time + int(np.clip(gap, 0, dead_time).sum())
        span = int(timestamp[source == s][-1] - timestamp[source == s][0]) + dead_time
        expected.append(
            {
                "source": s,
                "fragments": int((source == s).sum()),
                "piled_up": int((gap < dead_time).sum()),
                "dead": dead,
                "live_fraction": 1.0 - dead / span,
            }
        )
    assert summary.to_pylist() == expected
    assert all(row["piled_up"] > 0 for row in expected[:-1])  # something piled up


def test_dead_time_is_one_row_per_source_whatever_the_split(events: pa.Table) -> None:
    """``dead_time`` is an aggregation: its results are the run's totals, one row per source,
    the same from one micro-batch in one partition as from seven in three; the per-fragment
    ``conversions`` it adds up are the same rows either way too."""
    _, stages = example("dead_time")
    whole = run(stages, events, 1, 1)
    split = run(stages, events, MICRO_BATCHES, PARTITIONS)
    assert split["dead_time"].equals(whole["dead_time"])
    assert split["dead_time"]["source"].to_pylist() == list(SPEC.source_ids)
    by_offset = [out["conversions"].sort_by("offset") for out in (whole, split)]
    assert by_offset[0].equals(by_offset[1])
    assert by_offset[0].num_rows == stream_fragments(events).num_rows


# --------------------------------------------------------------------- scalers


def test_scaler_sums_match_numpy(events: pa.Table) -> None:
    module, stages = example("scalers")
    sums = run(stages, events, MICRO_BATCHES, PARTITIONS)["scaler_sums"].sort_by("offset")
    fragments = stream_fragments(events)
    reads = fragments.filter(pc.equal(fragments["kind"], SCALER))
    channel = reads["pixel"].to_numpy()
    count = reads["count"].to_numpy()
    totals = {}
    for c in np.unique(channel).tolist():
        increments = np.diff(count[channel == c]) % 2**32  # the counters wrap at 32 bits
        totals[c] = int(increments.sum())
        mine = sums.filter(pc.equal(sums["channel"], c))
        assert mine["increment"].to_pylist() == [0, *increments.tolist()]
        assert mine["total"].to_pylist() == np.cumsum([0, *increments]).tolist()
    assert module.totals(sums) == totals
    # the clock channel counted the time between the first and the last read
    seconds = (reads["timestamp"][-1].as_py() - reads["timestamp"][0].as_py()) / SPEC.tick_rate
    assert abs(totals[1] - seconds * PHYSICS.scaler_clock) <= 2


# --------------------------------------------------------------------- calibration


def test_calibration_histogram_counts_every_hit_and_finds_the_lines(events: pa.Table) -> None:
    module, stages = example("calibration")
    out = run(stages, events, MICRO_BATCHES, PARTITIONS)
    spectra = module.histogram(out["energy_histogram"])
    fragments = stream_fragments(events)
    hits = fragments.filter(pc.equal(fragments["kind"], HIT))
    assert sum(int(h.sum()) for h in spectra.values()) == hits.num_rows
    assert out["calibrated"].num_rows == hits.num_rows
    for source, spectrum in spectra.items():
        assert spectrum.sum() == int(pc.sum(pc.equal(hits["source"], source)).as_py())
        for line in (661.7, 1332.5):
            window = slice(int(line) - 30 + 1, int(line) + 30 + 1)  # index: bin + 1
            peak = int(np.argmax(spectrum[window])) + int(line) - 30  # the bin's low edge
            assert abs(peak + 0.5 * module.BIN_KEV - line) <= 2.0, (source, line, peak)
            assert abs(module.line_energy(spectrum, line) - line) <= 1.0, (source, line)
    # the calibrated energies are the true ones (the payload's), to half an ADC channel
    calibrated = out["calibrated"].sort_by("offset")
    assert calibrated["offset"].equals(hits["offset"])
    gain = np.array([module.CALIBRATION[s][0] for s in hits["source"].to_pylist()])
    error = calibrated["energy"].to_numpy() - hits["energy"].to_numpy()
    assert np.all(np.abs(error) <= gain / 2 + 1e-3)


def test_the_example_calibration_is_the_synthetic_runs() -> None:
    module, _ = example("calibration")
    expected = {source: PHYSICS.calibration(i) for i, source in enumerate(SPEC.source_ids)}
    calibration = module.CALIBRATION
    assert calibration == expected


def test_calibration_and_scalers_do_not_depend_on_micro_batches(events: pa.Table) -> None:
    """``energy_histogram`` is an aggregation: one finished table for the run, the same rows
    in the same order however the run was split (it used to be partial histograms whose rows
    changed with the split and only their sums did not)."""
    for name, result in (("calibration", "energy_histogram"), ("scalers", "scaler_sums")):
        _, stages = example(name)
        whole = run(stages, events, 1, 1)[result]
        split = run(stages, events, MICRO_BATCHES, PARTITIONS)[result]
        if name == "calibration":
            assert split.equals(whole)
            cells = list(zip(whole["source"].to_pylist(), whole["bin"].to_pylist(), strict=True))
            assert len(set(cells)) == len(cells)  # one row per (source, bin)
        else:
            assert split.sort_by("offset").equals(whole.sort_by("offset"))


def test_physics_runs_every_example_and_loads_again() -> None:
    """examples/physics.py (what ``evb demo`` runs) lists the four examples' stages, loaded as
    ``--stages`` loads them; a second load in the same process (the job loads its stages more
    than once) gives the same stages, and the examples' modules stay where the demo reads
    them."""
    expected = [
        stage.name
        for name in ("implant_decay", "dead_time", "scalers", "calibration")
        for stage in example(name)[1]
    ]
    first = load_stages(EXAMPLES / "physics.py")
    again = load_stages(EXAMPLES / "physics.py")
    assert [s.name for s in first] == [s.name for s in again] == expected
    assert len(set(expected)) == len(expected) == 9
    assert sys.modules["implant_decay"].__file__ == str(EXAMPLES / "implant_decay.py")


def test_every_example_plans_and_explains_and_spark_can_hold_its_columns() -> None:
    """Spark has no unsigned integers: a stage's schema with one would fail in the job."""
    for path in sorted(EXAMPLES.glob("*.py")):
        stages = load_stages(path)
        text = plan(stages, EVENT_SCHEMA).explain(4)
        assert all(stage.name in text for stage in stages), path
        for stage in stages:
            unsigned = [f.name for f in stage.schema if pa.types.is_unsigned_integer(f.type)]
            assert not unsigned, (stage.name, unsigned)
