"""A slow, readable, pure-Python oracle of the ordering contract, ``docs/ordering.md``.

Written from the spec alone (not from the Cython core) so the tests can compare the two. It takes
records in the ``evb replay`` INPUT layout, as dicts::

    {"t": 1.5, "source": 3, "ts": 120, "barrier": 0}    # fragment ("barrier" optional)
    {"t": 1.6, "source": 3, "watermark": 100}           # watermark
    {"t": 3.0, "source": 3, "end": True}                # end of source
    {"t": 4.0, "source": 3, "dead": True}               # marked dead (False: revived)

and returns what is emitted (``{"t", "source", "ts", "barrier", "late"}`` dicts, in emission order)
and the counters in the ``evb replay --stats`` layout.

Choices where the contract is silent (the same as the core's; ``docs/ordering.md`` lists them):
- the end of run drain emits even before the startup delay has passed;
- a source's ``barriers`` counter counts its barrier fragments that were emitted;
- ``duplicates``/``out_of_order`` compare with the previous fragment (barriers included) of the
  same source, in arrival order;
- watermark and end records count as arrivals for the dead-source rule and make a source known;
- a fragment re-opens an ended source, a watermark does not; a lower watermark is ignored;
- ``first arrival`` (startup delay) is the first *fragment*;
- within a queue, barriers are sorted by ``(timestamp, arrival order)`` like ordinary data;
- a mark (dead) or revive record is no arrival: it neither starts the startup delay nor moves
  the last arrival; a revive restarts the silence clock of a source that has sent something.

Under ``reset_on_begin_run`` (off by default), a barrier resolved complete and homogeneous of
type 1 (begin run) forgets the high-water mark, every source's previous timestamp and its
watermark: the new run's clocks start again.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Oracle", "oracle_run"]

INF = math.inf
BEGIN_RUN = 1  # the barrier type of a run's start
COUNTER_NAMES = ("received", "emitted", "late", "dropped", "duplicates", "out_of_order")


@dataclass
class Fragment:
    source: int
    ts: int
    barrier: int
    arrival: float  # arrival time
    order: int  # global arrival order


@dataclass
class Source:
    id: int
    queue: list[Fragment] = field(default_factory=list)  # sorted by (ts, arrival order)
    watermark: int | None = None
    ended: bool = False
    last_arrival: float | None = None  # None: nothing arrived yet (a declared, silent source)
    previous_ts: int | None = None  # timestamp of the previous fragment, for the counters
    marked_dead: bool = False  # marked dead until its next record or a revive
    revived_at: float | None = None  # last revive: the silence clock restarts there
    counters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((*COUNTER_NAMES, "max_lateness", "barriers"), 0)
    )
    missing: int = 0

    def front(self) -> Fragment | None:
        return self.queue[0] if self.queue else None

    def front_is_barrier(self) -> bool:
        return bool(self.queue) and self.queue[0].barrier != 0


def _seconds(config: Mapping[str, Any], name: str, default: float | None) -> float | None:
    value = config.get(name, default)
    if value is None or (isinstance(value, str) and value.strip().lower() == "off"):
        return None
    return float(value)


class Oracle:
    """The orderer of docs/ordering.md, one record at a time, on simulated time."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        config = dict(config or {})
        self.build_window = float(config.get("build_window", 20.0))
        self.startup_delay = float(config.get("startup_delay", 2.0))
        barrier_timeout = _seconds(config, "barrier_timeout", None)
        if barrier_timeout is None:
            barrier_timeout = 4.0 * self.build_window
        self.barrier_timeout = barrier_timeout
        self.source_timeout = _seconds(config, "source_timeout", 60.0)  # None: off
        self.drop_late = config.get("late_policy", "emit") == "drop"
        self.reset_on_begin_run = bool(config.get("reset_on_begin_run", False))
        self.sources: dict[int, Source] = {}
        for source_id in config.get("sources", ()):
            self.sources[source_id] = Source(source_id)
        self.now = -INF  # time of the last flush (or record)
        self.first_fragment: float | None = None
        self.high_water_mark: int | None = None
        self.arrivals = 0
        self.emitted: list[dict[str, Any]] = []
        self.barrier_counts = dict.fromkeys(
            ("complete", "incomplete", "homogeneous", "heterogeneous"), 0
        )

    # ------------------------------------------------------------------ state

    def known(self) -> list[Source]:
        return [self.sources[i] for i in sorted(self.sources)]

    def source(self, source_id: int) -> Source:
        if source_id not in self.sources:
            self.sources[source_id] = Source(source_id)
        return self.sources[source_id]

    @staticmethod
    def silent_since(s: Source) -> float | None:
        """Start of the silence clock: the later of the last arrival and the last revive; None
        for a source that has sent nothing (never dead by timeout)."""
        if s.last_arrival is None:
            return None
        return s.last_arrival if s.revived_at is None else max(s.last_arrival, s.revived_at)

    def is_dead(self, s: Source) -> bool:
        if s.marked_dead:
            return True
        since = self.silent_since(s)
        if self.source_timeout is None or since is None:
            return False
        return since + self.source_timeout <= self.now

    def frontier(self, s: Source) -> float | int | None:
        """Rule 1; None is *none*."""
        if any(f.barrier != 0 for f in s.queue):
            return INF
        if s.queue:
            newest = s.queue[-1].ts
            return newest if s.watermark is None else max(newest, s.watermark)
        if s.ended:
            return INF
        return s.watermark

    def queued(self) -> int:
        return sum(len(s.queue) for s in self.sources.values())

    # ------------------------------------------------------------------ input records

    def take(self, record: Mapping[str, Any]) -> None:
        """One input record: deadlines before its time, the record, then a flush."""
        t = float(record["t"])
        assert t >= self.now, f"time goes backwards: {t} < {self.now}"
        self.run_deadlines(t, inclusive=False)
        self.now = t
        s = self.source(int(record["source"]))
        if "dead" in record:
            # an operator's mark or revive, not an arrival from the source
            s.marked_dead = bool(record["dead"])
            if not s.marked_dead:
                s.revived_at = t
            self.flush()
            return
        s.last_arrival = t
        s.marked_dead = False  # any record from the source makes it live again
        if "ts" in record:
            self.take_fragment(s, int(record["ts"]), int(record.get("barrier", 0)), t)
        elif "watermark" in record:
            if s.watermark is None or record["watermark"] > s.watermark:
                s.watermark = int(record["watermark"])
        else:
            assert record["end"] is True
            s.ended = True
        self.flush()

    def take_fragment(self, s: Source, ts: int, barrier: int, t: float) -> None:
        if self.first_fragment is None:
            self.first_fragment = t
        s.ended = False
        s.counters["received"] += 1
        if s.previous_ts is not None:
            if ts == s.previous_ts:
                s.counters["duplicates"] += 1
            elif ts < s.previous_ts:
                s.counters["out_of_order"] += 1
        s.previous_ts = ts
        fragment = Fragment(s.id, ts, barrier, t, self.arrivals)
        self.arrivals += 1
        position = bisect.bisect_right([f.ts for f in s.queue], ts)  # after equal timestamps
        s.queue.insert(position, fragment)

    # ------------------------------------------------------------------ time

    def deadlines(self) -> list[float]:
        result = []
        if self.first_fragment is not None:
            result.append(self.first_fragment + self.startup_delay)
        pending = [s.front().arrival for s in self.known() if s.front_is_barrier()]
        for s in self.known():
            if s.queue and not s.front_is_barrier():
                result.append(s.queue[0].arrival + self.build_window)
        if pending:
            result.append(min(pending) + self.barrier_timeout)
            if self.source_timeout is not None:
                for s in self.known():
                    since = self.silent_since(s)
                    if since is not None:
                        result.append(since + self.source_timeout)
        return result

    def run_deadlines(self, t: float, *, inclusive: bool) -> None:
        """Every deadline after the last flush and before ``t`` (or at ``t``), in time order."""
        while True:
            due = [
                d for d in self.deadlines() if self.now < d and (d < t or (inclusive and d == t))
            ]
            if not due:
                return
            self.now = min(due)
            self.flush()

    def advance(self, now: float) -> None:
        """What a live timer does: every deadline up to and including ``now``."""
        self.run_deadlines(now, inclusive=True)
        self.now = max(self.now, now)

    # ------------------------------------------------------------------ flush

    def flush(self) -> None:
        if self.first_fragment is None or self.first_fragment + self.startup_delay > self.now:
            return  # nothing is emitted before the startup delay
        while True:
            popped = self.pop_round(drain=False)
            self.emit_merged(popped)
            resolved = self.resolve_barrier(drain=False)
            if not popped and not resolved:
                return

    def end_run(self, now: float | None = None) -> None:
        """End of run at ``now`` (default: the last record's time): drain without waiting."""
        if now is not None:
            self.run_deadlines(now, inclusive=False)
            self.now = max(self.now, now)
        while self.queued():
            popped = self.pop_round(drain=True)
            self.emit_merged(popped)
            self.resolve_barrier(drain=True)

    def pop_round(self, *, drain: bool) -> list[Fragment]:
        """Rules 2 and 3 (or the drain): pop data from the queue fronts, never a barrier."""
        if drain:
            def may_pop(f: Fragment) -> bool:
                return True
        else:
            frontiers = [self.frontier(s) for s in self.known()]
            if None not in frontiers:
                mark = min(frontiers)  # type: ignore[type-var]

                def may_pop(f: Fragment) -> bool:
                    return f.ts <= mark
            else:
                def may_pop(f: Fragment) -> bool:
                    return f.arrival + self.build_window <= self.now
        popped = []
        for s in self.known():
            while s.queue and s.queue[0].barrier == 0 and may_pop(s.queue[0]):
                popped.append(s.queue.pop(0))
        return popped

    def emit_merged(self, popped: list[Fragment]) -> None:
        """Rule 4: merge by (timestamp, source id, arrival order); late policy."""
        for f in sorted(popped, key=lambda f: (f.ts, f.source, f.order)):
            counters = self.sources[f.source].counters
            hwm = self.high_water_mark
            late = hwm is not None and f.ts < hwm
            if late:
                counters["late"] += 1
                counters["max_lateness"] = max(counters["max_lateness"], hwm - f.ts)
                if self.drop_late:
                    counters["dropped"] += 1
                    continue
            else:
                self.high_water_mark = f.ts if hwm is None else max(hwm, f.ts)
            self.emit(f, late)

    def emit(self, f: Fragment, late: bool) -> None:
        self.sources[f.source].counters["emitted"] += 1
        self.emitted.append(
            {"t": self.now, "source": f.source, "ts": f.ts, "barrier": f.barrier, "late": late}
        )

    def resolve_barrier(self, *, drain: bool) -> bool:
        """Rule 5: resolve the pending barrier if it is complete, incomplete or timed out."""
        known = self.known()
        with_barrier = [s for s in known if s.front_is_barrier()]
        if not with_barrier:
            return False
        complete = len(with_barrier) == len(known)
        if not complete and not drain:
            waited_for = [
                s for s in known if not s.front_is_barrier() and not s.ended and not self.is_dead(s)
            ]
            oldest = min(s.front().arrival for s in with_barrier)
            if waited_for and not oldest + self.barrier_timeout <= self.now:
                return False
        types = {s.front().barrier for s in with_barrier}
        self.barrier_counts["complete" if complete else "incomplete"] += 1
        self.barrier_counts["homogeneous" if len(types) == 1 else "heterogeneous"] += 1
        for s in known:
            if s.front_is_barrier():
                barrier = s.queue.pop(0)
                s.counters["barriers"] += 1
                self.emit(barrier, late=False)
            else:
                s.missing += 1
        if self.reset_on_begin_run and complete and types == {BEGIN_RUN}:
            self.high_water_mark = None  # the new run's clocks start again
            for s in known:
                s.previous_ts = None
                s.watermark = None
        return True

    # ------------------------------------------------------------------ output

    def counters(self) -> dict[str, Any]:
        sources = {str(s.id): dict(s.counters) for s in self.known()}
        return {
            "totals": {name: sum(c[name] for c in sources.values()) for name in COUNTER_NAMES},
            "barriers": dict(self.barrier_counts),
            "missing": {str(s.id): s.missing for s in self.known() if s.missing},
            "sources": sources,
        }


def oracle_run(
    records: Iterable[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    *,
    end_run: bool = True,
    end_time: float | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Replay ``records`` (sorted by ``t``); end of run at ``end_time`` or the last record's t."""
    oracle = Oracle(config)
    for record in records:
        oracle.take(record)
    if end_run:
        oracle.end_run(end_time)
    return oracle.emitted, oracle.counters()
