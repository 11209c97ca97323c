"""The service's one deadline timer: a ``loop.call_later`` on the orderer's next deadline,
re-armed after every orderer call (as its step says), so that nothing polls.

Why a class of its own: the deadline is the orderer's, read on its thread and reported with
each step (:class:`~orderer.service.orderer_thread.Step`); the timer only has to wake the
orderer's thread when that time comes (:meth:`~orderer.service.ingest.Ingest.advance_soon`),
once, and never after the service stopped taking input.

Used by :class:`~orderer.service.orderer_service.OrdererService`; runs on its loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

__all__ = ["DeadlineTimer"]


class DeadlineTimer:
    """One timer on the orderer's next deadline: ``due(deadline)`` runs on the loop when it
    comes (``clock``: the orderer's time now), unless ``stopped()`` says by then that the
    service takes no more input."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        due: Callable[[float], None],
        stopped: Callable[[], bool],
    ) -> None:
        self._clock = clock
        self._due = due
        self._stopped = stopped
        self._timer: asyncio.TimerHandle | None = None
        self.at: float | None = None
        """The deadline the timer is armed on (None: not armed)."""

    def rearm(self, deadline: float | None) -> None:
        """One timer, on the orderer's next deadline (as the last step said); None, or a
        stopped service: none."""
        if self._stopped():
            deadline = None
        if deadline is not None and deadline == self.at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.at = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, deadline - self._clock())
        self._timer = loop.call_later(delay, self._on_deadline)
        self.at = deadline

    def _on_deadline(self) -> None:
        deadline = self.at if self.at is not None else -math.inf
        self._timer = self.at = None
        if self._stopped():
            return
        self._due(deadline)
