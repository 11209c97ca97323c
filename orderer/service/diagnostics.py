"""What ``GetStats`` shows beyond the orderer's counters: the barrier log, and the emit times
behind a consumer's lag in seconds.

Why here and not in the core: the core hands every resolved barrier over once
(``Orderer.take_barrier_log()``), and the service must take them anyway or the list grows; it
keeps the newest :data:`BARRIER_LOG_CAPACITY` of them for a shift crew asking which barrier went
wrong. Nothing of it is written down: recovery replays the whole arrival log, so the restarted
orderer resolves every barrier of the run again, at the same output offsets and times, and the
log is rebuilt from the logs (each barrier once, since the restarted service starts with an empty
log and takes the recovered orderer's list once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from orderer.errors import InterfaceError
from orderer.service.logs import OrderedLog
from orderer.stats import BarrierRecord

__all__ = ["BARRIER_LOG_CAPACITY", "DEFAULT_BARRIER_LOG_LIMIT", "BarrierLog", "EmitTimes"]

BARRIER_LOG_CAPACITY = 10_000
"""Resolved barriers the service keeps (the newest)."""
DEFAULT_BARRIER_LOG_LIMIT = 1000
"""Barriers ``GetStats`` returns when the request does not say (``barrier_log_limit`` 0)."""


class BarrierLog:
    """The newest resolved barriers, oldest first, and the barrier fragments of the whole run by
    type (NSCLDAQ's ``barrierstats``: counts by type), which outlive the bounded list."""

    __slots__ = ("_by_type", "_entries")

    def __init__(self, capacity: int = BARRIER_LOG_CAPACITY) -> None:
        self._entries: deque[BarrierRecord] = deque(maxlen=capacity)
        self._by_type: dict[int, int] = {}

    def add(self, resolved: Iterable[Mapping[str, Any]]) -> None:
        """Entries of ``Orderer.take_barrier_log()``, in resolution order."""
        by_type = self._by_type
        for barrier in resolved:
            types = {int(source): int(kind) for source, kind in barrier.get("types", {}).items()}
            self._entries.append(
                BarrierRecord(
                    offset=int(barrier["offset"]),
                    t=float(barrier["t"]),
                    complete=bool(barrier["complete"]),
                    homogeneous=bool(barrier["homogeneous"]),
                    types=dict(sorted(types.items())),
                    missing=tuple(int(source) for source in barrier["missing"]),
                )
            )
            for kind in types.values():
                by_type[kind] = by_type.get(kind, 0) + 1

    def newest(self, limit: int = 0) -> list[BarrierRecord]:
        """The newest ``limit`` barriers (0: :data:`DEFAULT_BARRIER_LOG_LIMIT`), oldest first."""
        limit = limit or DEFAULT_BARRIER_LOG_LIMIT
        entries = self._entries
        skip = max(0, len(entries) - limit)
        if skip == 0:
            return list(entries)
        return [entries[k] for k in range(skip, len(entries))]

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def by_type(self) -> dict[int, int]:
        """Barrier fragments emitted, by barrier type, over the run (recovered ones included)."""
        return dict(self._by_type)


class EmitTimes:
    """The emit time of an output offset, read from the ordered log once and remembered.

    Why a cache and not an index of every batch: ``GetStats`` wants, per consumer, the emit time
    of the oldest fragment it has not committed, and that offset only changes when the consumer
    commits; one read of the log per commit is exact, where a per-batch index would be off by up
    to a write round's span. Emit times of written output never change."""

    __slots__ = ("_known", "_ordered")

    MAX_KNOWN = 1024
    """Offsets remembered at most (a few per consumer in practice)."""

    def __init__(self, ordered: OrderedLog) -> None:
        self._ordered = ordered
        self._known: dict[int, float] = {}

    def at(self, offset: int) -> float | None:
        """Emit time of the fragment at ``offset`` (or of the oldest one the log still holds, if
        retention removed it); None when the log holds nothing from there."""
        known = self._known.get(offset)
        if known is not None:
            return known
        try:
            batch = self._ordered.read(offset, 1)
        except InterfaceError:  # removed by retention: the oldest left is the best bound
            batch = self._ordered.read(self._ordered.first_offset, 1)
        if not len(batch):
            return None
        if len(self._known) >= self.MAX_KNOWN:
            self._known.clear()
        t = self._known[offset] = float(batch.t[0])
        return t
