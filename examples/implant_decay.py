"""Implant-decay correlation: the half-life of nuclei implanted in a pixel detector.

The physics: a radioactive ion stops in a pixel of a DSSD (an IMPLANT) and decays there later
(a DECAY). Each decay is matched to the latest implant in the same pixel within a time window
``WINDOW``; the times between them fall exponentially with the nucleus's half-life, over a
background of decays that belong to no implant (random hits). :func:`half_life` fits them
(and says why the pixel's implant rate enters the fit).

Why it is order-sensitive: "the latest implant" depends on the order in which a pixel's
implants and decays are seen. A parallel engine that reorders events matches decays to the
wrong implants; here the stage declares its order (per pixel) and evb feeds each pixel's
fragments in stream order, its state (the pixel's last implant) carried from one micro-batch
to the next.

The stages:

- ``pixel_hits`` (a sequencer): one row per implant or decay fragment, with its pixel's row
  and column (it declares the detector's map, a :class:`~orderer.stages.Histogram2D`). One
  event gives several rows, so its output is not the events' order: it declares its own,
  ``offset`` (the fragment's output offset, unique and in stream order), which the
  order-sensitive stage below sorts by;
- ``decays`` (order-sensitive, keyed by ``pixel``): each decay matched to its implant, with
  ``decay_time`` in ticks (it declares a histogram of ``decay_time`` over the window, which the
  job puts in the run's report).

Run it on a run's events::

    evb spark-job --stages examples/implant_decay.py --dt 100 ...

then read ``OUTPUT/stages/decays/run=RUN/`` and ``OUTPUT/stages/pixel_hits/run=RUN/`` and
fit: ``half_life(decays["decay_time"], implant_rate(pixel_hits))``; ``decay_histogram`` gives
the spectrum. The payload layout is the synthetic runs' (:mod:`orderer.replay.physics`); for
other data, change ``pixel_hits``. ``WINDOW``, ``PIXELS`` and ``TICK_RATE`` fit the synthetic
run's defaults (100 MHz clock, 32 x 32 pixels, 20 ms half-life: a window of ten).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from orderer.replay.physics import DECAY, IMPLANT, fragment_table
from orderer.stages import Histogram, Histogram2D, order_sensitive, sequencer

TICK_RATE = 1e8
"""Timestamp ticks a second."""
WINDOW = 20_000_000
"""Longest implant-decay time matched, ticks (0.2 s)."""
SIDE = 32
"""Pixels on a side of the detector."""
PIXELS = SIDE * SIDE
"""Pixels of the detector."""


@sequencer(
    schema=[
        ("event", pa.int64()),
        ("offset", pa.int64()),
        ("pixel", pa.int32()),
        ("kind", pa.int8()),
        ("timestamp", pa.int64()),
        ("energy", pa.float32()),
        ("row", pa.int32()),
        ("column", pa.int32()),
    ],
    order_by=("offset",),
    histograms=[
        Histogram2D(Histogram("column", SIDE, 0, SIDE), Histogram("row", SIDE, 0, SIDE))
    ],
)
def pixel_hits(events: pa.Table) -> pa.Table:
    """The implants and decays of the events, one row each, in stream order, with the pixel's
    row and column (the detector's map, a 2D histogram)."""
    rows = fragment_table(events)
    rows = rows.filter(pc.is_in(rows["kind"], pa.array([IMPLANT, DECAY], pa.int8())))
    pixel = rows["pixel"].to_numpy()
    row, column = np.divmod(pixel, SIDE)
    return rows.append_column("row", pa.array(row, pa.int32())).append_column(
        "column", pa.array(column, pa.int32())
    )


@order_sensitive(
    schema=[
        ("event", pa.int64()),
        ("offset", pa.int64()),
        ("pixel", pa.int32()),
        ("implant", pa.int64()),
        ("timestamp", pa.int64()),
        ("decay_time", pa.int64()),
    ],
    reads="pixel_hits",
    key="pixel",
    histograms=[Histogram("decay_time", 40, 0, WINDOW, label="decay time", unit="ticks")],
)
def decays(hits: pa.Table, last_implant: int | None) -> tuple[pa.Table, int | None]:
    """One pixel's implants and decays in stream order; ``last_implant``: the timestamp of the
    pixel's latest implant before them (None: none yet). Every decay within ``WINDOW`` ticks
    after the latest implant before it is matched to that implant."""
    kind = hits["kind"].to_numpy()
    timestamp = hits["timestamp"].to_numpy()
    is_implant = kind == IMPLANT
    # the latest implant at or before each row, by position (-1: none in this call)
    latest = np.maximum.accumulate(np.where(is_implant, np.arange(len(kind)), -1))
    before = -1 if last_implant is None else last_implant
    implant = np.where(latest >= 0, timestamp[np.maximum(latest, 0)], before)
    decay_time = timestamp - implant
    matched = (kind == DECAY) & (implant >= 0) & (decay_time >= 0) & (decay_time <= WINDOW)
    out = hits.filter(pa.array(matched)).select(["event", "offset", "pixel", "timestamp"])
    out = out.append_column("implant", pa.array(implant[matched]))
    out = out.append_column("decay_time", pa.array(decay_time[matched]))
    state = int(timestamp[is_implant][-1]) if is_implant.any() else last_implant
    return out, state


@dataclass(frozen=True)
class HalfLife:
    """A fit of decay times over ``[0, window]``: true decays over random ones."""

    half_life: float
    """Seconds."""
    error: float
    """Its standard error, seconds."""
    signal: float
    """True decays (expected count)."""
    background: float
    """Random decays."""


def implant_rate(hits: pa.Table, pixels: int = PIXELS, tick_rate: float = TICK_RATE) -> float:
    """Implants a second in one pixel, over ``pixel_hits``'s rows (the run's, or any stretch
    of it): what :func:`half_life` needs to know."""
    timestamp = hits["timestamp"].to_numpy()
    implants = int(pc.sum(pc.equal(hits["kind"], IMPLANT)).as_py() or 0)
    seconds = (int(timestamp.max()) - int(timestamp.min())) / tick_rate if len(timestamp) else 0
    return implants / (pixels * seconds) if seconds > 0 else 0.0


def half_life(
    decay_times: npt.ArrayLike | pa.ChunkedArray,
    implant_rate: float = 0.0,
    window: int = WINDOW,
    tick_rate: float = TICK_RATE,
) -> HalfLife:
    """The half-life by maximum likelihood, unbinned, from the ``decay_time`` of ``decays``.

    ``implant_rate`` (implants a second in one pixel, ``r``: :func:`implant_rate`) shapes
    both parts, because a decay is matched to the *latest* implant in its pixel. A true decay,
    ``l`` = ln 2 / half-life after its own implant, is measured from a later implant whenever
    one came in between, so its time is exponential with rate ``l + r``, not ``l``; a random
    decay is measured from the latest implant before it, an exponential of rate ``r`` (flat
    when ``r`` is 0). Both cut at the window, the density of the times is
    ``f(t) = s E(t; l + r) + (1 - s) E(t; r)``, ``E(t; k) = k exp(-k t) / (1 - exp(-k W))``.
    Leaving ``r`` out would fit ``l + r``: a half-life short by ``r / l`` (0.6 % for the
    synthetic run's defaults, 200 implants/s over 1,024 pixels and 20 ms).

    Expectation-maximisation finds ``l`` and ``s`` (each step: every decay's probability of
    being true; ``s`` their mean, and ``l + r`` the rate whose cut exponential has their
    weighted mean time). The error comes from the outer product of the per-decay scores (an
    estimate of the Fisher information): the statistical error, about
    ``half-life / sqrt(signal)``, wider with background and a short window.
    """
    times = np.asarray(decay_times, dtype=np.float64)
    u = times[(times >= 0) & (times <= window)] / window  # in [0, 1]: rates in 1/window
    if u.shape[0] < 2:
        raise ValueError(f"{u.shape[0]} decay time(s) in the window: nothing to fit")
    rho = implant_rate * window / tick_rate
    background = _exponential(u, rho)
    total = max(1.0 / max(float(np.mean(u)), 1e-9), rho * 1.001)  # l + r, in 1/window
    s = 0.9
    for _ in range(1_000):
        signal = s * _exponential(u, total)
        share = signal / (signal + (1.0 - s) * background)
        s_new = float(np.mean(share))
        total_new = max(_rate_of_mean(float(np.sum(share * u) / np.sum(share))), rho * 1.001)
        done = abs(total_new - total) <= 1e-10 * total and abs(s_new - s) <= 1e-10
        total, s = total_new, s_new
        if done:
            break
    g = _exponential(u, total)
    density = s * g + (1.0 - s) * background
    score = np.stack(
        [
            s * g * (1.0 / total - u - _inverse_expm1(total)) / density,
            (g - background) / density,
        ]
    )
    information = score @ score.T
    if 1.0 - s < 1e-9:  # no background: s sits on its bound, the rate alone is free
        variance = 1.0 / information[0, 0]
    else:
        variance = float(np.linalg.inv(information)[0, 0])
    rate = total - rho
    value = math.log(2) * (window / tick_rate) / rate
    return HalfLife(
        half_life=value,
        error=value * math.sqrt(variance) / rate,
        signal=s * u.shape[0],
        background=(1.0 - s) * u.shape[0],
    )


def _exponential(u: npt.NDArray[np.float64], rate: float) -> npt.NDArray[np.float64]:
    """The exponential of this rate cut to ``[0, 1]``, normalised there (flat at rate 0)."""
    if rate < 1e-12:
        return np.ones_like(u)
    return rate * np.exp(-rate * u) / -math.expm1(-rate)


def _inverse_expm1(rate: float) -> float:
    """``1 / (e^rate - 1)``, 0 where ``e^rate`` overflows."""
    return 1.0 / math.expm1(rate) if rate < 700.0 else 0.0


def _rate_of_mean(mean: float) -> float:
    """The rate whose exponential, cut to ``[0, 1]``, has this mean (``1/mu - 1/(e^mu - 1)``,
    falling from 1/2 at 0); bisection on the logarithm of the rate."""
    if mean >= 0.5:
        return 1e-6
    low, high = -14.0, 14.0
    for _ in range(80):
        middle = (low + high) / 2
        mu = math.exp(middle)
        if 1.0 / mu - _inverse_expm1(mu) > mean:
            low = middle
        else:
            high = middle
    return math.exp((low + high) / 2)


def decay_histogram(
    decay_times: npt.ArrayLike | pa.ChunkedArray, bins: int = 40, window: int = WINDOW
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Counts and bin edges (ticks) of the decay times over ``[0, window]``."""
    counts, edges = np.histogram(np.asarray(decay_times), bins=bins, range=(0, window))
    return counts, edges
