"""Prometheus metrics of the orderer service, each server with its own ``CollectorRegistry``.

Why a collector and not counters bumped per batch: the orderer already counts everything
(``Orderer.counters()``), so the metrics are read from it at scrape time and the hot path pays
nothing. The scrape runs in the HTTP server's thread while the orderer lives on the asyncio loop,
so the service hands over a :class:`MetricsSnapshot` taken on its own thread (``snapshot`` is a
thread-safe callable); this module never touches the orderer.

Names use the vocabulary of docs/ordering.md: ``evb_fragments_received_total{source}``,
``evb_fragments_late_total{source}``, ``evb_queue_depth{source}``, ``evb_barriers_total{kind}``,
``evb_output_offset``, ``evb_ingest_rate``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["MetricsSnapshot", "RateMeter", "ServiceMetrics"]

_PER_SOURCE_COUNTERS = {
    "received": "Fragments received from the source (duplicates of resends excluded).",
    "emitted": "Fragments of the source emitted in the ordered output.",
    "late": "Late fragments of the source (below the high-water mark when merged).",
    "dropped": "Late fragments of the source dropped under late_policy drop.",
}


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything one scrape reports, taken at one moment on the service's thread."""

    counters: Mapping[str, Any]
    """``Orderer.counters()``: the ``evb replay --stats`` layout."""
    states: Mapping[int, Mapping[str, Any]]
    """``Orderer.source_states()``: queued, paused, ended, dead per source."""
    output_offset: int
    """Offset the next durable ordered fragment gets."""
    high_water_mark: int | None
    ingest_rate: float
    """Fragments received per second over the last few seconds."""
    submit_streams: int
    subscribers: int


class RateMeter:
    """Events per second over a sliding window of one-second buckets (bounded memory)."""

    __slots__ = ("_buckets", "_window")

    def __init__(self, window: float = 10.0) -> None:
        self._window = int(window)
        self._buckets: deque[list[float]] = deque()  # [second, count]

    def add(self, now: float, count: int) -> None:
        second = float(int(now))
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += count
        else:
            self._buckets.append([second, float(count)])
        self._prune(now)

    def _prune(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] < now - self._window:
            self._buckets.popleft()

    def rate(self, now: float) -> float:
        self._prune(now)
        return sum(count for _, count in self._buckets) / self._window


class _OrdererCollector(Collector):
    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        snap = self._snapshot()
        sources = snap.counters.get("sources", {})
        for name, help_text in _PER_SOURCE_COUNTERS.items():
            family = CounterMetricFamily(f"evb_fragments_{name}", help_text, labels=["source"])
            for source, values in sorted(sources.items(), key=lambda kv: int(kv[0])):
                family.add_metric([str(source)], float(values.get(name, 0)))
            yield family
        depth = GaugeMetricFamily(
            "evb_queue_depth", "Fragments waiting in the source's queue.", labels=["source"]
        )
        paused = GaugeMetricFamily(
            "evb_source_paused", "1 while the source is asked to pause (XOFF).", labels=["source"]
        )
        for source, state in sorted(snap.states.items()):
            depth.add_metric([str(source)], float(state.get("queued", 0)))
            paused.add_metric([str(source)], 1.0 if state.get("paused") else 0.0)
        yield depth
        yield paused
        barriers = CounterMetricFamily(
            "evb_barriers", "Barriers resolved, by kind.", labels=["kind"]
        )
        for kind, value in sorted(snap.counters.get("barriers", {}).items()):
            barriers.add_metric([kind], float(value))
        yield barriers
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
        yield GaugeMetricFamily(
            "evb_ingest_rate",
            "Fragments received per second (10 s sliding window).",
            value=snap.ingest_rate,
        )
        yield GaugeMetricFamily(
            "evb_submit_streams", "Open Submit streams.", value=float(snap.submit_streams)
        )
        yield GaugeMetricFamily(
            "evb_subscribers", "Open Subscribe streams.", value=float(snap.subscribers)
        )


class ServiceMetrics:
    """A registry of its own (several servers in one process never collide) and, optionally,
    the HTTP endpoint Prometheus scrapes."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_OrdererCollector(snapshot))
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
