"""Physics in synthetic runs: coincident triggers, implants and decays in pixels, scalers.

Why: the analysis stages of :mod:`orderer.stages` need runs whose answers are known. Without
physics a synthetic source's fragments are a Poisson process with a timestamp pattern for a
payload, so the Δt spectrum between sources is flat and there is nothing to correlate. With a
:class:`Physics` on :class:`~orderer.replay.synthetic.SyntheticRun` (``physics=``), every
source's fragments come from the model below over the run's ``duration`` seconds, each with a
fixed-size payload, and the examples (``examples/``) find what was put in: the coincidence peak
that chooses the glom window ``dt``, the half-life, the dead time, the scaler sums, the gamma
lines after calibration.

**Roles of the sources** (in the run's source order, ``n_sources`` >= 2): the first source is a
pixel detector (a DSSD, ``pixels`` = rows x columns), the last is a scaler module, every source
but the scaler sees the triggers (so coincidences between sources need three or more).

**The model** (times in seconds of the tick clock, ``tick_rate`` ticks a second):

- *triggers* (``trigger_rate``): a trigger at time T gives each trigger source, with probability
  ``trigger_efficiency``, a hit (kind HIT) at T plus a whole number of ticks drawn uniformly
  from 0..``trigger_jitter``, so that timestamps of one trigger lie within a few ticks of each
  other: the Δt spectrum between two sources is a triangle of half-width ``trigger_jitter``
  over the flat background below;
- *background* (``background_rate`` per trigger source): uncorrelated hits at random times;
- *implants* (``implant_rate``): an ion stopping in a random pixel is a trigger too: the pixel
  detector records an IMPLANT (always), the other trigger sources a hit each (with the trigger
  efficiency); each implant decays in the same pixel after an exponential time of half-life
  ``half_life``, recorded (kind DECAY) with probability ``decay_efficiency``;
- *background decays* (``background_decay_rate``): DECAYs in random pixels at random times,
  correlated with nothing;
- *scalers*: every ``scaler_period`` from time 0 the scaler source reads its channels, one
  fragment each at the same timestamp: channel 0 (:data:`TRIGGER_CHANNEL`) counts the
  triggers (implants included) since time 0, channel 1 (:data:`CLOCK_CHANNEL`) a clock of
  ``scaler_clock`` Hz. A count is a free-running 32-bit counter that starts at
  ``scaler_start`` (near the top, so that it wraps early in the run): the increment between
  two reads is their difference modulo 2**32, which only a reader in time order can take.

Energies (keV): a hit's comes from a gamma spectrum (:data:`GAMMA_LINES_KEV`, 60 % of hits,
Gaussian of ``resolution`` keV sigma, over a flat continuum of 30-1500 keV), an implant's is
about 40 MeV, a decay's flat in 100-3000 keV. A source's ADC converts energy to channels with
its own calibration (``gains``, ``offsets``: ``energy = gain * adc + offset``, cycled over the
source indices), rounded to the nearest channel; the payload keeps both (the raw ``adc`` for a
calibration to work on, the true ``energy`` for a test to check it against).

**The payload** of every fragment, :data:`PAYLOAD` (16 bytes, little endian, no padding)::

    byte  0  kind    uint8    HIT 0, IMPLANT 1, DECAY 2, SCALER 3, BARRIER 4
    byte  1  spare   uint8    0
    bytes 2  pixel   uint16   pixel (row * columns + column) in the pixel detector; a hit's
                              channel in another source; a scaler's channel
    bytes 4  adc     uint32   raw amplitude, ADC channels (0 for a scaler or a barrier)
    bytes 8  energy  float32  true energy deposited, keV (0 for a scaler or a barrier)
    bytes 12 count   uint32   a scaler's counter (0 for anything else)

A barrier fragment carries kind BARRIER, all else zero. :func:`decode` reads payloads (an Arrow
binary column, or a list of bytes) into a numpy structured array of :data:`PAYLOAD`, with no
Python call per fragment; :func:`fragment_table` turns built events (``EVENT_SCHEMA`` rows of
:mod:`orderer.building.glom`) into one row per fragment with its payload decoded, what most
stages start from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from orderer.errors import ConfigError

__all__ = [
    "BARRIER",
    "CLOCK_CHANNEL",
    "DECAY",
    "FRAGMENT_COLUMNS",
    "GAMMA_LINES_KEV",
    "HIT",
    "IMPLANT",
    "PAYLOAD",
    "PAYLOAD_SIZE",
    "SCALER",
    "TRIGGER_CHANNEL",
    "Physics",
    "barrier_payload",
    "decode",
    "fragment_table",
    "source_streams",
]

HIT, IMPLANT, DECAY, SCALER, BARRIER = 0, 1, 2, 3, 4
"""The payload's ``kind``."""
TRIGGER_CHANNEL, CLOCK_CHANNEL = 0, 1
"""The scaler's channels (the payload's ``pixel`` of a SCALER)."""
GAMMA_LINES_KEV = (661.7, 1173.2, 1332.5)
"""The lines of the hits' spectrum (137Cs, 60Co), each a fifth of the hits."""

PAYLOAD = np.dtype(
    [
        ("kind", "u1"),
        ("spare", "u1"),
        ("pixel", "<u2"),
        ("adc", "<u4"),
        ("energy", "<f4"),
        ("count", "<u4"),
    ]
)
"""Every fragment's payload (the module docstring gives the layout)."""
PAYLOAD_SIZE = PAYLOAD.itemsize
assert PAYLOAD_SIZE == 16

_U32 = 2**32
_CONTINUUM_KEV = (30.0, 1500.0)
_IMPLANT_KEV = (40_000.0, 2_000.0)  # mean, sigma
_DECAY_KEV = (100.0, 3_000.0)


@dataclass(frozen=True)
class Physics:
    """What happens in a synthetic run (the module docstring describes the model). Rates are
    per second, times in seconds of the tick clock."""

    trigger_rate: float = 1_000.0
    """Triggers a second (implants come on top)."""
    trigger_jitter: int = 20
    """A trigger's fragments lie 0..trigger_jitter ticks after it."""
    trigger_efficiency: float = 0.9
    """Probability that a trigger source records a given trigger."""
    background_rate: float = 200.0
    """Uncorrelated hits a second, in each trigger source."""
    channels: int = 16
    """Channels of a trigger source other than the pixel detector (a hit's ``pixel``)."""
    pixels: tuple[int, int] = (32, 32)
    """Rows and columns of the pixel detector."""
    implant_rate: float = 200.0
    """Implants a second, over the whole pixel detector."""
    half_life: float = 0.02
    """Of the implanted nuclei, seconds."""
    decay_efficiency: float = 1.0
    """Probability that an implant's decay is recorded."""
    background_decay_rate: float = 100.0
    """Uncorrelated decays a second, over the whole pixel detector."""
    scaler_period: float = 0.1
    """Seconds between two reads of the scalers."""
    scaler_clock: float = 1e6
    """Frequency the clock channel counts, Hz."""
    scaler_start: int = _U32 - 100_000
    """Every counter's value at time 0."""
    gains: tuple[float, ...] = (0.5, 0.4, 0.6, 0.45)
    """keV per ADC channel of source index i: ``gains[i % len(gains)]``."""
    offsets: tuple[float, ...] = (2.0, -1.5, 0.0, 3.0)
    """keV at ADC channel 0 of source index i: ``offsets[i % len(offsets)]``."""
    resolution: float = 2.0
    """Sigma of the gamma lines, keV."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"physics.{f.name}", value, "must be finite")
        for name in ("trigger_rate", "background_rate", "implant_rate", "background_decay_rate",
                     "scaler_clock", "resolution"):
            if getattr(self, name) < 0:
                raise ConfigError(f"physics.{name}", getattr(self, name), "must be >= 0")
        for name in ("half_life", "scaler_period"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"physics.{name}", getattr(self, name), "must be > 0")
        for name in ("trigger_efficiency", "decay_efficiency"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"physics.{name}", getattr(self, name), "must be in [0, 1]")
        if not isinstance(self.trigger_jitter, int) or self.trigger_jitter < 0:
            raise ConfigError("physics.trigger_jitter", self.trigger_jitter, "must be ticks >= 0")
        if not 1 <= self.channels <= 2**16:
            raise ConfigError("physics.channels", self.channels, "must be in 1..65536")
        rows, columns = self.pixels
        if rows < 1 or columns < 1 or rows * columns > 2**16:
            raise ConfigError("physics.pixels", self.pixels, "must be >= 1 each, 65536 in all")
        if not 0 <= self.scaler_start < _U32:
            raise ConfigError("physics.scaler_start", self.scaler_start, "must fit in uint32")
        if not self.gains or len(self.gains) != len(self.offsets) or min(self.gains) <= 0:
            raise ConfigError(
                "physics.gains", self.gains, "need one gain > 0 per offset, at least one"
            )

    @property
    def n_pixels(self) -> int:
        """Pixels of the pixel detector."""
        return self.pixels[0] * self.pixels[1]

    def calibration(self, index: int) -> tuple[float, float]:
        """``(gain, offset)`` of the source at ``index`` in the run's source order."""
        return self.gains[index % len(self.gains)], self.offsets[index % len(self.offsets)]


@dataclass
class _Parts:
    """One source's fragments of each process, appended as they are drawn."""

    t: list[npt.NDArray[np.float64]]
    kind: list[npt.NDArray[np.uint8]]
    pixel: list[npt.NDArray[np.int64]]
    energy: list[npt.NDArray[np.float64]]
    count: list[npt.NDArray[np.int64]]

    def add(self, t: npt.NDArray[np.float64], kind: int, pixel: npt.NDArray[np.int64],
            energy: npt.NDArray[np.float64] | None = None,
            count: npt.NDArray[np.int64] | None = None) -> None:
        n = t.shape[0]
        self.t.append(t)
        self.kind.append(np.full(n, kind, dtype=np.uint8))
        self.pixel.append(pixel)
        self.energy.append(np.zeros(n) if energy is None else energy)
        self.count.append(np.zeros(n, dtype=np.int64) if count is None else count)


def source_streams(
    physics: Physics,
    rng: np.random.Generator,
    n_sources: int,
    duration: float,
    tick_rate: float,
) -> list[tuple[npt.NDArray[np.float64], npt.NDArray[np.void]]]:
    """Every source's fragments over ``[0, duration)`` seconds: ``(times, payloads)`` per
    source in the run's order, times ascending (seconds, ties in the order drawn), payloads
    of :data:`PAYLOAD`. Vectorised per process; the only Python loops are over sources."""
    if n_sources < 2:
        raise ConfigError("n_sources", n_sources, "physics needs a pixel detector and a scaler")
    triggered = n_sources - 1  # the scaler is the last
    parts = [_Parts([], [], [], [], []) for _ in range(n_sources)]
    tick = 1.0 / tick_rate

    def poisson_times(rate: float) -> npt.NDArray[np.float64]:
        # sorted uniforms as the order statistics of exponential gaps: O(n), and each process
        # comes sorted, so that merging a source's processes is a merge of sorted runs
        gaps = np.cumsum(rng.exponential(1.0, rng.poisson(rate * duration) + 1))
        return gaps[:-1] * (duration / gaps[-1])

    def pixels(n: int) -> npt.NDArray[np.int64]:
        return rng.integers(0, physics.n_pixels, n)

    def channels(index: int, n: int) -> npt.NDArray[np.int64]:
        return pixels(n) if index == 0 else rng.integers(0, physics.channels, n)

    def jittered(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return t + rng.integers(0, physics.trigger_jitter + 1, t.shape[0]) * tick

    triggers = poisson_times(physics.trigger_rate)
    implants = poisson_times(physics.implant_rate)
    implant_pixel = pixels(implants.shape[0])
    for index in range(triggered):
        for t, is_implant in ((triggers, False), (implants, True)):
            if is_implant and index == 0:  # the pixel detector records every implant
                parts[0].add(jittered(t), IMPLANT, implant_pixel,
                             rng.normal(_IMPLANT_KEV[0], _IMPLANT_KEV[1], size=len(t)))
                continue
            seen = t[rng.random(t.shape[0]) < physics.trigger_efficiency]
            parts[index].add(jittered(seen), HIT, channels(index, seen.shape[0]),
                             _gamma_energies(rng, seen.shape[0], physics.resolution))
        noise = poisson_times(physics.background_rate)
        parts[index].add(noise, HIT, channels(index, noise.shape[0]),
                         _gamma_energies(rng, noise.shape[0], physics.resolution))

    tau = physics.half_life / math.log(2)
    decays = implants + rng.exponential(tau, implants.shape[0])
    kept = (decays < duration) & (rng.random(implants.shape[0]) < physics.decay_efficiency)
    random_decays = poisson_times(physics.background_decay_rate)
    by_time = np.argsort(decays[kept], kind="stable")
    decay_t = np.concatenate([decays[kept][by_time], random_decays])
    decay_pixel = np.concatenate([implant_pixel[kept][by_time], pixels(random_decays.shape[0])])
    parts[0].add(decay_t, DECAY, decay_pixel, rng.uniform(*_DECAY_KEV, size=len(decay_t)))

    reads = np.arange(0.0, duration, physics.scaler_period)
    every_trigger = np.sort(np.concatenate([triggers, implants]))
    counted = {
        TRIGGER_CHANNEL: np.searchsorted(every_trigger, reads, side="left"),
        CLOCK_CHANNEL: np.floor(reads * physics.scaler_clock).astype(np.int64),
    }
    for channel, value in counted.items():
        counter = (physics.scaler_start + value) % _U32
        parts[-1].add(reads, SCALER, np.full(reads.shape[0], channel), count=counter)

    return [_assemble(p, physics, index) for index, p in enumerate(parts)]


def _gamma_energies(rng: np.random.Generator, n: int, sigma: float) -> npt.NDArray[np.float64]:
    """Hits' energies: each line a fifth of them, the rest a flat continuum."""
    which = rng.integers(0, len(GAMMA_LINES_KEV) + 2, n)  # 0..2 a line, 3..4 the continuum
    lines = np.asarray((*GAMMA_LINES_KEV, 0.0, 0.0))[which] + rng.normal(0.0, sigma, n)
    return np.where(which < len(GAMMA_LINES_KEV), lines, rng.uniform(*_CONTINUUM_KEV, size=n))


def _assemble(
    parts: _Parts, physics: Physics, index: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.void]]:
    """One source's processes merged in time order, with their payloads."""
    t = np.concatenate(parts.t)
    order = np.argsort(t, kind="stable")
    kind = np.concatenate(parts.kind)[order]
    energy = np.concatenate(parts.energy)[order]
    gain, offset = physics.calibration(index)
    adc = np.clip(np.rint((energy - offset) / gain), 0, _U32 - 1)
    payload = np.zeros(t.shape[0], dtype=PAYLOAD)
    payload["kind"] = kind
    payload["pixel"] = np.concatenate(parts.pixel)[order]
    payload["adc"] = np.where(kind == SCALER, 0, adc)
    payload["energy"] = energy
    payload["count"] = np.concatenate(parts.count)[order]
    return t[order], payload


def barrier_payload(n: int) -> npt.NDArray[np.void]:
    """The payloads of ``n`` barrier fragments."""
    payload = np.zeros(n, dtype=PAYLOAD)
    payload["kind"] = BARRIER
    return payload


# ---------------------------------------------------------------- reading payloads back


def decode(payloads: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> npt.NDArray[np.void]:
    """Payloads as a structured array of :data:`PAYLOAD` (read-only, over the Arrow buffer
    where it can be: no copy, no Python call per payload). A payload that is not
    :data:`PAYLOAD_SIZE` bytes, or a null, raises ``ValueError``."""
    if isinstance(payloads, pa.ChunkedArray):
        chunks = [decode(chunk) for chunk in payloads.chunks]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=PAYLOAD)
    if not isinstance(payloads, pa.Array):
        payloads = pa.array(payloads, type=pa.binary())
    if payloads.null_count:
        raise ValueError(f"{payloads.null_count} payload(s) are null")
    width: type[np.signedinteger[Any]] = np.int32
    if not pa.types.is_binary(payloads.type):
        payloads, width = payloads.cast(pa.large_binary()), np.int64
    n = len(payloads)
    if n == 0:
        return np.zeros(0, dtype=PAYLOAD)
    _, offsets_buffer, data = payloads.buffers()
    assert offsets_buffer is not None and data is not None
    itemsize = np.dtype(width).itemsize
    offsets = np.frombuffer(offsets_buffer, dtype=width, count=n + 1,
                            offset=payloads.offset * itemsize)
    sizes = np.diff(offsets)
    if np.any(sizes != PAYLOAD_SIZE):
        wrong = int(np.flatnonzero(sizes != PAYLOAD_SIZE)[0])
        raise ValueError(
            f"payload {wrong} is {int(sizes[wrong])} bytes, not the {PAYLOAD_SIZE} of a physics"
            " payload"
        )
    return np.frombuffer(data, dtype=PAYLOAD, count=n, offset=int(offsets[0]))


FRAGMENT_COLUMNS = pa.schema(
    [
        ("event", pa.int64()),
        ("offset", pa.int64()),
        ("source", pa.int64()),
        ("timestamp", pa.int64()),
        ("late", pa.bool_()),
        ("kind", pa.int8()),
        ("pixel", pa.int32()),
        ("adc", pa.int64()),
        ("energy", pa.float32()),
        ("count", pa.int64()),
    ]
)
"""What :func:`fragment_table` returns: the payload's fields widened to signed types, which
Spark has (it has no unsigned ones), so that a stage can return them as they are."""


_WIDENED = {"kind": np.int8, "pixel": np.int32, "adc": np.int64, "energy": np.float32,
            "count": np.int64}


def fragment_table(events: pa.Table | pa.RecordBatch) -> pa.Table:
    """One row per fragment of the built ``events`` (barrier rows left out: they carry no
    physics), in the events' order, with its event, its own columns and its payload decoded:
    :data:`FRAGMENT_COLUMNS`. Vectorised: Arrow's list flattening and :func:`decode`."""
    if isinstance(events, pa.RecordBatch):
        events = pa.Table.from_batches([events])
    events = events.filter(pc.equal(events.column("barrier"), 0))
    lists = events.column("fragments").combine_chunks()
    parents = pc.list_parent_indices(lists)
    inner = lists.flatten()
    children = dict(zip([f.name for f in inner.type], inner.flatten(), strict=True))
    payload = decode(children["payload"])
    columns = {
        "event": events.column("event").combine_chunks().take(parents),
        **{name: children[name] for name in ("offset", "source", "timestamp", "late")},
        **{name: pa.array(payload[name].astype(dtype)) for name, dtype in _WIDENED.items()},
    }
    return pa.table(columns, schema=FRAGMENT_COLUMNS)
