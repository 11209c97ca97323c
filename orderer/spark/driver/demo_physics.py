"""What ``evb demo`` found in its run's physics: the coincidence peak of the report's Δt spectrum,
and what the example stages (``examples/physics.py``: implant-decay, dead time, scalers,
calibration) made of the run, beside what it was generated with.

The spectrum comes from the report's ``dt_spectrum.pkl`` (the histogram behind
``dt_spectrum.png``, summed over the source pairs); the stages' results from
``OUTPUT/stages/STAGE/run=RUN/`` (Parquet, read with pyarrow), reduced with the examples' own
functions (``half_life``, ``live_time``, ``totals``, ``histogram``, ``line_energy``), taken from
the example modules as ``--stages`` loads them: the fits live in the examples, not here.

The examples are files of the repository, not of the package: a checkout has them
(:func:`examples_stages`), an installed wheel does not, and the demo then runs without stages.
"""

from __future__ import annotations

import math
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from rich import box
from rich.console import Console
from rich.table import Table

from orderer.replay.physics import GAMMA_LINES_KEV, Physics
from orderer.stages.load import load_stages

__all__ = ["SpectrumPeak", "examples_stages", "print_stage_results", "spectrum_peak"]

EXAMPLES_FILE = "physics.py"
"""The module of ``examples/`` that loads every example's stages."""
LINES_KEV = (GAMMA_LINES_KEV[0], GAMMA_LINES_KEV[2])
"""The lines shown per source (661.7 keV of 137Cs, 1332.5 keV of 60Co)."""


def examples_stages() -> Path | None:
    """``examples/physics.py`` of the checkout evb runs from, None where there is none (an
    installed wheel)."""
    path = Path(__file__).resolve().parents[3] / "examples" / EXAMPLES_FILE  # beside orderer/
    return path if path.is_file() else None


@dataclass(frozen=True)
class SpectrumPeak:
    """The Δt spectrum summed over the source pairs: its fullest bin against the flat level of
    random coincidences beyond the peak."""

    peak: int
    """Fragments in the fullest bin."""
    at: float
    """That bin's centre, ticks."""
    bin_width: float
    """Ticks."""
    background: float
    """Mean fragments a bin over the bins beyond ``beyond`` ticks (the positive side: without
    late fragments no difference is negative)."""
    beyond: float
    within: int
    """Fragments from 0 to ``beyond`` ticks."""
    total: int
    """Fragments in the spectrum (differences within ±dt)."""

    @property
    def ratio(self) -> float:
        """Peak over background (infinite without background)."""
        return self.peak / self.background if self.background > 0 else math.inf

    def line(self) -> str:
        ratio = f"{self.ratio:,.0f}x" if math.isfinite(self.ratio) else "no background"
        return (
            f"Δt spectrum: coincidence peak of {self.peak:,} fragments a bin at "
            f"{self.at:+.0f} ticks ({self.bin_width:.3g}-tick bins) over a flat background of "
            f"{self.background:.1f} a bin beyond +{self.beyond:g} ticks ({ratio}); "
            f"{self.within:,} of the {self.total:,} differences lie within {self.beyond:g} ticks."
        )


def spectrum_peak(report_dir: Path, beyond: float) -> SpectrumPeak:
    """The peak of the spectrum the job wrote into ``report_dir`` (``dt_spectrum.pkl``, a file
    of this run's: unpickled as trusted); the background is counted beyond ``beyond`` ticks."""
    with (report_dir / "dt_spectrum.pkl").open("rb") as file:
        histogram = pickle.load(file)
    counts = histogram.values().sum(axis=(0, 1))
    axis = histogram.axes[2]
    centres = axis.centers
    flat = centres > beyond
    top = int(counts.argmax())
    return SpectrumPeak(
        peak=int(counts[top]),
        at=float(centres[top]),
        bin_width=float(axis.widths[0]),
        background=float(counts[flat].mean()) if flat.any() else 0.0,
        beyond=beyond,
        within=int(counts[(centres >= 0) & ~flat].sum()),
        total=int(counts.sum()),
    )


def _example(stages_file: Path, name: str) -> ModuleType:
    """The example module ``name`` beside ``stages_file``, loaded as ``--stages`` loads it."""
    load_stages(stages_file.with_name(f"{name}.py"))
    return sys.modules[name]


def _results(summary: dict[str, Any], stage: str) -> pa.Table:
    """A stage's results of the run (every micro-batch's), as the job wrote them."""
    path = Path(summary["stages"][stage]["path"])
    if not path.is_dir():
        raise ValueError(f"stage {stage} wrote nothing ({path})")
    return ds.dataset(path, format="parquet").to_table()


def print_stage_results(
    console: Console, summary: dict[str, Any], stages_file: Path, physics: Physics,
    sources: tuple[int, ...],
) -> None:
    """What the example stages found (the module docstring says where from)."""
    ran = summary["stages"]
    where = Path(next(iter(ran.values()))["path"]).parents[1] if ran else None
    console.print(
        f"Stages of {stages_file.name}: "
        + ", ".join(f"{name} ({stage['rows']:,} rows)" for name, stage in ran.items())
        + f", in {where}/STAGE.",
        soft_wrap=True,
    )
    implant_decay, dead_time, scalers, calibration = (
        _example(stages_file, name)
        for name in ("implant_decay", "dead_time", "scalers", "calibration")
    )
    hits, decays = _results(summary, "pixel_hits"), _results(summary, "decays")
    fit = implant_decay.half_life(decays["decay_time"], implant_decay.implant_rate(hits))
    truth = physics.half_life
    console.print(
        f"Half-life: {fit.half_life * 1e3:.2f} ± {fit.error * 1e3:.2f} ms fitted from "
        f"{fit.signal:,.0f} implant-decay pairs over {fit.background:,.0f} random ones; "
        f"generated {truth * 1e3:g} ms ({(fit.half_life / truth - 1) * 100:+.1f} %, "
        f"{abs(fit.half_life - truth) / fit.error:.1f} standard errors)."
    )
    sums = _results(summary, "scaler_sums")
    totals = scalers.totals(sums)
    timestamp = sums["timestamp"].to_numpy()
    span = int(timestamp.max()) - int(timestamp.min()) if len(timestamp) else 0
    seconds = span / summary["tick_rate"]
    rate = physics.trigger_rate + physics.implant_rate
    expected = rate * seconds
    console.print(
        f"Scalers: {totals.get(0, 0):,} triggers counted in the {seconds:.1f} s between the "
        f"first and last reads, {expected:,.0f} ± {math.sqrt(expected):.0f} expected "
        f"({rate:g}/s generated); clock {totals.get(1, 0):,} counts = "
        f"{totals.get(1, 0) / physics.scaler_clock:.3f} s at {physics.scaler_clock / 1e6:g} MHz."
    )
    live = {
        row["source"]: row
        for row in dead_time.live_time(_results(summary, "dead_time")).to_pylist()
    }
    spectra = calibration.histogram(_results(summary, "energy_histogram"))
    table = Table(
        title=f"Per source, from the stages (dead time {dead_time.DEAD_TIME} ticks a fragment; "
        f"lines after calibration, sources {', '.join(map(str, sorted(spectra)))})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    lines = [f"{energy:g} keV at" for energy in LINES_KEV]
    for column in ("source", "fragments", "piled up", "live", *lines):
        table.add_column(column, justify="right")
    for source in sources:
        row, spectrum = live.get(source), spectra.get(source)
        found = [
            "-" if spectrum is None else f"{calibration.line_energy(spectrum, energy):.1f}"
            for energy in LINES_KEV
        ]
        counts = ["-"] * 3 if row is None else [
            f"{row['fragments']:,}", f"{row['piled_up']:,}", f"{row['live_fraction']:.2%}"
        ]
        table.add_row(str(source), *counts, *found)
    console.print(table)
