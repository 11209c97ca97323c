"""What a running :class:`~orderer.service.orderer_service.OrdererService` shows of itself: the
``GetStats`` answer (:meth:`Inspection.stats`, typed :class:`~orderer.stats.Stats` with the run
table and the open Submit streams) and the snapshot the metrics are drawn from
(:meth:`Inspection.metrics_snapshot`).

Why a class of its own, handed the service's parts when the service is made: it only reads, and
reading many parts of the service at one instant is a job of its own. What is read of the
orderer is read under the ingest lock, while the orderer's thread is between cycles.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orderer.api import Orderer
from orderer.config import SOURCE_COUNTERS
from orderer.service.diagnostics import BarrierLog
from orderer.service.group_commit import GroupCommit
from orderer.service.ingest import Ingest
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.metrics import ArrivalLatency, BarrierTally, MetricsSnapshot, directory_bytes
from orderer.service.runs import RunTable
from orderer.service.submit_stream import SubmitStream
from orderer.service.subscriptions import Subscriptions
from orderer.stats import BarrierCounts, Connection, OutOfOrder, SliceRole, SourceStats, Stats

__all__ = ["Inspection", "source_stats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Inspection:
    """The parts of one service that are read (the same objects the service holds)."""

    orderer: Orderer
    ingest: Ingest
    commit: GroupCommit
    output: Subscriptions
    streams: set[SubmitStream]
    runs: RunTable
    barrier_log: BarrierLog
    barriers: BarrierTally
    latency: ArrivalLatency
    arrivals: ArrivalLog
    ordered: OrderedLog
    role: SliceRole

    @property
    def run_ended_durably(self) -> bool:
        """The current run has ended and all its output is durable: what ``GetStats`` and the
        metrics call ended (a consumer that sees it and ``next_offset`` has the whole run)."""
        commit = self.commit
        return self.runs.ended and commit.durable_offset == commit.written_offset

    def stats(self, barrier_log_limit: int = 0) -> Stats:
        """``GetStats``: the counters, the newest ``barrier_log_limit`` resolved barriers (0:
        1000), the open Submit streams and the consumers with their lag."""
        durable = self.commit.durable_offset
        ended = self.run_ended_durably
        with self.ingest.lock:  # the orderer's thread is between cycles
            now = self.ingest.peek()
            counters = self.orderer.counters()
            states = self.orderer.source_states(now=now)
            high_water_mark = self.orderer.high_water_mark
            queued = self.orderer.queued
            config = self.orderer.config
        barriers = counters.get("barriers", {})
        return Stats(
            sources=source_stats(counters, states),
            barriers=BarrierCounts(
                complete=int(barriers.get("complete", 0)),
                incomplete=int(barriers.get("incomplete", 0)),
                homogeneous=int(barriers.get("homogeneous", 0)),
                heterogeneous=int(barriers.get("heterogeneous", 0)),
                by_type=dict(sorted(self.barrier_log.by_type.items())),
            ),
            next_offset=durable,
            high_water_mark=high_water_mark,
            queued=queued,
            now=now,
            wall_time=time.time() - (self.ingest.clock() - now),
            # ended only once the run's last output is durable: a consumer that sees run_ended
            # and next_offset has the whole run (the Spark source closes its last event there)
            run_ended=ended,
            run=self.runs.current,
            run_start_offset=self.runs.start_offset,
            runs=self.runs.spans(durable if ended else None),
            config=config,
            barrier_log=tuple(self.barrier_log.newest(barrier_log_limit)),
            connections=tuple(_connection(stream) for stream in self.streams),
            consumers=self.output.consumer_states(now),
            slicing=self.role,
        )

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The figures ``/metrics`` shows (:mod:`~orderer.service.metrics`)."""
        with self.ingest.lock:  # the orderer's thread is between cycles
            now = self.ingest.peek()
            counters = self.orderer.counters()
            states = self.orderer.source_states(now=now)
            high_water_mark = self.orderer.high_water_mark
        return MetricsSnapshot(
            counters=counters,
            states=states,
            output_offset=self.commit.durable_offset,
            high_water_mark=high_water_mark,
            submit_streams=len(self.streams),
            subscribers=self.output.subscribers,
            now=now,
            run_ended=self.run_ended_durably,
            barriers=self.barriers.counts(),
            latency=self.latency.histogram.data(),
            fsync={name: h.data() for name, h in self.commit.fsync_seconds.items()},
            log_bytes={
                "arrival": directory_bytes(self.arrivals.directory),
                "ordered": directory_bytes(self.ordered.directory),
            },
            volume=_volume(self.arrivals.directory),
            degraded=self.commit.degraded is not None,
            consumers=self.output.committed(),
            consumer_lag_seconds={
                name: state.lag_seconds for name, state in self.output.consumer_states(now).items()
            },
        )


def source_stats(
    counters: Mapping[str, Any], states: Mapping[int, Mapping[str, Any]]
) -> dict[int, SourceStats]:
    """Every source, ascending, from ``Orderer.counters()`` (its counters, the barriers it
    missed) and ``Orderer.source_states()`` (its queue)."""
    per_source = counters.get("sources", {})
    missing = counters.get("missing", {})
    out: dict[int, SourceStats] = {}
    for source in sorted(set(states) | {int(s) for s in per_source}):
        values = per_source.get(str(source), {})
        state = states.get(source, {})
        out[source] = SourceStats(
            source=source,
            missing=int(missing.get(str(source), 0)),
            queued=int(state.get("queued", 0)),
            queued_bytes=int(state.get("queued_bytes", 0)),
            oldest_ts=_integer(state.get("oldest_ts")),
            newest_ts=_integer(state.get("newest_ts")),
            last_arrival=_real(state.get("last_arrival")),
            paused=bool(state.get("paused", False)),
            ended=bool(state.get("ended", False)),
            dead=bool(state.get("dead", False)),
            marked_dead=bool(state.get("marked_dead", False)),
            watermark=_integer(state.get("watermark")),
            out_of_order_last=tuple(
                OutOfOrder(int(o["previous"]), int(o["timestamp"]), float(o["t"]))
                for o in state.get("out_of_order_last", ())
            ),
            **{name: int(values.get(name, 0)) for name in SOURCE_COUNTERS},
        )
    return out


def _integer(value: Any) -> int | None:
    return None if value is None else int(value)


def _real(value: Any) -> float | None:
    return None if value is None else float(value)


def _connection(stream: SubmitStream) -> Connection:
    """A Submit stream as ``GetStats`` lists it."""
    return Connection(
        peer=stream.peer,
        sources=tuple(sorted(stream.sources)),
        since=stream.since,
        messages=stream.messages,
        bytes=stream.bytes,
        acked=dict(sorted(stream.acked.items())),
    )


def _volume(directory: Path) -> tuple[int, int] | None:
    """(free bytes for an unprivileged writer, size) of the volume holding ``directory``."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
