"""The orderer's public Python API: what the service, ``evb replay``, the tests and users embed.

:class:`Orderer` wraps the Cython core (kept in a private slot) and offers coarse calls: submit a
batch, send a watermark or an end of source, advance the clock, end the run, take emitted batches,
read counters and flow-control signals. Input is validated once, here and in the core's batch
check, before anything is taken in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from orderer._core.core import OrdererCore
from orderer.batch import ArrivalRecords, EmittedBatch, FragmentBatch
from orderer.clock import Clock, MonotonicClock
from orderer.config import OrdererConfig
from orderer.errors import InterfaceError

__all__ = ["FlowSignal", "Orderer"]

_U32 = 2**32 - 1
_U64 = 2**64 - 1
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FlowSignal:
    """Flow control for one source: ``paused`` True is XOFF (stop sending), False is XON."""

    source: int
    paused: bool


def _with_parameters(call: Callable[..., _T], config: OrdererConfig) -> _T:
    """``call`` (the core's constructor or its ``configure``) with ``config``'s parameters, by
    name: the core's spelling (``drop_late``, an infinite ``source_timeout`` for off, the
    effective barrier timeout) is made here, once."""
    fc = config.flow_control
    return call(
        build_window=config.build_window,
        startup_delay=config.startup_delay,
        barrier_timeout=config.effective_barrier_timeout,
        source_timeout=math.inf if config.source_timeout is None else config.source_timeout,
        drop_late=config.late_policy == "drop",
        global_xoff=fc.global_xoff,
        global_xon=fc.global_xon,
        queue_xoff=fc.queue_xoff,
        queue_xon=fc.queue_xon,
        reset_on_begin_run=config.reset_on_begin_run,
    )


def _check_id(name: str, value: int, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value <= top:
        raise InterfaceError(f"{name}: {value!r} is not an integer in 0..{top}")
    return int(value)


class Orderer:
    """One event orderer: merges sources into one stream in global timestamp order.

    ``config`` is an :class:`OrdererConfig` or a mapping of spec parameter names. Every call that
    takes ``now`` uses the clock when it is omitted (live: a monotonic clock; replay: a
    :class:`~orderer.clock.SimulatedClock`). Deadlines that fell before ``now`` run first, at their
    own times, so a live orderer emits exactly what ``evb replay`` of its arrivals emits.
    """

    __slots__ = ("_clock", "_config", "_core")

    def __init__(
        self,
        config: OrdererConfig | Mapping[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        track_arrival: bool = False,
    ) -> None:
        if config is None:
            config = OrdererConfig()
        elif not isinstance(config, OrdererConfig):
            config = OrdererConfig.from_mapping(config)
        self._config = config
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._core = _with_parameters(OrdererCore, config)
        self._core.set_track_arrival(track_arrival)
        for source in config.sources:
            self._core.declare_source(source)

    @property
    def config(self) -> OrdererConfig:
        return self._config

    def configure(
        self,
        config: OrdererConfig | Mapping[str, Any] | None = None,
        *,
        now: float | None = None,
        **changes: Any,
    ) -> OrdererConfig:
        """Change parameters live (window, timeouts, late policy, flow control); queued data stays.

        Deadlines before ``now`` run under the old parameters, then a flush at ``now`` applies the
        new ones, so nothing is ever emitted with a time before the change. Newly declared
        sources are added; a source is never forgotten.
        """
        moment = self._now(now)
        # Bring the old parameters up to `moment` first (a flush there emits nothing new once
        # its deadlines have run), so no deadline of the new ones can fall in the past.
        self._core.flush(moment)
        if config is None:
            new = self._config.with_changes(**changes)
        elif isinstance(config, OrdererConfig):
            new = config
        else:
            new = OrdererConfig.from_mapping(config)
        _with_parameters(self._core.configure, new)
        for source in new.sources:
            self._core.declare_source(source)
        self._config = new
        self._core.flush(moment)
        return new

    def _now(self, now: float | None) -> float:
        return self._clock.now() if now is None else float(now)

    def submit(self, batch: FragmentBatch, *, now: float | None = None) -> None:
        """Fragments arriving now, in arrival order. A bad batch raises and changes nothing."""
        self._core.submit(
            self._now(now),
            batch.source,
            batch.timestamp,
            batch.barrier,
            batch.payload_offsets,
            batch.payload,
        )

    def submit_batches(self, batches: Sequence[FragmentBatch], *, now: float | None = None) -> None:
        """Batches arriving together, in arrival order: :meth:`submit` of each in turn, checked
        all before any is taken in. The core takes them in without the GIL, so another
        thread (the service's event loop) runs meanwhile."""
        self._core.submit_batches(
            self._now(now),
            [(b.source, b.timestamp, b.barrier, b.payload_offsets, b.payload) for b in batches],
        )

    def watermark(self, source: int, watermark: int, *, now: float | None = None) -> None:
        """``source`` promises that nothing older than ``watermark`` will come from it."""
        self._core.watermark(
            self._now(now),
            _check_id("source", source, _U32),
            _check_id("watermark", watermark, _U64),
        )

    def end_source(self, source: int, *, now: float | None = None) -> None:
        """``source`` said end of stream; it stops holding the others back."""
        self._core.end_source(self._now(now), _check_id("source", source, _U32))

    def set_source_state(self, source: int, dead: bool, *, now: float | None = None) -> bool:
        """Mark ``source`` dead (it no longer holds a barrier back) or revive it (its silence
        clock for ``source_timeout`` starts again), as NSCLDAQ's ``markSourceFailed``; its next
        record of any kind revives it too. A flush follows, so a barrier that only this source
        held back resolves at once. Returns whether the source was known (an unknown one
        becomes known, like a declared source)."""
        if not isinstance(dead, bool | np.bool_):
            raise InterfaceError(f"dead: {dead!r} is not a boolean")
        return self._core.set_source_state(
            self._now(now), _check_id("source", source, _U32), bool(dead)
        )

    def advance(self, now: float | None = None) -> None:
        """Run every deadline up to and including ``now`` (what a live timer calls)."""
        self._core.run_deadlines(self._now(now))

    def next_deadline(self) -> float | None:
        """When :meth:`advance` next has something to do, or None."""
        deadline = self._core.next_deadline()
        return None if math.isinf(deadline) else deadline

    def end_run(self, *, now: float | None = None) -> None:
        """End of run: drain every queue without waiting, resolving pending barriers."""
        self._core.end_of_run(self._now(now))

    def take_emitted(self) -> EmittedBatch:
        """Everything emitted since the last call, in emission order; with ``track_arrival``
        each fragment's arrival time too (``arrival``; ``t - arrival`` is its delay in the
        orderer). Opt-in: writing it slows the merge by a quarter, and the service has no use
        for it."""
        return EmittedBatch(*self._core.take_emitted())

    def take_flow_signals(self) -> list[FlowSignal]:
        """Pause/resume transitions since the last call, for the service to relay."""
        return [FlowSignal(source, paused) for source, paused in self._core.take_flow_changes()]

    def take_barrier_log(self) -> list[dict[str, Any]]:
        """Barriers resolved since the last call, oldest first: ``offset`` (output sequence of
        the resolution's first barrier fragment), ``t``, ``complete``, ``homogeneous``,
        ``types`` (source id -> the barrier type it sent) and ``missing`` (source ids, ascending).
        """
        return [
            {
                "offset": offset,
                "t": t,
                "complete": complete,
                "homogeneous": homogeneous,
                "types": types,
                "missing": list(missing),
            }
            for offset, t, complete, homogeneous, types, missing in self._core.take_barrier_log()
        ]

    def counters(self) -> dict[str, Any]:
        """The counters of docs/ordering.md, in the layout of ``evb replay --stats``."""
        return self._core.counters()

    def source_states(self, *, now: float | None = None) -> dict[int, dict[str, Any]]:
        """Per source: ``queued`` fragments and ``queued_bytes`` (their payload bytes),
        ``oldest_ts``/``newest_ts`` of the queued fragments (None when empty), ``watermark``,
        ``ended``, ``dead`` (marked, or silent for ``source_timeout``), ``marked_dead``,
        ``paused``, ``last_arrival`` (None before any) and ``out_of_order_last`` (the last 10
        out-of-order arrivals, oldest first, each ``{"previous", "timestamp", "t"}``)."""
        return self._core.source_states(self._now(now))

    @property
    def source_ids(self) -> list[int]:
        """The known sources (declared, or heard from), ascending."""
        return self._core.source_ids

    @property
    def queued(self) -> int:
        """Fragments waiting in the queues (received - emitted - dropped)."""
        return self._core.queued

    @property
    def high_water_mark(self) -> int | None:
        return self._core.high_water_mark

    @property
    def emitted_seq(self) -> int:
        """Sequence number of the next fragment to be emitted."""
        return self._core.emitted_seq

    @property
    def globally_paused(self) -> bool:
        """True while the global XOFF is in force."""
        return self._core.global_paused

    def memory_bytes(self) -> int:
        """Bytes allocated for queued fragments (capacity, payload included)."""
        return self._core.memory_bytes()

    def replay_records(self, records: ArrivalRecords) -> None:
        """Take in a whole recorded run at once (``evb replay``, recovery): records in order of
        their arrival times, each taken in at its ``t``; fragments, watermarks, ends of source
        and source-state changes (:class:`~orderer.batch.ArrivalKind` 0 to 2 and 5) only."""
        self._core.replay(
            records.kind, records.times(), records.source, records.value, records.barrier,
            records.payload_offsets, records.payload,
        )
