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

Every input fragment is numbered and its number replaces its payload (8 bytes, little endian):
the orderers carry payloads through untouched, so the number names the same fragment in every
output, which is what matching one output against another needs (timestamps alone are not
unique).
"""

from __future__ import annotations

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
from orderer.replay.sliced_merge import Glom, Output, compare, merge
from orderer.replay.slicing import Slicing

__all__ = ["Router", "SlicedRun", "numbered", "print_summary", "replay_sliced", "stats_json"]

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

    __slots__ = ("_sources", "counts", "slicing", "source_timeout")

    def __init__(self, slicing: Slicing, source_timeout: float | None) -> None:
        self.slicing = slicing
        self.source_timeout = source_timeout
        self._sources: dict[int, _SourceState] = {}
        self.counts: dict[str, Any] = {
            "watermarks": 0, "releases": 0, "routed": 0, "fragments": [0] * slicing.orderers
        }
        """Crossing watermarks and releases sent (every copy), records routed in all, and the
        ordinary fragments each orderer got (its load)."""

    def route(self, records: ArrivalRecords) -> list[ArrivalRecords]:
        """The chunk's records as each orderer receives them."""
        n_orderers = self.slicing.orderers
        kind, source, t = records.kind, records.source, records.times()
        ordinary = (kind == _FRAGMENT) & (records.barrier == 0)
        if n_orderers == 1:  # nothing to tell another orderer: the plain replay
            self.counts["routed"] += len(records)
            self.counts["fragments"][0] += int(ordinary.sum())
            return [records]
        owner = np.where(ordinary, self.slicing.owner(records.value), -1)
        load = np.bincount(owner[ordinary], minlength=n_orderers)
        self.counts["fragments"] = [
            a + int(b) for a, b in zip(self.counts["fragments"], load, strict=True)
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
        top = np.maximum.accumulate(slices)
        crossing = np.empty(rows.size, dtype=np.bool_)
        crossing[0] = state.top_slice is None or int(slices[0]) > state.top_slice
        crossing[1:] = slices[1:] > (
            top[:-1] if state.top_slice is None else np.maximum(top[:-1], state.top_slice)
        )
        state.top_slice = max(int(top[-1]), -1 if state.top_slice is None else state.top_slice)
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
            self.counts["routed"] += len(taken)
            return taken
        skip = np.concatenate(extra.skip)
        added = skip != orderer
        n_added = int(added.sum())
        kind = np.concatenate(extra.kind)[added]
        self.counts["watermarks"] += int((kind == _WATERMARK).sum())
        self.counts["releases"] += int((kind == _END).sum())
        self.counts["routed"] += len(taken) + n_added
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


class _Taker:
    """What one orderer emits, handed over after every chunk: its output and barrier log."""

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
        [_Taker(Orderer(config, clock=SimulatedClock()))
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
class SlicedRun:
    """One orderer and the sliced settings over the same run: counters and differences."""

    single: dict[str, Any]
    """The one orderer's counters (``evb replay --stats``'s layout) and events."""
    settings: list[tuple[Slicing, dict[str, Any]]]
    """Per setting, the differences of :func:`~orderer.replay.sliced_merge.compare`."""


def replay_sliced(
    batches: Callable[[], Iterable[ArrivalRecords]],
    config: OrdererConfig,
    slicings: Sequence[Slicing],
    glom: Glom | None = None,
) -> SlicedRun:
    """Order the run of ``batches`` (called once a pass: the first pass runs one orderer and the
    first setting, each further setting a pass of its own, so memory holds one setting's output
    beside the single orderer's) and compare every setting with one orderer."""
    single: Output | None = None
    summary: dict[str, Any] = {}
    results = []
    for index, slicing in enumerate(slicings):
        router = Router(slicing, config.source_timeout)
        routers: list[Router | None] = [router] if index else [None, router]
        ordered, n_fragments = _ordered(batches(), config, routers)
        if single is None:
            single = ordered[0][0][0]
            summary = {"counters": ordered[0][1][0], **single.summary(glom)}
        outputs, counters = ordered.pop()
        del ordered
        merged = merge(
            outputs, slicing,
            drop_late=config.late_policy == "drop", reset=config.reset_on_begin_run,
        )
        del outputs  # the merged stream holds what is needed of them
        diff = compare(single, merged, n_fragments, glom, slicing)
        del merged
        diff["routing"] = router.counts
        diff["orderers"] = counters
        results.append((slicing, diff))
    return SlicedRun(summary, results)


def stats_json(run: SlicedRun) -> dict[str, Any]:
    """``--stats`` of ``evb replay --orderers``: one orderer's summary and counters, and per
    setting its differences, the routing's counts and every orderer's counters."""
    return {
        "single": run.single,
        "settings": [
            {"setting": {"orderers": s.orderers, "slice_ticks": s.slice_ticks}, "differences": d}
            for s, d in run.settings
        ],
    }


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def summary_table(run: SlicedRun, dt: int | None) -> Any:
    """One row a setting: how the merged output of N orderers differs from one orderer's."""
    from rich import box
    from rich.table import Table

    single = run.single
    late = single["late"] / single["fragments"] if single["fragments"] else 0.0
    resolutions = single["barrier_resolutions"]
    events = f", {single['events']:,} events (dt {dt})" if "events" in single else ""
    table = Table(
        title=f"evb replay: N sliced orderers against one (docs/scale-out.md)\none orderer: "
        f"{single['fragments']:,} fragments, {single['late']:,} late ({late:.2%}){events}, "
        f"barriers {resolutions['complete']:,} complete / {resolutions['incomplete']:,} "
        "incomplete",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    heads = ("setting", "moved", "late", "late flags\ndiffer", "events\ndiffer",
             "straddling\n(built whole)", "differ if each\nslice alone", "barriers\ndiffer",
             "split\nbarriers", "busiest orderer\n(share x N)", "watermarks\nper fragment",
             "releases")
    for head in heads:
        table.add_column(head, justify="left" if head == "setting" else "right")
    for slicing, d in run.settings:
        loads = d["routing"]["fragments"]
        busiest = max(loads) * len(loads) / sum(loads) if sum(loads) else 1.0
        ev = d.get("events", {})
        table.add_row(
            slicing.label.replace(",", "\n"),
            _count(d["moved"]),
            _count(d["late"]["sliced"]),
            _count(d["late"]["differ"]),
            _count(ev.get("differ")),
            _count(ev.get("straddling")),
            _count(ev.get("differ_if_built_alone")),
            _count(d["barriers"]["differ"]),
            _count(d["barriers"]["split"]),
            f"{busiest:.3f}",
            f"{d['routing']['watermarks'] / max(1, sum(loads)):.3f}",
            _count(d["routing"]["releases"]),
        )
    return table


def print_summary(run: SlicedRun, dt: int | None, console: Any = None) -> None:
    """The table on ``console``; not on a terminal, 170 columns wide (rich's 80 would cut the
    numbers short), as ``evb replay``'s sweep table."""
    from rich.console import Console

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=170)
    console.print(summary_table(run, dt))
