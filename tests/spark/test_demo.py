"""Tests of the live demo (:mod:`orderer.spark.driver.demo`, ``evb demo``, ``make demo``): a run
with physics through the orderer, gRPC and the Spark job, whose report shows the coincidence peak
and whose example stages find what the run was generated with; and the pieces that read them
(:mod:`orderer.spark.driver.demo_physics`).

The demo runs as ``evb demo`` does, in a process of its own: it starts and stops its own
SparkSession, which must not be the tests' shared one."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import boost_histogram as bh
import numpy as np
import pytest

from orderer.spark.driver import demo, demo_physics
from orderer.spark.output.coincidence import spectrum_axis

REPO = Path(__file__).resolve().parents[2]
STAGE_NAMES = (
    "pixel_hits", "decays", "source_hits", "dead_time", "scaler_reads", "scaler_sums",
    "calibrated", "energy_histogram",
)


def test_the_demo_finds_the_examples_of_its_checkout() -> None:
    assert demo_physics.examples_stages() == REPO / "examples" / "physics.py"


def test_the_demo_run_has_physics_and_keeps_what_shows_the_orderer() -> None:
    spec = demo.live_run(seed=1, seconds=20.0)
    assert spec.physics is demo.PHYSICS
    assert spec.duration == 20.0
    assert [(s.source, s.backlog) for s in spec.stalls] == [(4, False), (5, True)]
    assert spec.heterogeneous_barrier and spec.incomplete_barrier == 6
    assert spec.sync_barriers == 2
    # the glom window holds the triggers' spread with room for the background on its sides
    assert 10 * demo.PHYSICS.trigger_jitter <= demo.DT


def test_spectrum_peak_reads_the_reports_histogram(tmp_path: Path) -> None:
    axis = spectrum_axis(2_000)
    spectrum = bh.Histogram(
        bh.axis.IntCategory([1, 2]), bh.axis.IntCategory([1, 2]), axis,
        storage=bh.storage.Int64(),
    )
    centres = axis.centers
    counts = np.where(centres >= 0, 5, 0) + np.where((centres >= 0) & (centres <= 100), 995, 0)
    spectrum.view()[0, 1, :] = counts
    spectrum.view()[1, 0, :] = counts
    with (tmp_path / "dt_spectrum.pkl").open("wb") as file:
        pickle.dump(spectrum, file)
    peak = demo_physics.spectrum_peak(tmp_path, 200.0)
    assert peak.peak == 2_000 and 0 <= peak.at <= 100
    assert peak.background == 10.0 and peak.ratio == 200.0
    assert peak.total == int(counts.sum()) * 2
    assert peak.within == int(counts[(centres >= 0) & (centres <= 200)].sum()) * 2
    assert "coincidence peak of 2,000 fragments a bin" in peak.line()


def _assert_physics(text: str) -> None:
    """What the demo's output must say of the generated physics, whatever carried the run."""
    found = re.search(r"Half-life: ([\d.]+) ± ([\d.]+) ms .* generated ([\d.]+) ms", text)
    assert found, text
    fitted, error, generated = (float(v) for v in found.groups())
    assert generated == demo.PHYSICS.half_life * 1e3
    assert error < 0.03 * generated
    assert abs(fitted - generated) < min(3 * error, 0.06 * generated), found.group(0)

    found = re.search(
        r"coincidence peak of ([\d,]+) fragments a bin at \+(\d+) ticks .* flat background of "
        r"([\d.]+) a bin", text,
    )
    assert found, text
    peak, at, background = int(found[1].replace(",", "")), int(found[2]), float(found[3])
    assert 0 <= at <= demo.PHYSICS.trigger_jitter
    assert background > 0 and peak > 100 * background

    found = re.search(r"Scalers: ([\d,]+) triggers counted .*?, ([\d,]+) ± (\d+) expected", text)
    assert found, text
    counted, expected, sigma = (int(v.replace(",", "")) for v in found.groups())
    assert abs(counted - expected) < 5 * sigma
    assert re.search(r"clock [\d,]+ counts = 7\.\d+ s", text), text

    rows = re.findall(r"^\s+([1-4])\s+[\d,]+\s+[\d,]+\s+[\d.]+%\s+([\d.]+)\s+([\d.]+)\s*$", text,
                      re.MULTILINE)
    assert sorted(int(source) for source, *_ in rows) == [1, 2, 3, 4], text
    for _, low, high in rows:
        assert abs(float(low) - 661.7) < 1.0 and abs(float(high) - 1332.5) < 1.0


@pytest.mark.slow
def test_evb_demo_over_three_orderers_shows_the_physics_and_what_the_stages_found(
    tmp_path: Path,
) -> None:
    """``evb demo --orderers 3`` for 8 s of data: the run spread over three orderers (slices of
    10^6 ticks), merged and built by the Spark job; every example stage ran and wrote its
    results, the live page's address is printed, the half-life printed lies within three of its
    errors (and 6 %) of the generated one, the Δt spectrum's peak stands far above its flat
    background, the scalers and the gamma lines came out where they were put.

    One demo in the suite, over three orderers: the one-orderer demo (``make demo``) differs
    only in the orderers' flags and the names of their directories, and its job's path (one
    target) is every other Spark test's; a demo is a minute of the suite's two cores."""
    out = tmp_path / "demo"
    env = {**os.environ, "COLUMNS": "250"}  # rich wraps at the width: one figure a line
    done = subprocess.run(
        [sys.executable, "-m", "orderer.cli", "demo", "--output-dir", str(out), "--seconds", "8",
         "--orderers", "3"],
        capture_output=True, text=True, timeout=600, env=env, check=False, cwd=REPO,
    )  # fmt: skip
    text = done.stdout
    assert done.returncode == 0, text + done.stderr[-3000:]
    for k in range(3):
        assert f"orderer {k}:" in text and (out / f"orderer-{k}-data").is_dir(), text
    assert "runs the example stages" in text
    assert re.search(r"^Live page of the run .*: http://127\.0\.0\.1:\d+/$", text, re.MULTILINE)
    for name in STAGE_NAMES:
        assert f"{name} (" in text, name
        assert any((out / "spark" / "stages" / name / "run=demo").rglob("*.parquet")), name
    _assert_physics(text)
