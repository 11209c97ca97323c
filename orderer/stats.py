"""What a running orderer says of itself (``GetStats``), as typed values.

Why typed: the service makes these, :mod:`orderer.wire.convert` alone turns them into protobuf
and back, and everyone who reads them (``evb stats`` and ``evb top``, the console, the operator's
status, the Spark source and its run table, ``evb send``, ``evb tail``, ``evb forward``) reads
attributes a type checker knows, not string keys of nested mappings. The counters' names are
docs/ordering.md's (:data:`~orderer.config.SOURCE_COUNTERS`); ``evb stats --json`` keeps its
layout (:meth:`Stats.to_json`), the one of ``evb replay --stats`` plus the live state.

Nothing here imports protobuf or the service: the operator and the Spark job read these without
either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from orderer.config import SOURCE_COUNTERS, TOTAL_COUNTERS, OrdererConfig

__all__ = [
    "BarrierCounts",
    "BarrierRecord",
    "Connection",
    "ConsumerState",
    "OutOfOrder",
    "Piece",
    "RunSpan",
    "SliceIndex",
    "SliceRole",
    "SourceStats",
    "Stats",
    "Totals",
]


@dataclass(frozen=True, slots=True)
class OutOfOrder:
    """One out-of-order arrival: a fragment older than its source's previous one."""

    previous: int
    """The source's previous timestamp."""
    timestamp: int
    """The arriving fragment's (older) timestamp."""
    t: float
    """When it arrived (orderer time, seconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceStats:
    """One source: its counters (docs/ordering.md) and the state of its queue."""

    source: int
    received: int = 0
    emitted: int = 0
    late: int = 0
    dropped: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    max_lateness: int = 0
    barriers: int = 0
    missing: int = 0
    """Barriers this source did not take part in (incomplete barriers it was missing from)."""
    queued: int = 0
    """Fragments waiting in its queue."""
    queued_bytes: int = 0
    """Their payload bytes."""
    oldest_ts: int | None = None
    """Oldest queued timestamp; None when the queue is empty."""
    newest_ts: int | None = None
    """Newest queued timestamp; None when the queue is empty."""
    last_arrival: float | None = None
    """Orderer time of its last arrival (None before any)."""
    paused: bool = False
    """Flow control holds it (XOFF)."""
    ended: bool = False
    """It sent its end of source."""
    dead: bool = False
    """Marked dead, or silent for ``source_timeout``."""
    marked_dead: bool = False
    """Marked dead by hand (``SetSourceState``)."""
    watermark: int | None = None
    """The source's promise: nothing older than this will come (None before any)."""
    out_of_order_last: tuple[OutOfOrder, ...] = ()
    """The last out-of-order arrivals, oldest first."""


@dataclass(frozen=True, slots=True)
class Totals:
    """The counters summed over the sources (``totals`` of ``evb replay --stats``)."""

    received: int
    emitted: int
    late: int
    dropped: int
    duplicates: int
    out_of_order: int

    @classmethod
    def of(cls, sources: Mapping[int, SourceStats]) -> Totals:
        return cls(
            *(sum(getattr(s, name) for s in sources.values()) for name in TOTAL_COUNTERS)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierCounts:
    """Resolved barriers, counted (docs/ordering.md, "Barriers")."""

    complete: int = 0
    incomplete: int = 0
    homogeneous: int = 0
    heterogeneous: int = 0
    by_type: Mapping[int, int] = field(default_factory=dict)
    """Barrier fragments emitted over the run, by barrier type (NSCLDAQ's ``barrierstats``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierRecord:
    """One resolved barrier of the barrier log."""

    offset: int
    """Output offset of its first fragment."""
    t: float
    """When it was resolved (orderer time)."""
    complete: bool
    homogeneous: bool
    types: Mapping[int, int]
    """The barrier type each source sent, by source."""
    missing: tuple[int, ...]
    """Known sources that sent no barrier, ascending."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerState:
    """A consumer known to the service, by its committed offset."""

    name: str
    committed: int
    """It is done with every offset below this one."""
    lag: int
    """Durable output it has not committed, in fragments."""
    lag_seconds: float
    """Age of the oldest output it has not committed (0 when none)."""
    last_commit: float | None
    """Unix time of its last commit; None when unknown (committed before the server kept it)."""


@dataclass(frozen=True, slots=True)
class RunSpan:
    """One run of the run table: its output is ``[start_offset, end_offset)``."""

    run: int
    start_offset: int
    end_offset: int | None = None
    """The next run's start once one began; the current run's end once it has ended; None while
    it goes on."""


@dataclass(frozen=True, slots=True)
class SliceRole:
    """Where an orderer stands in a run spread over several by time slices (docs/scale-out.md):
    orderer ``index`` of ``orderers``, slices of ``slice_ticks``; a plain orderer is orderer 0
    of 1. Why in ``GetStats``: a source that knows one orderer learns from it how to route and,
    with ``peers``, where the others are; a consumer learns whose pieces to read."""

    orderers: int = 1
    """N, the orderers of the run."""
    index: int = 0
    """This orderer's number, 0 to N-1: it owns the slices ``s`` with ``s mod N == index``."""
    slice_ticks: int | None = None
    """T, the slice length in timestamp ticks; None: not given (a run of one orderer)."""
    peers: tuple[str, ...] = ()
    """The run's orderers' addresses, in index order (empty: the server was not told them)."""

    @property
    def sliced(self) -> bool:
        """The run is spread over more than one orderer."""
        return self.orderers > 1

    def describe(self) -> str:
        """``orderer 1 of 3, slices of 1000000 ticks``: what ``evb stats`` and ``evb top``
        show of a run over several orderers."""
        return f"orderer {self.index} of {self.orderers}, slices of {self.slice_ticks} ticks"


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of an orderer's output (docs/scale-out.md, "Vocabulary"): it begins at
    ``first_offset`` and ends where the orderer's next piece begins (or at the run's end)."""

    slice: int
    """The slice that opened it, which its orderer owns: the pieces of all orderers in slice
    order are the merged stream."""
    first_offset: int
    """Output offset of its first fragment."""
    highest_timestamp: int | None
    """The highest ordinary timestamp in it so far (of its durable output); None: it holds no
    ordinary fragment yet (a kept barrier opened it). The merged stream's high-water mark at a
    piece's start is the highest of the earlier pieces'."""
    kept: int
    """Its rows in the merged stream so far: its ordinary fragments and the barrier copies its
    orderer keeps (its offsets also hold the copies of other orderers' slices, which only held
    its orderer and are left out). The merged stream's position of a piece's first row is the
    sum of the earlier pieces' ``kept``: a reader numbers the merged stream from the index."""


@dataclass(frozen=True, slots=True)
class SliceIndex:
    """``GetSliceIndex``: an orderer's pieces from a slice on, as far as its output is durable."""

    pieces: tuple[Piece, ...]
    """Ascending by slice (and so by offset)."""
    complete: bool
    """The run has ended and everything it emitted is durable: the last piece ends at
    ``next_offset`` and no piece will follow."""
    next_offset: int
    """The index covers the durable output below this offset: the last piece listed runs at
    least up to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Connection:
    """A Submit stream open now."""

    peer: str
    sources: tuple[int, ...]
    """The sources it has spoken for, ascending."""
    since: float
    """Unix time it opened."""
    messages: int
    bytes: int
    acked: Mapping[int, int]
    """The last durable sequence acknowledged, by source."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stats:
    """``GetStats``: the counters, the live state of the sources and of the service."""

    sources: Mapping[int, SourceStats]
    """By source id, ascending."""
    barriers: BarrierCounts
    next_offset: int
    """Output offset after the last durable fragment."""
    high_water_mark: int | None
    """The newest timestamp emitted (None before any)."""
    queued: int
    """Fragments waiting, over all sources."""
    now: float
    """Orderer time of this answer (seconds)."""
    wall_time: float
    """Unix time at ``now``: an orderer time t was at ``wall_time - (now - t)``."""
    run_ended: bool
    """The current run ended and its last output is durable: output below ``next_offset`` is
    the whole run."""
    run: int
    """The current run's number."""
    run_start_offset: int
    """Output offset of the current run's first fragment."""
    runs: tuple[RunSpan, ...]
    """Every run this orderer served, in order."""
    config: OrdererConfig
    """The parameters in force."""
    barrier_log: tuple[BarrierRecord, ...] = ()
    """The newest resolved barriers, oldest first."""
    connections: tuple[Connection, ...] = ()
    consumers: Mapping[str, ConsumerState]
    """By name, sorted."""
    slicing: SliceRole = SliceRole()
    """Where this orderer stands in a run over several (a plain orderer: orderer 0 of 1)."""

    @property
    def totals(self) -> Totals:
        return Totals.of(self.sources)

    @property
    def missing(self) -> dict[int, int]:
        """Source -> barriers it missed, for the sources that missed any."""
        return {source: s.missing for source, s in self.sources.items() if s.missing}

    def run_span(self, run: int) -> RunSpan | None:
        """``run``'s entry of the run table (None: not served here)."""
        return next((span for span in self.runs if span.run == run), None)

    def to_json(self) -> dict[str, Any]:
        """``evb stats --json``: the ``evb replay --stats`` layout (``totals``, ``barriers``,
        ``missing``, ``sources``) and the live state (the barrier log, the connections, the
        consumers with ``committed``, ``lag``, ``lag_seconds`` and ``last_commit``). Map keys
        are strings, as JSON has them."""
        barriers: dict[str, Any] = {
            name: getattr(self.barriers, name)
            for name in ("complete", "incomplete", "homogeneous", "heterogeneous")
        }
        barriers["by_type"] = _keyed(self.barriers.by_type)
        totals = self.totals
        return {
            "totals": {name: getattr(totals, name) for name in TOTAL_COUNTERS},
            "barriers": barriers,
            "missing": {str(k): v for k, v in self.missing.items()},
            "sources": {str(k): _source_json(s) for k, s in self.sources.items()},
            "next_offset": self.next_offset,
            "high_water_mark": self.high_water_mark,
            "queued": self.queued,
            "now": self.now,
            "wall_time": self.wall_time,
            "run_ended": self.run_ended,
            "run": self.run,
            "run_start_offset": self.run_start_offset,
            "runs": [
                {"run": r.run, "start_offset": r.start_offset, "end_offset": r.end_offset}
                for r in self.runs
            ],
            "config": _config_json(self.config),
            "barrier_log": [
                {
                    "offset": b.offset,
                    "t": b.t,
                    "complete": b.complete,
                    "homogeneous": b.homogeneous,
                    "types": _keyed(b.types),
                    "missing": list(b.missing),
                }
                for b in self.barrier_log
            ],
            "connections": [
                {
                    "peer": c.peer,
                    "sources": list(c.sources),
                    "since": c.since,
                    "messages": c.messages,
                    "bytes": c.bytes,
                    "acked": _keyed(c.acked),
                }
                for c in self.connections
            ],
            "consumers": {
                name: {
                    "committed": c.committed,
                    "lag": c.lag,
                    "lag_seconds": c.lag_seconds,
                    "last_commit": c.last_commit,
                }
                for name, c in self.consumers.items()
            },
            "slicing": {
                "orderers": self.slicing.orderers,
                "index": self.slicing.index,
                "slice_ticks": self.slicing.slice_ticks,
                "peers": list(self.slicing.peers),
            },
        }


_QUEUE_FIELDS = tuple(
    f.name for f in fields(SourceStats) if f.name not in {"source", *SOURCE_COUNTERS, "missing"}
)


def _source_json(source: SourceStats) -> dict[str, Any]:
    entry: dict[str, Any] = {name: getattr(source, name) for name in SOURCE_COUNTERS}
    for name in _QUEUE_FIELDS:
        entry[name] = getattr(source, name)
    entry["out_of_order_last"] = [
        {"previous": o.previous, "timestamp": o.timestamp, "t": o.t}
        for o in source.out_of_order_last
    ]
    return entry


def _keyed(mapping: Mapping[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(mapping.items())}


def _config_json(config: OrdererConfig) -> dict[str, Any]:
    """The parameters as ``GetStats`` always showed them (``source_timeout`` ``off`` when
    disabled; no flow control)."""
    return {
        "build_window": config.build_window,
        "startup_delay": config.startup_delay,
        "barrier_timeout": config.barrier_timeout,
        "source_timeout": "off" if config.source_timeout is None else config.source_timeout,
        "late_policy": config.late_policy,
        "sources": list(config.sources),
        "reset_on_begin_run": config.reset_on_begin_run,
    }
