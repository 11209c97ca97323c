"""One ``Submit`` call as the service sees it: the sources it speaks for, the acks it is owed
once the arrival log is durable, and the replies waiting to go out.

Why a class of its own: the service (:mod:`orderer.service.orderer_service`) owes acks and
signals flow control to a stream from wherever its input is taken in or made durable, while the
servicer (:mod:`orderer.service.servicer`) sends the stream's replies from the call's task; the
stream is the queue between them, bounded (one ack per source, flow signals only on
transitions), so a client that does not read its replies holds little memory.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from orderer.errors import ServiceUnavailable

__all__ = ["ACK", "END_OF_STREAM", "FLOW", "SubmitStream"]

ACK, FLOW = 0, 1
END_OF_STREAM = -1  # an owed "everything this stream sent is durable" (no ack message)


class SubmitStream:
    """One ``Submit`` call as the service sees it: the sources it speaks for, the acks it is owed
    once the arrival log is durable, and the replies waiting to go out (bounded: one ack per
    source, flow signals only on transitions). What ``GetStats`` lists of it as a connection
    (peer, since, messages, bytes, last ack per source) is counted here as it goes."""

    __slots__ = (
        "_acks",
        "_flow",
        "_unsynced",
        "_wake",
        "acked",
        "bytes",
        "error",
        "messages",
        "peer",
        "reading",
        "refused",
        "since",
        "sources",
    )

    def __init__(self, peer: str = "") -> None:
        self.peer = peer
        """gRPC peer address of the client (``ipv4:10.1.2.3:51234``)."""
        self.since = time.time()
        """Unix time the stream opened."""
        self.messages = 0
        """Requests received on it."""
        self.bytes = 0
        """Serialized bytes of those requests."""
        self.acked: dict[int, int] = {}
        """Per source: the last durable sequence released to the client as an ack."""
        self.sources: set[int] = set()
        self.reading = True
        self.refused = False
        """Its input was refused (set by the orderer's thread, which drops what follows)."""
        self.error: BaseException | None = None
        self._unsynced: deque[tuple[int, int, int]] = deque()  # (generation, source, sequence)
        self._acks: dict[int, int] = {}
        self._flow: dict[int, bool] = {}  # latest pause state per source not sent yet
        self._wake = asyncio.Event()

    def owe_ack(self, generation: int, source: int, sequence: int) -> None:
        self._unsynced.append((generation, source, sequence))

    def release(self, synced_generation: int) -> None:
        """Everything written up to ``synced_generation`` is durable: its acks may go out."""
        released = False
        while self._unsynced and self._unsynced[0][0] <= synced_generation:
            _, source, sequence = self._unsynced.popleft()
            if source != END_OF_STREAM:
                self._acks[source] = max(sequence, self._acks.get(source, 0))
                self.acked[source] = max(sequence, self.acked.get(source, 0))
            released = True
        if released:
            self._wake.set()

    def signal(self, source: int, paused: bool) -> None:
        self._flow.pop(source, None)  # keeps the latest, at the end
        self._flow[source] = paused
        self._wake.set()

    def finish(self, error: BaseException | None = None) -> None:
        """No more input on this stream (the client closed it, it sent bad input, or the service
        is shutting down); owed acks still go out once durable."""
        self.reading = False
        if error is not None and self.error is None:
            self.error = error
        self._wake.set()

    def abandon(self) -> None:
        """The storage failed: owed acks will never be durable."""
        self._unsynced.clear()
        self.finish(ServiceUnavailable("the orderer's storage failed; reconnect later"))

    def received(self, size: int) -> None:
        """One request of ``size`` serialized bytes came in on the stream."""
        self.messages += 1
        self.bytes += size

    async def replies(self) -> AsyncIterator[tuple[int, int, Any]]:
        """``(ACK, source, durable_sequence)`` and ``(FLOW, source, paused)`` until the stream is
        finished and owes nothing."""
        while True:
            if self._flow:
                source = next(iter(self._flow))
                yield FLOW, source, self._flow.pop(source)
            elif self._acks:
                source, sequence = self._acks.popitem()
                yield ACK, source, sequence
            elif not self.reading and not self._unsynced:
                return
            else:
                self._wake.clear()
                await self._wake.wait()
