"""Prometheus metrics of the orderer service, each server with its own ``CollectorRegistry``.

Why a collector and not counters bumped per batch: the orderer already counts everything
(``Orderer.counters()``), so the metrics are read from it at scrape time and the hot path pays
nothing. The scrape runs in the HTTP server's thread while the orderer lives on the asyncio loop,
so the service hands over a :class:`MetricsSnapshot` taken on its own thread (``snapshot`` is a
thread-safe callable); this module never touches the orderer. What the counters lack (the
barriers by both of their kinds at once, the arrival-to-emission latency, fsync durations) the
service tallies per orderer call or write round, not per fragment: :class:`BarrierTally`,
:class:`ArrivalLatency`, :class:`Histogram`.

Names use the vocabulary of docs/ordering.md, and rates are left to PromQL's ``rate()`` (a
gauge of a precomputed rate cannot be summed or re-windowed). README ("The service") lists them:
``evb_fragments_{received,emitted,late,dropped}_total{source}``, ``evb_queue_depth{source}``,
``evb_source_paused{source}``, ``evb_source_dead{source}``, ``evb_source_ended{source}``,
``evb_source_arrived{source}``, ``evb_source_idle_seconds{source}``,
``evb_barriers_total{completeness,homogeneity}``,
``evb_emission_latency_seconds``, ``evb_fsync_duration_seconds{log}``, ``evb_log_bytes{log}``,
``evb_log_volume_free_bytes``, ``evb_log_volume_size_bytes``, ``evb_degraded``,
``evb_output_offset``, ``evb_high_water_mark``, ``evb_consumer_committed_offset{consumer}``,
``evb_consumer_lag_seconds{consumer}``,
``evb_submit_streams``, ``evb_subscribers``, ``evb_run_ended``, ``evb_build_info{version}``,
``evb_orderers``.

An orderer of a run spread over N (docs/scale-out.md) adds ``orderer="K"`` to every series, so
that a run's series tell its orderers apart wherever they are scraped from, and exports
``evb_orderers`` N: the count of orderers that answer a scrape, against N, is how an orderer
that is down (or never scheduled: no target at all) shows. A plain orderer's series keep their
labels (``evb_orderers`` 1 is new), so existing queries and recorded series go on unchanged.

A declared source that never sent anything has every per-source series from the start, its idle
time counted from the run's start and ``evb_source_arrived`` 0: a series that is absent matches
no alert expression and draws no line, so the failure a shift crew meets first (a digitizer that
never connected, while every fragment waits the full build window) would be silent. The
contract is unchanged (such a source is never dead by timeout, docs/ordering.md); this only
makes it visible. ``evb_run_ended`` lets the source alerts go quiet once the run ended: a
source that never came, went silent or died is nothing to act on after the shift ended the run.
"""

from __future__ import annotations

import bisect
import functools
import importlib.metadata
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from orderer.stats import SliceRole

__all__ = [
    "FSYNC_BUCKETS",
    "LATENCY_BUCKETS",
    "ArrivalLatency",
    "BarrierTally",
    "Histogram",
    "HistogramData",
    "MetricsSnapshot",
    "ServiceMetrics",
    "directory_bytes",
]

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)
"""Upper bounds (seconds) of the arrival-to-emission latency buckets: from a flush right after
arrival up to a barrier or source timeout (minutes)."""

FSYNC_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
)
"""Upper bounds (seconds) of the fsync duration buckets: page cache to a stalled network disk."""

_PER_SOURCE_COUNTERS = {
    "received": "Fragments received from the source (duplicates of resends excluded).",
    "emitted": "Fragments of the source emitted in the ordered output.",
    "late": "Late fragments of the source (below the high-water mark when merged).",
    "dropped": "Late fragments of the source dropped under late_policy drop.",
}

_PER_SOURCE_FLAGS = {
    "paused": ("evb_source_paused", "1 while the source is asked to pause (XOFF)."),
    "dead": ("evb_source_dead", "1 while the source is dead (silent past source_timeout)."),
    "ended": ("evb_source_ended", "1 once the source sent its end of source."),
}


@dataclass(frozen=True, slots=True)
class HistogramData:
    """A histogram's state at one moment: cumulative counts per upper bound, count, sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    """Observations at or below each bound (the last one: +Inf, i.e. the count)."""
    total: float
    """Sum of the observed values (weighted)."""

    def buckets(self) -> list[tuple[str, float]]:
        labels = [repr(float(b)) for b in self.bounds] + ["+Inf"]
        return list(zip(labels, self.cumulative, strict=True))


class Histogram:
    """Bucket counts that take weighted observations (one call for many fragments) and may be
    observed in a worker thread while the loop reads them (the fsync durations)."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self._counts = [0.0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, weight: float = 1.0) -> None:
        index = bisect.bisect_left(self._bounds, value)  # a bound is an inclusive upper limit
        with self._lock:
            self._counts[index] += weight
            self._sum += value * weight

    def data(self) -> HistogramData:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0.0
        for count in counts:
            running += count
            cumulative.append(running)
        return HistogramData(self._bounds, tuple(cumulative), total)


class BarrierTally:
    """Resolved barriers by completeness and homogeneity together. The core counts each kind
    apart (complete + incomplete = homogeneous + heterogeneous = all barriers), so one label for
    all four made ``sum()`` count every barrier twice; the service feeds the core's barrier
    log (which it must take anyway, or it grows) in here instead."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {
            (c, h): 0
            for c in ("complete", "incomplete")
            for h in ("homogeneous", "heterogeneous")
        }

    def add(self, resolved: Iterable[Mapping[str, Any]]) -> None:
        """``Orderer.take_barrier_log()``: one entry per resolved barrier."""
        for barrier in resolved:
            key = (
                "complete" if barrier["complete"] else "incomplete",
                "homogeneous" if barrier["homogeneous"] else "heterogeneous",
            )
            self._counts[key] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        return dict(self._counts)


class ArrivalLatency:
    """Arrival-to-emission latency of fragments, in count order, per intake pass.

    What it measures: the core sorts each queue by timestamp and keeps no arrival time in its
    output, so which fragment left is not known outside it; what is known is how many fragments
    have left the queues (emitted or dropped: received - queued) after each orderer call, at
    that call's time, and how many each intake pass brought in at its arrival time. The k-th
    fragment to leave is matched with the k-th to arrive (first in, first out over the whole
    orderer), and ``flush time - arrival time`` is observed once per pass part, weighted by
    its fragments. This is exact while the output keeps the arrival order (in-order sources)
    and otherwise the time the output took to catch up with the input count, which has the same
    mean (Little's law). Fragments already queued at recovery have no arrival time here and are
    not observed."""

    __slots__ = ("_arrived", "_left", "_passes", "histogram")

    def __init__(self, queued: int = 0) -> None:
        self._arrived = queued  # fragments taken in so far (the recovered queue content first)
        self._left = 0  # fragments that left the queues so far
        self._passes: deque[tuple[float, int, int]] = deque()  # (arrival time, first, end)
        self.histogram = Histogram(LATENCY_BUCKETS)

    def arrived(self, t: float, fragments: int) -> None:
        """An intake pass took ``fragments`` in at ``t``."""
        if fragments:
            self._passes.append((t, self._arrived, self._arrived + fragments))
            self._arrived += fragments

    def left(self, t: float, queued: int) -> None:
        """After an orderer call at ``t``: ``queued`` fragments remain in the queues."""
        done = self._arrived - queued
        passes = self._passes
        while passes and self._left < done:
            arrival, first, end = passes[0]
            upto = min(end, done)
            part = upto - max(self._left, first)
            if part > 0:
                self.histogram.observe(max(0.0, t - arrival), part)
            self._left = upto
            if upto == end:
                passes.popleft()
        self._left = max(self._left, done)


@functools.cache
def _version() -> str:
    """The installed evb's version (``evb --version``); "unknown" when run from a bare tree."""
    try:
        return importlib.metadata.version("evb")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def directory_bytes(directory: Path) -> int:
    """Bytes of the files in ``directory`` (a log's segments); files deleted meanwhile (by
    retention) count 0."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return total


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything one scrape reports, taken at one moment on the service's thread."""

    counters: Mapping[str, Any]
    """``Orderer.counters()``: the ``evb replay --stats`` layout."""
    states: Mapping[int, Mapping[str, Any]]
    """``Orderer.source_states()``: queued, paused, ended, dead, last arrival per source."""
    output_offset: int
    """Offset the next durable ordered fragment gets."""
    high_water_mark: int | None
    submit_streams: int
    subscribers: int
    now: float = 0.0
    """The service's clock (the time base of ``last_arrival``)."""
    run_ended: bool = False
    """The current run has ended (``evb end-run``) and all its output is durable."""
    waiting_since: float = 0.0
    """The service's clock when the orderer began waiting for its declared sources, from which
    one that never sent counts as idle: the clock's origin, 0 at the data directory's first
    start (a restart resumes the clock at the last logged record, so the time the orderer was
    down is not counted)."""
    barriers: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Resolved barriers by (completeness, homogeneity)."""
    latency: HistogramData | None = None
    """Arrival-to-emission latency (:class:`ArrivalLatency`)."""
    fsync: Mapping[str, HistogramData] = field(default_factory=dict)
    """fsync durations per log (``arrival``, ``ordered``)."""
    log_bytes: Mapping[str, int] = field(default_factory=dict)
    """Bytes on disk per log (``arrival``, ``ordered``)."""
    volume: tuple[int, int] | None = None
    """(free bytes, size in bytes) of the log volume."""
    degraded: bool = False
    """The log volume refuses writes (input refused until a retry succeeds)."""
    consumers: Mapping[str, int] = field(default_factory=dict)
    """Committed offset per consumer."""
    consumer_lag_seconds: Mapping[str, float] = field(default_factory=dict)
    """Per consumer: age of the oldest output it has not committed (0: it has everything)."""


class _OrdererCollector(Collector):
    def __init__(self, snapshot: Callable[[], MetricsSnapshot], role: SliceRole) -> None:
        self._snapshot = snapshot
        self._role = role

    def collect(self) -> Iterator[Metric]:
        families = self._families(self._snapshot())
        if not self._role.sliced:
            yield from families
            return
        index = str(self._role.index)
        for family in families:
            family.samples = [
                sample._replace(labels={**sample.labels, "orderer": index})
                for sample in family.samples
            ]
            yield family

    def _families(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        yield from _per_source(snap)
        barriers = CounterMetricFamily(
            "evb_barriers",
            "Barriers resolved; each counted once, by completeness and homogeneity.",
            labels=["completeness", "homogeneity"],
        )
        for (completeness, homogeneity), value in sorted(snap.barriers.items()):
            barriers.add_metric([completeness, homogeneity], float(value))
        yield barriers
        if snap.latency is not None:
            yield HistogramMetricFamily(
                "evb_emission_latency_seconds",
                "Arrival to emission (flush) of fragments, matched first in, first out.",
                buckets=snap.latency.buckets(),
                sum_value=snap.latency.total,
            )
        fsync = HistogramMetricFamily(
            "evb_fsync_duration_seconds", "Duration of one fsync of a log.", labels=["log"]
        )
        for name, data in sorted(snap.fsync.items()):
            fsync.add_metric([name], data.buckets(), data.total)
        yield fsync
        yield from _storage(snap)
        yield GaugeMetricFamily(
            "evb_output_offset",
            "Offset of the next fragment of the durable ordered output.",
            value=float(snap.output_offset),
        )
        if snap.high_water_mark is not None:
            yield GaugeMetricFamily(
                "evb_high_water_mark",
                "Largest timestamp of an ordinary fragment emitted so far.",
                value=float(snap.high_water_mark),
            )
        consumers = GaugeMetricFamily(
            "evb_consumer_committed_offset",
            "Offset below which the consumer committed everything (Commit).",
            labels=["consumer"],
        )
        for consumer, offset in sorted(snap.consumers.items()):
            consumers.add_metric([consumer], float(offset))
        yield consumers
        lag = GaugeMetricFamily(
            "evb_consumer_lag_seconds",
            "Age of the oldest durable output the consumer has not committed (0: none).",
            labels=["consumer"],
        )
        for consumer, seconds in sorted(snap.consumer_lag_seconds.items()):
            lag.add_metric([consumer], seconds)
        yield lag
        yield GaugeMetricFamily(
            "evb_submit_streams", "Open Submit streams.", value=float(snap.submit_streams)
        )
        yield GaugeMetricFamily(
            "evb_subscribers", "Open Subscribe streams.", value=float(snap.subscribers)
        )
        yield GaugeMetricFamily(
            "evb_run_ended",
            "1 once the current run ended (evb end-run) and all its output is durable; 0 while"
            " it goes on (evb begin-run starts the next).",
            value=1.0 if snap.run_ended else 0.0,
        )
        info = GaugeMetricFamily(
            "evb_build_info", "Always 1; the version of evb serving.", labels=["version"]
        )
        info.add_metric([_version()], 1.0)
        yield info
        yield GaugeMetricFamily(
            "evb_orderers",
            "N, the orderers of the run this orderer is one of (1: a plain orderer).",
            value=float(self._role.orderers),
        )


def _per_source(snap: MetricsSnapshot) -> Iterator[Metric]:
    """Counters, queue depth, flags and idle time per source."""
    sources = snap.counters.get("sources", {})
    for name, help_text in _PER_SOURCE_COUNTERS.items():
        family = CounterMetricFamily(f"evb_fragments_{name}", help_text, labels=["source"])
        for source, values in sorted(sources.items(), key=lambda kv: int(kv[0])):
            family.add_metric([str(source)], float(values.get(name, 0)))
        yield family
    depth = GaugeMetricFamily(
        "evb_queue_depth", "Fragments waiting in the source's queue.", labels=["source"]
    )
    flags = {
        key: GaugeMetricFamily(name, help_text, labels=["source"])
        for key, (name, help_text) in _PER_SOURCE_FLAGS.items()
    }
    idle = GaugeMetricFamily(
        "evb_source_idle_seconds",
        "Seconds since the source's last arrival (before its first: since the run's start).",
        labels=["source"],
    )
    arrived = GaugeMetricFamily(
        "evb_source_arrived",
        "1 once anything from the source arrived; 0 for a declared source never heard from.",
        labels=["source"],
    )
    for source, state in sorted(snap.states.items()):
        depth.add_metric([str(source)], float(state.get("queued", 0)))
        for key, flag in flags.items():
            flag.add_metric([str(source)], 1.0 if state.get(key) else 0.0)
        last = state.get("last_arrival")
        since = snap.waiting_since if last is None else float(last)
        idle.add_metric([str(source)], max(0.0, snap.now - since))
        arrived.add_metric([str(source)], 0.0 if last is None else 1.0)
    yield depth
    yield from flags.values()
    yield idle
    yield arrived


def _storage(snap: MetricsSnapshot) -> Iterator[Metric]:
    """The logs' sizes, the log volume's space and the degraded flag."""
    sizes = GaugeMetricFamily("evb_log_bytes", "Bytes on disk of a log.", labels=["log"])
    for name, size in sorted(snap.log_bytes.items()):
        sizes.add_metric([name], float(size))
    yield sizes
    if snap.volume is not None:
        free, size = snap.volume
        yield GaugeMetricFamily(
            "evb_log_volume_free_bytes",
            "Bytes free for the service on the log volume.",
            value=float(free),
        )
        yield GaugeMetricFamily(
            "evb_log_volume_size_bytes", "Size of the log volume.", value=float(size)
        )
    yield GaugeMetricFamily(
        "evb_degraded",
        "1 while the log volume refuses writes (input refused, writes retried).",
        value=1.0 if snap.degraded else 0.0,
    )


class ServiceMetrics:
    """A registry of its own (several servers in one process never collide) and, optionally,
    the HTTP endpoint Prometheus scrapes."""

    def __init__(
        self, snapshot: Callable[[], MetricsSnapshot], role: SliceRole | None = None
    ) -> None:
        """``role``: where the orderer stands in its run (None: a plain orderer), which labels
        its series (``orderer``) and gives ``evb_orderers``."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_OrdererCollector(snapshot, role or SliceRole()))
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    def exposition(self) -> bytes:
        """The text format a scrape would get."""
        return generate_latest(self.registry)

    def start_http(self, port: int, address: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` on ``port`` (0: any free port); returns the port."""
        self._httpd, self._thread = start_http_server(port, addr=address, registry=self.registry)
        return int(self._httpd.server_port)

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
