"""``evb replay --orderers N --slice-ticks T``: a recorded run ordered as N time-sliced orderers
would order it (docs/scale-out.md), beside the one orderer of a plain replay.

Why a simulation first: one run across several orderers changes what the ordering contract
(docs/ordering.md) promises in ways that depend on the run (how far its sources lag one another,
how long they stall, where its barriers fall). Replaying a recorded run both ways, with the same
arrival times, counts those differences exactly before any service, Spark source or operator
code is written.

The rules of docs/scale-out.md, each written once:

- **routing** (:class:`Router`): what every source sends to which orderer. An ordinary
  fragment goes to the owner of its slice, ``floor(ts / T) mod N``; barriers, watermarks, ends
  of source and operators' marks go to every orderer; a source entering a new slice tells every
  other orderer so with a watermark at the slice's start; a source silent for
  ``source_timeout`` is ended at every orderer (the release). With one orderer the router sends
  every record unchanged, so ``N = 1`` is the plain replay.
- **ordering**: N real :class:`~orderer.api.Orderer` instances, each fed what the router sends
  it, walked as ``evb replay`` walks any input (:class:`~orderer.replay.run_walk.ArrivalWalker`).
- **merging and building** (:mod:`orderer.replay.sliced_merge`): the orderers' outputs merged
  piece by piece in slice order, events built per slice, and the comparison with one orderer.

What a run finds is typed (:class:`SlicedRun`, :class:`SettingResult`, :class:`RoutingCounts`
and :mod:`~orderer.replay.sliced_merge`'s differences): the command line draws its table from the
fields (:mod:`orderer.apps.sliced_table`), and :meth:`SlicedRun.to_json` is ``--stats``, the layout
docs/scale-out.md documents.

Every input fragment is numbered and its number replaces its payload (8 bytes, little endian):
the orderers carry payloads through untouched, so the number names the same fragment in every
output, which is what matching one output against another needs (timestamps alone are not
unique).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch
from orderer.clock import SimulatedClock
from orderer.config import OrdererConfig
from orderer.replay.run_walk import ArrivalWalker
from orderer.replay.sliced_merge import Differences, Output, OutputSummary, compare, merge
from orderer.replay.slicing import Slicing, crossings

__all__ = [
    "OutputTaker",
    "Router",
    "RoutingCounts",
    "SettingResult",
    "SlicedRun",
    "numbered",
    "replay_sliced",
]

_FRAGMENT, _WATERMARK, _END = ArrivalKind.FRAGMENT, ArrivalKind.WATERMARK, ArrivalKind.END_OF_SOURCE
_ID_BYTES = 8


def numbered(records: ArrivalRecords, first: int) -> ArrivalRecords:
    """``records`` with every fragment's payload replaced by its number (``first``, ``first +
    1``, ... in row order, 8 bytes little endian); other records keep theirs (a configuration
    change's JSON)."""
    is_fragment = records.kind == _FRAGMENT
    ids = np.arange(first, first + int(is_fragment.sum()), dtype="<u8").view(np.uint8)
    old = np.diff(records.payload_offsets)
    lengths = np.where(is_fragment, np.uint64(_ID_BYTES), old)
    offsets = np.zeros(len(records) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    if not old[~is_fragment].any():  # only fragments have a payload: the numbers, back to back
        payload = ids
    else:
        combined = np.concatenate([ids, records.payload])
        rank = np.cumsum(is_fragment) - 1
        start = np.where(
            is_fragment, rank.astype(np.uint64) * np.uint64(_ID_BYTES),
            np.uint64(ids.size) + records.payload_offsets[:-1],
        )
        payload = combined[_byte_index(start, offsets, lengths)]
    return ArrivalRecords(
        records.kind, records.t, records.source, records.value, records.barrier, offsets, payload
    )


def _byte_index(
    start: npt.NDArray[np.uint64], offsets: npt.NDArray[np.uint64], lengths: npt.NDArray[np.uint64]
) -> npt.NDArray[np.int64]:
    """Where each byte of rows laid out at ``offsets`` comes from, rows starting at ``start``."""
    total = int(offsets[-1])
    shift = start.astype(np.int64) - offsets[:-1].astype(np.int64)
    return np.repeat(shift, lengths.astype(np.int64)) + np.arange(total, dtype=np.int64)


def _rows(records: ArrivalRecords, index: npt.NDArray[np.int64]) -> ArrivalRecords:
    """Rows ``index`` of ``records``, payloads and all."""
    lengths = np.diff(records.payload_offsets)[index]
    offsets = np.zeros(index.size + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    payload = records.payload[_byte_index(records.payload_offsets[index], offsets, lengths)]
    return ArrivalRecords(
        records.kind[index], records.times()[index], records.source[index],
        records.value[index], records.barrier[index], offsets, payload,
    )


@dataclass(slots=True)
class _SourceState:
    """What the router remembers of a source between chunks."""

    top_slice: int | None = None
    """The highest slice it has sent an ordinary fragment of."""
    last_t: float | None = None
    """When its last fragment, watermark or end arrived."""
    ended: bool = False
    """Ended at the orderers: it said end of stream, or was released, with no fragment since."""


@dataclass(frozen=True, slots=True)
class RoutingCounts:
    """What a router sent over a run (``routing`` in ``--stats``)."""

    watermarks: int
    """Crossing watermarks sent, every copy counted."""
    releases: int
    """Releases sent, every copy counted."""
    routed: int
    """Records routed in all, added ones included, every copy counted."""
    fragments: tuple[int, ...]
    """The ordinary fragments each orderer got: its load."""

    def to_json(self) -> dict[str, Any]:
        """The ``--stats`` layout (the loads a list, as they always were written)."""
        return {**dataclasses.asdict(self), "fragments": list(self.fragments)}


@dataclass(slots=True)
class _Counting:
    """:class:`RoutingCounts` as the router adds to them, chunk by chunk (mutable, so it stays
    private: readers get the frozen counts)."""

    watermarks: int
    releases: int
    routed: int
    fragments: list[int]


@dataclass(slots=True)
class _Extra:
    """Records the router adds: crossing watermarks (to all but ``skip``) and releases."""

    key: list[npt.NDArray[np.int64]] = field(default_factory=list)
    t: list[npt.NDArray[np.float64]] = field(default_factory=list)
    source: list[npt.NDArray[np.uint32]] = field(default_factory=list)
    kind: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    value: list[npt.NDArray[np.uint64]] = field(default_factory=list)
    skip: list[npt.NDArray[np.int64]] = field(default_factory=list)


class Router:
    """The routing rule of docs/scale-out.md, applied to a recorded run chunk by chunk.

    Each chunk's records go out as N record streams, one per orderer, every record at its own
    arrival time, in input order. What a record's position becomes: row ``i`` of the chunk has
    key ``3 i``; a crossing watermark that fragment ``i`` causes, ``3 i + 1`` (right after it, at
    its time); a release due before row ``i`` (its time is after the release's), ``3 i - 1``.
    The release follows the run's starting ``source_timeout``; a live change of it recorded in
    an arrival log reaches the orderers (they are walked as any replay) but not the router.
    """

    __slots__ = ("_counting", "_sources", "slicing", "source_timeout")

    def __init__(self, slicing: Slicing, source_timeout: float | None) -> None:
        self.slicing = slicing
        self.source_timeout = source_timeout
        self._sources: dict[int, _SourceState] = {}
        self._counting = _Counting(0, 0, 0, [0] * slicing.orderers)

    @property
    def counts(self) -> RoutingCounts:
        """What the router has sent so far (a snapshot: a reader cannot change the count)."""
        c = self._counting
        return RoutingCounts(c.watermarks, c.releases, c.routed, tuple(c.fragments))

    def route(self, records: ArrivalRecords) -> list[ArrivalRecords]:
        """The chunk's records as each orderer receives them."""
        n_orderers = self.slicing.orderers
        kind, source, t = records.kind, records.source, records.times()
        ordinary = (kind == _FRAGMENT) & (records.barrier == 0)
        if n_orderers == 1:  # nothing to tell another orderer: the plain replay
            self._counting.routed += len(records)
            self._counting.fragments[0] += int(ordinary.sum())
            return [records]
        owner = np.where(ordinary, self.slicing.owner(records.value), -1)
        load = np.bincount(owner[ordinary], minlength=n_orderers)
        self._counting.fragments = [
            a + int(b) for a, b in zip(self._counting.fragments, load, strict=True)
        ]
        extra = _Extra()
        arrivals = np.flatnonzero(kind <= _END)  # fragments, watermarks, ends: from the source
        order = arrivals[np.argsort(source[arrivals], kind="stable")]
        groups = np.flatnonzero(np.diff(source[order].astype(np.int64))) + 1
        seen = set()
        for rows in np.split(order, groups) if order.size else []:
            sid = int(source[rows[0]])
            seen.add(sid)
            state = self._sources.setdefault(sid, _SourceState())
            self._cross(state, sid, rows[ordinary[rows]], records, owner, extra)
            self._release(state, sid, rows, kind, t, extra)
        for sid, state in self._sources.items():
            if sid not in seen:
                self._release(state, sid, np.zeros(0, np.int64), kind, t, extra)
        return [self._for(o, records, owner, extra) for o in range(n_orderers)]

    def _cross(
        self, state: _SourceState, sid: int, rows: npt.NDArray[np.int64],
        records: ArrivalRecords, owner: npt.NDArray[np.int64], extra: _Extra,
    ) -> None:
        """A watermark at the start of every slice the source enters, for the other orderers."""
        if not rows.size:
            return
        slices = self.slicing.slice_of(records.value[rows])
        crossing, state.top_slice = crossings(state.top_slice, slices)
        at = rows[crossing]
        if at.size:
            extra.key.append(3 * at + 1)
            extra.t.append(records.times()[at])
            extra.source.append(np.full(at.size, sid, dtype=np.uint32))
            extra.kind.append(np.full(at.size, _WATERMARK, dtype=np.uint8))
            extra.value.append(slices[crossing] * np.uint64(self.slicing.slice_ticks))
            extra.skip.append(owner[at])

    def _release(
        self, state: _SourceState, sid: int, rows: npt.NDArray[np.int64],
        kind: npt.NDArray[np.uint8], t: npt.NDArray[np.float64], extra: _Extra,
    ) -> None:
        """An end of source at every orderer once the source has been silent (no fragment,
        watermark or end) for ``source_timeout`` while not ended: the release of a dead source.
        Due at ``last + source_timeout``; sent when the next record of the source comes later
        than that, or when the chunk's records go past it (else the next chunk decides)."""
        timeout = self.source_timeout
        if timeout is None:
            self._follow(state, rows, kind, t)
            return
        chunk_end = float(t[-1]) if t.size else -np.inf
        times = t[rows]
        previous = np.concatenate([[state.last_t if state.last_t is not None else np.nan], times])
        following = np.concatenate([times, [np.inf]])
        due = previous + timeout
        candidates = np.flatnonzero(
            ~np.isnan(due) & (following > due) & (np.isfinite(following) | (due < chunk_end))
        )
        last_release_gap = -1
        for gap in candidates.tolist():  # rare: the gaps longer than the timeout
            if self._ended_before(state, rows, kind, gap, last_release_gap):
                continue
            at = float(due[gap])
            position = int(np.searchsorted(t, at, side="right"))
            extra.key.append(np.array([3 * position - 1], dtype=np.int64))
            extra.t.append(np.array([at]))
            extra.source.append(np.array([sid], dtype=np.uint32))
            extra.kind.append(np.array([_END], dtype=np.uint8))
            extra.value.append(np.zeros(1, dtype=np.uint64))
            extra.skip.append(np.array([-1], dtype=np.int64))
            last_release_gap = gap
        ended = self._ended_before(state, rows, kind, rows.size + 1, last_release_gap)
        self._follow(state, rows, kind, t)
        state.ended = ended

    @staticmethod
    def _ended_before(
        state: _SourceState, rows: npt.NDArray[np.int64], kind: npt.NDArray[np.uint8],
        gap: int, released: int,
    ) -> bool:
        """Whether the source is ended in the gap before its row ``gap`` (gap 0: before the
        chunk's first row of it): by its latest fragment or end (a watermark changes nothing,
        as in the contract), or by a release in a later gap than that record."""
        kinds = kind[rows[:gap]] if gap else kind[:0]
        decisive = np.flatnonzero(kinds != _WATERMARK)
        last = int(decisive[-1]) if decisive.size else -1
        if released >= 0 and released > last:
            return True
        return state.ended if last < 0 else bool(kinds[last] == _END)

    @staticmethod
    def _follow(
        state: _SourceState, rows: npt.NDArray[np.int64], kind: npt.NDArray[np.uint8],
        t: npt.NDArray[np.float64],
    ) -> None:
        if rows.size:
            state.last_t = float(t[rows[-1]])
            decisive = rows[kind[rows] != _WATERMARK]
            if decisive.size:
                state.ended = bool(kind[decisive[-1]] == _END)

    def _for(
        self, orderer: int, records: ArrivalRecords, owner: npt.NDArray[np.int64], extra: _Extra
    ) -> ArrivalRecords:
        """Orderer ``orderer``'s records of the chunk, in the order of their keys."""
        mine = np.flatnonzero((owner == -1) | (owner == orderer))
        taken = _rows(records, mine)
        if not extra.key:
            self._counting.routed += len(taken)
            return taken
        skip = np.concatenate(extra.skip)
        added = skip != orderer
        n_added = int(added.sum())
        kind = np.concatenate(extra.kind)[added]
        self._counting.watermarks += int((kind == _WATERMARK).sum())
        self._counting.releases += int((kind == _END).sum())
        self._counting.routed += len(taken) + n_added
        keys = np.concatenate([3 * mine, np.concatenate(extra.key)[added]])
        t = np.concatenate([taken.times(), np.concatenate(extra.t)[added]])
        sources = np.concatenate([taken.source, np.concatenate(extra.source)[added]])
        order = np.lexsort((sources, t, keys))  # releases due before one row: by time, source
        lengths = np.concatenate([np.diff(taken.payload_offsets), np.zeros(n_added, np.uint64)])
        offsets = np.zeros(len(keys) + 1, dtype=np.uint64)
        np.cumsum(lengths[order], out=offsets[1:])
        starts = np.concatenate([taken.payload_offsets[:-1], np.zeros(n_added, np.uint64)])
        payload = taken.payload[_byte_index(starts[order], offsets, lengths[order])]
        return ArrivalRecords(
            np.concatenate([taken.kind, kind])[order],
            t[order],
            sources[order],
            np.concatenate([taken.value, np.concatenate(extra.value)[added]])[order],
            np.concatenate([taken.barrier, np.zeros(n_added, np.uint32)])[order],
            offsets,
            payload,
        )


class OutputTaker:
    """What one orderer emits, handed over after every chunk: its output and barrier log (the
    simulation's orderers, and the replay of N orderers' own arrival logs,
    :mod:`orderer.replay.sliced_logs`)."""

    __slots__ = ("orderer", "output")

    def __init__(self, orderer: Orderer) -> None:
        self.orderer = orderer
        self.output = Output()

    def __call__(self) -> None:
        emitted: EmittedBatch = self.orderer.take_emitted()
        self.output.add(emitted, self.orderer.take_barrier_log())


def _ordered(
    batches: Iterable[ArrivalRecords], config: OrdererConfig, routers: Sequence[Router | None]
) -> tuple[list[tuple[list[Output], list[dict[str, Any]]]], int]:
    """One pass over the run: each router's orderers (None: one orderer, no routing) fed what it
    sends them; every run ends at the input's last time unless the input ended it. Returns each
    router's orderers' outputs and counters (the orderers themselves, whose queues keep their
    largest size, are let go), and how many fragments the run had."""
    fleets = [
        [OutputTaker(Orderer(config, clock=SimulatedClock()))
         for _ in range(1 if router is None else router.slicing.orderers)]
        for router in routers
    ]
    walkers = [[ArrivalWalker(taker.orderer, taker) for taker in fleet] for fleet in fleets]
    first, last_t = 0, None
    for batch in batches:
        if not len(batch):
            continue
        records = numbered(batch, first)
        first += int((batch.kind == _FRAGMENT).sum())
        last_t = float(batch.times()[-1])
        for router, fleet in zip(routers, walkers, strict=True):
            routed = [records] if router is None else router.route(records)
            for walker, part in zip(fleet, routed, strict=True):
                walker.feed(part)
    for takers, fleet in zip(fleets, walkers, strict=True):
        for taker, walker in zip(takers, fleet, strict=True):
            if not walker.finish().run_ended and last_t is not None:
                taker.orderer.end_run(now=last_t)
                taker()
    return [
        ([taker.output for taker in fleet], [taker.orderer.counters() for taker in fleet])
        for fleet in fleets
    ], first


@dataclass(frozen=True, slots=True)
class SettingResult:
    """One setting of N orderers and slices of T ticks against one orderer."""

    slicing: Slicing
    differences: Differences
    """What differs from one orderer's output (:func:`~orderer.replay.sliced_merge.compare`)."""
    routing: RoutingCounts
    orderers: tuple[dict[str, Any], ...]
    """Every orderer's counters, in the layout of ``evb replay --stats``."""

    def to_json(self) -> dict[str, Any]:
        """The setting's entry of ``--stats``: the routing's counts and the orderers' counters
        sit among its differences, as docs/scale-out.md documents them."""
        return {
            "setting": {"orderers": self.slicing.orderers, "slice_ticks": self.slicing.slice_ticks},
            "differences": {
                **self.differences.to_json(),
                "routing": self.routing.to_json(),
                "orderers": list(self.orderers),
            },
        }


@dataclass(frozen=True, slots=True)
class SlicedRun:
    """One orderer and the sliced settings over the same run: counters and differences."""

    counters: dict[str, Any]
    """The one orderer's counters, in the layout of ``evb replay --stats``."""
    single: OutputSummary
    """What the one orderer's output holds."""
    settings: tuple[SettingResult, ...]

    def to_json(self) -> dict[str, Any]:
        """``--stats`` of ``evb replay --orderers``: one orderer's counters and summary, and per
        setting its differences, the routing's counts and every orderer's counters."""
        return {
            "single": {"counters": self.counters, **self.single.to_json()},
            "settings": [setting.to_json() for setting in self.settings],
        }


def replay_sliced(
    batches: Callable[[], Iterable[ArrivalRecords]],
    config: OrdererConfig,
    slicings: Sequence[Slicing],
    dt: int | None = None,
) -> SlicedRun:
    """Order the run of ``batches`` (called once a pass: the first pass runs one orderer and the
    first setting, each further setting a pass of its own, so memory holds one setting's output
    beside the single orderer's) and compare every setting with one orderer; events are built
    (glom, window ``dt`` ticks) only with ``dt``."""
    if not slicings:
        raise ValueError("no setting to compare: give at least one slicing")
    single: Output | None = None
    counters: dict[str, Any] = {}
    summary: OutputSummary | None = None
    results = []
    for index, slicing in enumerate(slicings):
        router = Router(slicing, config.source_timeout)
        routers: list[Router | None] = [router] if index else [None, router]
        ordered, n_fragments = _ordered(batches(), config, routers)
        if single is None:
            single = ordered[0][0][0]
            counters, summary = ordered[0][1][0], single.summary(dt)
        outputs, orderers = ordered.pop()
        del ordered
        merged = merge(
            outputs, slicing,
            drop_late=config.late_policy == "drop", reset=config.reset_on_begin_run,
        )
        del outputs  # the merged stream holds what is needed of them
        differences = compare(single, merged, n_fragments, dt, slicing)
        del merged
        results.append(SettingResult(slicing, differences, router.counts, tuple(orderers)))
    assert summary is not None  # the first setting's pass made it
    return SlicedRun(counters, summary, tuple(results))
