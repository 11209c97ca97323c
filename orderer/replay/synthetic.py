"""Synthetic DAQ runs: realistic inputs for ``evb demo``, the tests and the benchmarks.

A run is described by a frozen :class:`SyntheticRun` and generated with numpy, without a Python
loop per fragment, so that ten million fragments take seconds. The model follows a digitizer-based
DAQ: every source timestamps its fragments from a common clock (``tick_rate`` ticks per second,
clocks aligned), fragments occur with exponential gaps (a Poisson process of ``rate`` per second),
and a source ships a batch of ``batch_size`` fragments when the batch is full. The batch arrives at
the orderer at the time of its last fragment plus exponential network jitter, never before the
source's previous batch (one ordered connection per source). Batches of different sources
interleave in arrival order.

On top of that a run can have begin-run (type 1), synchronisation (type 3) and end-run (type 2)
barriers, a heterogeneous barrier, a source that loses its end-run barrier (an incomplete barrier),
stalls (a source that produces nothing for a while) and late backlogs (a source that stalls and
then delivers what it held, with old timestamps).

With a :class:`~orderer.replay.physics.Physics` (``physics=``), the fragments' times and payloads
come from a physics model instead of the Poisson process (coincident triggers, implants and
decays in pixels, scalers: :mod:`orderer.replay.physics`), and everything above (barriers,
stalls, batches, arrival) is laid over them the same way. Without one (the default) a run is
exactly what it was before physics existed, byte for byte.

Callers: :mod:`orderer.apps.demo`, ``tests/bench/bench_orderer.py``, and the tests. Two views of the
same run: :func:`generate_records` gives the ``evb replay`` input as columns
(:class:`~orderer.batch.ArrivalRecords`, written out by :func:`write_jsonl`), and
:func:`iter_batches` gives the per-source :class:`~orderer.batch.FragmentBatch` es a live source
would submit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch
from orderer.errors import ConfigError
from orderer.formats.json_lines import write_records
from orderer.replay.physics import PAYLOAD_SIZE, Physics, barrier_payload, source_streams

__all__ = [
    "BEGIN_RUN",
    "END_RUN",
    "SYNC",
    "SYNC_OTHER",
    "Stall",
    "SyntheticRun",
    "generate_records",
    "iter_batches",
    "write_jsonl",
]

BEGIN_RUN, END_RUN, SYNC = 1, 2, 3
"""The customary barrier types of docs/ordering.md."""
SYNC_OTHER = 4
"""The barrier type the first source sends instead of :data:`SYNC` in a heterogeneous barrier."""

_U32 = 2**32 - 1
_EMPTY_BYTES = np.zeros(0, dtype=np.uint8)


@dataclass(frozen=True)
class Stall:
    """A source that stops sending between ``start`` and ``end`` (seconds from the run start)."""

    source: int
    """Id of the source that stalls."""
    start: float
    """When the stall begins."""
    end: float
    """When the source comes back."""
    backlog: bool = False
    """False: the source produces nothing during the stall (a hung readout; its barriers in
    the gap are lost too). True: it keeps producing and holds what it produced, then delivers it
    all at ``end``: a late backlog with old timestamps."""


@dataclass(frozen=True)
class SyntheticRun:
    """What to generate. Times are seconds from the start of the run; sources are
    ``first_source .. first_source + n_sources - 1``."""

    n_sources: int = 4
    """How many sources (digitizers, crates) take part."""
    fragments_per_source: int = 10_000
    """Ordinary fragments each source produces (barriers come on top)."""
    rate: float = 1_000.0
    """Mean fragments per second of one source; the run lasts about fragments / rate."""
    tick_rate: float = 1e8
    """Timestamp ticks per second (100 MHz is a common digitizer clock)."""
    timestamp_origin: int = 1_000_000
    """Timestamp at time 0 (the begin-run barrier's timestamp)."""
    jitter: float = 0.01
    """Mean network delay of a batch, seconds (exponentially distributed); 0 for none."""
    batch_size: int = 1
    """Fragments a source ships at once; they arrive together, with one arrival time."""
    first_source: int = 1
    """Id of the first source."""
    stalls: tuple[Stall, ...] = ()
    """Stalls and late backlogs."""
    barriers: bool = True
    """Begin-run barrier (type 1) first and end-run barrier (type 2) last from every source."""
    sync_barriers: int = 1
    """Synchronisation barriers (type 3), evenly spaced through the run (needs ``barriers``)."""
    heterogeneous_barrier: bool = False
    """The first synchronisation barrier is heterogeneous: the first source sends type 4."""
    incomplete_barrier: int | None = None
    """This source leaves out the end-run barrier (its end-run item was lost), so that barrier
    goes out incomplete with the source missing."""
    end_of_source: bool = True
    """Every source says end of stream (an ``end`` record) after its last batch."""
    payload_size: int = 0
    """Payload bytes per fragment: the fragment's timestamp (little endian), repeated, so that a
    payload can be checked against its fragment."""
    seed: int = 0
    """Seed of the random generator; the same spec always gives the same run."""
    physics: Physics | None = None
    """Physics in the fragments (:mod:`orderer.replay.physics`): each source's fragments are
    then what the model makes over ``duration`` seconds (``fragments_per_source`` and ``rate``
    only set that length), each with a 16-byte physics payload (``payload_size`` 0 or 16).
    None: the Poisson process above, with the timestamp pattern for a payload."""

    def __post_init__(self) -> None:
        if self.n_sources < 1:
            raise ConfigError("n_sources", self.n_sources, "must be >= 1")
        if self.fragments_per_source < 1:
            raise ConfigError("fragments_per_source", self.fragments_per_source, "must be >= 1")
        for name in ("rate", "tick_rate"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(name, value, "must be > 0")
        if not math.isfinite(self.jitter) or self.jitter < 0:
            raise ConfigError("jitter", self.jitter, "must be >= 0")
        if self.batch_size < 1:
            raise ConfigError("batch_size", self.batch_size, "must be >= 1")
        if self.first_source < 0 or self.first_source + self.n_sources - 1 > _U32:
            raise ConfigError("first_source", self.first_source, "source ids must fit in uint32")
        if self.timestamp_origin < 0:
            raise ConfigError("timestamp_origin", self.timestamp_origin, "must be >= 0")
        if self.sync_barriers < 0:
            raise ConfigError("sync_barriers", self.sync_barriers, "must be >= 0")
        if self.payload_size < 0:
            raise ConfigError("payload_size", self.payload_size, "must be >= 0")
        if self.physics is not None:
            if self.n_sources < 2:
                raise ConfigError(
                    "n_sources", self.n_sources, "physics needs a pixel detector and a scaler"
                )
            if self.payload_size not in (0, PAYLOAD_SIZE):
                raise ConfigError(
                    "payload_size", self.payload_size, f"physics payloads are {PAYLOAD_SIZE} bytes"
                )
        ids = self.source_ids
        for stall in self.stalls:
            if stall.source not in ids:
                raise ConfigError("stalls", stall, f"source {stall.source} is not one of {ids}")
            if not 0 <= stall.start < stall.end:
                raise ConfigError("stalls", stall, "needs 0 <= start < end")
        if self.incomplete_barrier is not None and self.incomplete_barrier not in ids:
            raise ConfigError(
                "incomplete_barrier", self.incomplete_barrier, f"is not one of the sources {ids}"
            )
        last_ts = self.timestamp_origin + 2 * self.duration * self.tick_rate
        if last_ts >= 2**63:
            raise ConfigError("tick_rate", self.tick_rate, "timestamps of this run overflow")

    @property
    def source_ids(self) -> tuple[int, ...]:
        """The ids of the sources, in order."""
        return tuple(range(self.first_source, self.first_source + self.n_sources))

    @property
    def duration(self) -> float:
        """Expected length of the run in seconds (fragments / rate)."""
        return self.fragments_per_source / self.rate

    @property
    def fragment_payload_size(self) -> int:
        """Bytes of every fragment's payload: ``payload_size``, or the physics payload's."""
        return PAYLOAD_SIZE if self.physics is not None else self.payload_size


@dataclass(frozen=True)
class _SourceStream:
    """One source's fragments in its own (timestamp = production) order, cut into batches."""

    source: int
    timestamp: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    bounds: npt.NDArray[np.int64]
    """Batch k holds fragments ``bounds[k]:bounds[k + 1]``."""
    arrival: npt.NDArray[np.float64]
    """Arrival time of each batch, non-decreasing."""
    payload: npt.NDArray[np.uint8]
    """Every fragment's payload, ``fragment_payload_size`` bytes each, one after the other."""


def _payload_pattern(timestamp: npt.NDArray[np.uint64], size: int) -> npt.NDArray[np.uint8]:
    """Payload bytes of consecutive fragments: each timestamp's 8 bytes, repeated to ``size``."""
    if size == 0 or timestamp.shape[0] == 0:
        return _EMPTY_BYTES
    raw = timestamp.astype("<u8").view(np.uint8).reshape(-1, 8)
    return np.ascontiguousarray(np.tile(raw, (1, -(-size // 8)))[:, :size]).reshape(-1)


def _streams(spec: SyntheticRun) -> list[_SourceStream]:
    """Generate every source's stream. Vectorised per source; the only Python loops are over
    sources, barriers and stalls."""
    rng = np.random.default_rng(spec.seed)
    per_source = _times(spec, rng)
    end_time = max((float(t[-1]) for t, _ in per_source if t.shape[0]), default=0.0)
    end_time += 1.0 / spec.rate
    marks: list[float] = []
    types: list[int] = []
    if spec.barriers:
        marks = [0.0]
        marks += [end_time * (k + 1) / (spec.sync_barriers + 1) for k in range(spec.sync_barriers)]
        marks.append(end_time)
        types = [BEGIN_RUN] + [SYNC] * spec.sync_barriers + [END_RUN]
    streams = []
    for i, source in enumerate(spec.source_ids):
        t, physics = per_source[i]
        barrier = np.zeros(t.shape[0], dtype=np.uint32)
        if marks:
            own_marks, own_types = list(marks), list(types)
            if spec.heterogeneous_barrier and i == 0 and spec.sync_barriers:
                own_types[1] = SYNC_OTHER
            if spec.incomplete_barrier == source:
                del own_marks[-1], own_types[-1]
            # a barrier goes before every fragment produced at or after its time
            where = np.searchsorted(t, own_marks, side="left")
            t = np.insert(t, where, own_marks)
            barrier = np.insert(barrier, where, np.asarray(own_types, dtype=np.uint32))
            if physics is not None:
                physics = np.insert(physics, where, barrier_payload(len(own_marks)))
        stalls = [s for s in spec.stalls if s.source == source]
        for stall in stalls:
            if not stall.backlog:
                keep = (t < stall.start) | (t >= stall.end)
                t, barrier = t[keep], barrier[keep]
                physics = None if physics is None else physics[keep]
        m = t.shape[0]
        timestamp = np.floor(t * spec.tick_rate).astype(np.uint64)
        timestamp += np.uint64(spec.timestamp_origin)
        payload = (
            _payload_pattern(timestamp, spec.payload_size)
            if physics is None
            else physics.view(np.uint8).reshape(-1)
        )
        bounds = np.minimum(np.arange(0, m + spec.batch_size, spec.batch_size), m)
        n_batches = bounds.shape[0] - 1
        last = t[bounds[1:] - 1] if n_batches else t[:0]
        delay = rng.exponential(spec.jitter, n_batches) if spec.jitter > 0 else np.zeros(n_batches)
        arrival = last + delay
        for stall in stalls:
            if stall.backlog:
                held = (last >= stall.start) & (last < stall.end)
                arrival = np.where(held, stall.end + delay, arrival)
        # microsecond arrival times read well in JSON; rounding keeps them non-decreasing
        arrival = np.maximum.accumulate(np.round(arrival, 6)) if n_batches else arrival
        streams.append(
            _SourceStream(source, timestamp, barrier, bounds.astype(np.int64), arrival, payload)
        )
    return streams


def _times(
    spec: SyntheticRun, rng: np.random.Generator
) -> list[tuple[npt.NDArray[np.float64], npt.NDArray[np.void] | None]]:
    """Every source's fragment times (seconds, ascending) and, with physics, their physics
    payloads. Without physics the draws are the Poisson process's, as they always were."""
    if spec.physics is None:
        times = rng.exponential(1.0 / spec.rate, size=(spec.n_sources, spec.fragments_per_source))
        np.cumsum(times, axis=1, out=times)
        return [(times[i], None) for i in range(spec.n_sources)]
    streams = source_streams(spec.physics, rng, spec.n_sources, spec.duration, spec.tick_rate)
    return [(t, payload) for t, payload in streams]


def generate_records(spec: SyntheticRun) -> ArrivalRecords:
    """The run as ``evb replay`` input: one row per fragment (and ``end`` record), sorted by
    arrival ``t``. Rows with equal ``t`` keep source order, then each source's own order."""
    streams = _streams(spec)
    size = spec.fragment_payload_size
    kinds, times, sources, values, barriers, payloads = [], [], [], [], [], []
    for s in streams:
        m = s.timestamp.shape[0]
        if m == 0:
            continue
        counts = np.diff(s.bounds)
        kinds.append(np.full(m, ArrivalKind.FRAGMENT, dtype=np.uint8))
        times.append(np.repeat(s.arrival, counts))
        sources.append(np.full(m, s.source, dtype=np.uint32))
        values.append(s.timestamp)
        barriers.append(s.barrier)
        payloads.append(s.payload.reshape(m, size))
        if spec.end_of_source:
            kinds.append(np.array([ArrivalKind.END_OF_SOURCE], dtype=np.uint8))
            times.append(s.arrival[-1:])
            sources.append(np.array([s.source], dtype=np.uint32))
            values.append(np.zeros(1, dtype=np.uint64))
            barriers.append(np.zeros(1, dtype=np.uint32))
            payloads.append(np.zeros((0, size), dtype=np.uint8))
    kind = np.concatenate(kinds)
    row = np.cumsum(kind == ArrivalKind.FRAGMENT) - 1  # a fragment's row in `payloads`
    t = np.concatenate(times)
    source = np.concatenate(sources)
    order = np.lexsort((source, t))  # stable: equal (t, source) keep the stream order
    kind, t, source = kind[order], t[order], source[order]
    value = np.concatenate(values)[order]
    barrier = np.concatenate(barriers)[order]
    is_fragment = kind == ArrivalKind.FRAGMENT
    lengths = np.where(is_fragment, size, 0).astype(np.uint64)
    offsets = np.zeros(len(kind) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    payload = np.concatenate(payloads)[row[order][is_fragment]].reshape(-1)
    return ArrivalRecords(
        kind=np.ascontiguousarray(kind),
        t=np.ascontiguousarray(t),
        source=np.ascontiguousarray(source),
        value=np.ascontiguousarray(value),
        barrier=np.ascontiguousarray(barrier),
        payload_offsets=offsets,
        payload=payload,
    )


def iter_batches(spec: SyntheticRun) -> Iterator[tuple[float, FragmentBatch]]:
    """``(arrival time, batch)`` per source batch, in arrival order (ties: source id, then the
    source's own order): what the sources would submit live. End records are not included; the
    caller ends the run. Batches are views of arrays generated up front, so iterating is cheap."""
    streams = _streams(spec)
    arrival = np.concatenate([s.arrival for s in streams])
    which = np.concatenate([np.full(s.arrival.shape[0], i) for i, s in enumerate(streams)])
    index = np.concatenate([np.arange(s.arrival.shape[0]) for s in streams])
    size = spec.fragment_payload_size
    payloads = [s.payload for s in streams]
    zeros = np.zeros(spec.batch_size + 1, dtype=np.uint64)
    steps = np.arange(spec.batch_size + 1, dtype=np.uint64) * np.uint64(size)
    order = np.lexsort((index, which, arrival))
    for t, w, b in zip(
        arrival[order].tolist(), which[order].tolist(), index[order].tolist(), strict=True
    ):
        s = streams[w]
        start, stop = int(s.bounds[b]), int(s.bounds[b + 1])
        n = stop - start
        yield t, FragmentBatch(
            source=np.full(n, s.source, dtype=np.uint32),
            timestamp=s.timestamp[start:stop],
            barrier=s.barrier[start:stop],
            payload_offsets=steps[: n + 1] if size else zeros[: n + 1],
            payload=payloads[w][start * size : stop * size] if size else _EMPTY_BYTES,
        )


def write_jsonl(records: ArrivalRecords, path: Path | str) -> None:
    """Write records as an ``evb replay`` input file (:func:`orderer.replay.write_records`)."""
    with Path(path).open("w", encoding="utf-8") as out:
        write_records(records, out)
