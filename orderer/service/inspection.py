"""What a running :class:`~orderer.service.orderer_service.OrdererService` shows of itself: the
``GetStats`` answer (:func:`stats`, with the run table and the open Submit streams) and the
snapshot the metrics are drawn from (:func:`metrics_snapshot`). The service's methods of the same
names delegate here; what is read of the orderer is read under the ingest lock, while the
orderer's thread is between cycles, as before.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Protocol

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.api import Orderer
from orderer.service.diagnostics import BarrierLog
from orderer.service.group_commit import GroupCommit
from orderer.service.ingest import Ingest
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.metrics import ArrivalLatency, BarrierTally, MetricsSnapshot, directory_bytes
from orderer.service.submit_stream import SubmitStream
from orderer.service.subscriptions import Subscriptions
from orderer.wire import convert

__all__ = ["Inspected", "metrics_snapshot", "run_table", "stats"]


class Inspected(Protocol):
    """What is read of the service (:class:`~orderer.service.orderer_service.OrdererService`,
    which this module does not import: it imports this one)."""

    _orderer: Orderer
    _run: int
    _run_start: int
    _runs: list[tuple[int, int]]
    _streams: set[SubmitStream]
    _commit: GroupCommit
    _output: Subscriptions
    _latency: ArrivalLatency
    _barriers: BarrierTally
    _barrier_log: BarrierLog
    _ingest: Ingest
    arrivals: ArrivalLog
    ordered: OrderedLog

    def _peek(self) -> float: ...

    @property
    def run_ended_durably(self) -> bool: ...

    @property
    def degraded(self) -> OSError | None: ...


def stats(service: Inspected, barrier_log_limit: int = 0) -> pb.Stats:
    """``GetStats``: the counters, the newest ``barrier_log_limit`` resolved barriers (0:
    1000), the open Submit streams and the consumers with their lag."""
    durable = service._commit.durable_offset
    ended = service.run_ended_durably
    with service._ingest.lock:  # the orderer's thread is between cycles
        now = service._peek()
        counters = service._orderer.counters()
        states = service._orderer.source_states(now=now)
        high_water_mark = service._orderer.high_water_mark
        queued = service._orderer.queued
        config = service._orderer.config
    return convert.stats_to_pb(
        counters=counters,
        states=states,
        next_offset=durable,
        high_water_mark=high_water_mark,
        queued=queued,
        now=now,
        # ended only once the run's last output is durable: a consumer that sees run_ended
        # and next_offset has the whole run (the Spark source closes its last event there)
        run_ended=ended,
        config=config,
        consumers=service._output.consumer_states(now),
        barrier_log=service._barrier_log.newest(barrier_log_limit),
        barriers_by_type=service._barrier_log.by_type,
        connections=[_connection(stream) for stream in service._streams],
        wall_time=time.time() - (service._ingest.clock() - now),
        run=service._run,
        run_start_offset=service._run_start,
        runs=run_table(service, durable if ended else None),
    )


def run_table(service: Inspected, current_end: int | None) -> list[tuple[int, int, int | None]]:
    """``(run, start, end)`` of every run: a run ends where the next began (output between
    an end of run and the next begin run is the earlier run's, as ``run_start_offset``
    says), the current one at ``current_end`` once it has ended (None: it goes on)."""
    ends: list[int | None] = [start for _, start in service._runs[1:]]
    return [
        (number, start, end)
        for (number, start), end in zip(service._runs, [*ends, current_end], strict=True)
    ]


def metrics_snapshot(service: Inspected) -> MetricsSnapshot:
    """The figures ``/metrics`` shows (:mod:`~orderer.service.metrics`)."""
    with service._ingest.lock:  # the orderer's thread is between cycles
        now = service._peek()
        counters = service._orderer.counters()
        states = service._orderer.source_states(now=now)
        high_water_mark = service._orderer.high_water_mark
    return MetricsSnapshot(
        counters=counters,
        states=states,
        output_offset=service._commit.durable_offset,
        high_water_mark=high_water_mark,
        submit_streams=len(service._streams),
        subscribers=service._output.subscribers,
        now=now,
        run_ended=service.run_ended_durably,
        barriers=service._barriers.counts(),
        latency=service._latency.histogram.data(),
        fsync={name: h.data() for name, h in service._commit.fsync_seconds.items()},
        log_bytes={
            "arrival": directory_bytes(service.arrivals.directory),
            "ordered": directory_bytes(service.ordered.directory),
        },
        volume=_volume(service.arrivals.directory),
        degraded=service.degraded is not None,
        consumers=service._output.committed(),
        consumer_lag_seconds={
            name: state["lag_seconds"]
            for name, state in service._output.consumer_states(now).items()
        },
    )


def _connection(stream: SubmitStream) -> dict[str, Any]:
    """A Submit stream as ``GetStats`` lists it (``Stats.connections``)."""
    return {
        "peer": stream.peer,
        "sources": sorted(stream.sources),
        "since": stream.since,
        "messages": stream.messages,
        "bytes": stream.bytes,
        "acked": dict(stream.acked),
    }


def _volume(directory: Path) -> tuple[int, int] | None:
    """(free bytes for an unprivileged writer, size) of the volume holding ``directory``."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
