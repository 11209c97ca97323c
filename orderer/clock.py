"""Clocks: where the orderer's notion of *now* comes from.

The core never reads a clock itself; every call takes the time explicitly. The :class:`Orderer`
API asks a :class:`Clock`, so the same core runs live (:class:`MonotonicClock`, deadlines served by
timers) and in replay (:class:`SimulatedClock`, time set from each record's ``t``).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "MonotonicClock", "SimulatedClock"]


class Clock(Protocol):
    """Anything that tells the time in seconds, never going backwards."""

    def now(self) -> float: ...


class MonotonicClock:
    """Live time: ``start`` plus the seconds since this clock was created (``time.monotonic``).

    Starting at zero keeps arrival times small, readable and exactly representable in the arrival
    record, so that a recorded live run replays to the same output. A restarted service starts
    where the recovered run stopped, so time never goes backwards across a crash.
    """

    __slots__ = ("_origin", "_start")

    def __init__(self, start: float = 0.0) -> None:
        self._origin = time.monotonic()
        self._start = start

    def now(self) -> float:
        return self._start + (time.monotonic() - self._origin)


class SimulatedClock:
    """Replay time: whatever it was last set to."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"simulated time may not go backwards: {t} < {self._now}")
        self._now = t
