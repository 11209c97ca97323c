"""When to try a lost connection again, and when to give up: exponential backoff with jitter,
bounded by ``reconnect_timeout``.

Why one module: a source client whose ``Submit`` stream ended and a reader whose ``Subscribe``
stream ended wait the same way before they reconnect (a server restarting is ridden out; many
clients do not come back in lockstep), and give up the same way once the orderer has been
unreachable for ``reconnect_timeout`` seconds.
"""

from __future__ import annotations

import random
import time

import grpc

from orderer.client.connect import FATAL_CODES, error_of
from orderer.wire.security import ChannelSecurity

__all__ = ["Reconnects"]


class Reconnects:
    """The waits between the attempts to reconnect, counted since the last answer of the
    server."""

    __slots__ = ("_attempt", "_ceiling", "_down_since", "_initial", "_timeout")

    def __init__(self, backoff: tuple[float, float], reconnect_timeout: float | None) -> None:
        self._initial, self._ceiling = backoff
        self._timeout = reconnect_timeout
        self._attempt = 0
        self._down_since: float | None = None

    def answered(self) -> None:
        """The server answered: the next loss starts the backoff and its timeout afresh."""
        self._attempt, self._down_since = 0, None

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt; None when ``reconnect_timeout`` passed
        since the connection was lost."""
        if self._down_since is None:
            self._down_since = time.monotonic()
        if self._timeout is not None and time.monotonic() - self._down_since > self._timeout:
            return None
        factor = 2.0 ** min(self._attempt, 30)
        delay = min(self._ceiling, self._initial * factor) * random.uniform(0.5, 1.0)
        self._attempt += 1
        return delay

    def delay_or_raise(
        self,
        code: grpc.StatusCode,
        details: str | None,
        target: str,
        security: ChannelSecurity | None,
    ) -> float:
        """Seconds to wait before a stream that ended with ``code`` is asked again; raises
        the status as an evb error when a retry cannot cure it or ``reconnect_timeout``
        passed."""
        delay = None if code in FATAL_CODES else self.next_delay()
        if delay is None:
            raise error_of(code, details, target, security) from None
        return delay
