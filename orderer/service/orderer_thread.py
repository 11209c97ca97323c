"""The orderer's thread: every call into the orderer runs on it, in arrival order, off the event
loop's thread (what it does in each cycle: :mod:`~orderer.service.ingest`).

Why a thread of its own: the event loop's thread receives every message and sends every
acknowledgement; it is one core at most, and the bare gRPC server needs a third of it for that
alone. Decoding a message, the orderer's submit and the output it emits cost as much again per
fragment, so on the loop they made the loop's thread the ceiling of one pod whatever its cores.
Here the loop only queues each message's raw bytes (:meth:`OrdererThread.put`); this thread
takes what is queued in *cycles*, decodes, checks, deduplicates and takes in a cycle's messages
as one intake pass, and hands the loop back one :class:`Step` per orderer call
(:meth:`OrdererThread.post`). The compiled parts it calls (decoder, core) run without the GIL,
so the loop runs meanwhile.

Why one thread and not a pool: the orderer is one state machine and its input must keep the
arrival order (the arrival log replays to the same output only so); one thread keeps that order
without a lock around every call. Commands from the loop (a configure, an end of run, a
deadline) are queued with the messages, so they see exactly the input received before them.

What crosses back is plain data: the loop stages a step's arrival records and output for the
write rounds, owes its acks, relays its flow signals and re-arms the deadline timer, in the
order of the steps (the generation of each, and with it when its acks may go out, follows
that order).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orderer.api import FlowSignal
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.service.intake import IntakePass
from orderer.service.slices import PieceCut
from orderer.service.threads import name_this_thread

__all__ = ["MAX_QUEUED_BYTES", "PASS_MESSAGES", "Command", "OrdererThread", "Step"]

PASS_MESSAGES = 32
"""Messages taken in one cycle at most (one intake pass, one take of the output): enough that a
cycle's fixed cost is spread over tens of thousands of fragments, few enough that the output
taken at its end stays in warm buffers (a take per 256,000 fragments made the core's submit
2.6 times dearer than one per 16,000: page faults) and that acks leave every few milliseconds."""

MAX_QUEUED_BYTES = 8 << 20
"""Bytes of raw messages queued for the orderer's thread past which the loop stops reading
Submit streams (HTTP/2 flow control then holds the clients back) until the thread catches up.
A few cycles' worth: what is queued here is input the orderer's flow control does not see yet
(with 32 MiB, a stalled run took in 5.19 M fragments before its sources paused against 4.36 M
with the orderer on the loop's thread; with 8 MiB 4.47 M), and more does not ingest faster."""


@dataclass(slots=True)
class Step:
    """What one orderer call (or a cycle's bookkeeping without one) hands back to the loop."""

    called: bool = False
    """An orderer call ran (its effects must be written and made durable: a new generation)."""
    t: float = 0.0
    """The call's time."""
    rows: IntakePass | ArrivalRecords | None = None
    """Its arrival records: an intake pass, or the record of a command."""
    fragments: int = 0
    """Fragments the call took in."""
    emitted: EmittedBatch | None = None
    """Output taken out of the core after the call, for the ordered log."""
    pieces: PieceCut | None = None
    """How that output falls into pieces, for the slice index (an orderer with a slice
    length only)."""
    acks: list[tuple[Any, int, int]] = field(default_factory=list)
    """``(stream, source, durable sequence)`` owed once this step is durable (source
    ``END_OF_STREAM``: everything the stream sent)."""
    sources: list[tuple[Any, int]] = field(default_factory=list)
    """``(stream, source)``: a stream speaks for a source it had not sent for before (the
    flow-control state of the source is owed to it)."""
    refused: list[tuple[Any, BaseException]] = field(default_factory=list)
    """Streams whose input was refused, with the reason (they end with it)."""
    flows: list[FlowSignal] = field(default_factory=list)
    barriers: list[dict[str, Any]] = field(default_factory=list)
    """Barriers the call resolved (the barrier log)."""
    queued: int = 0
    """Fragments still queued in the orderer after the call."""
    deadline: float | None = None
    """The orderer's next deadline after the call."""
    high_water_mark: int | None = None
    """The orderer's high-water mark after the call."""
    run_ended: bool | None = None
    """The run ended (True) or took fragments again (False); None: unchanged."""
    value: Any = None
    """A command's result."""
    error: BaseException | None = None
    """A command's refusal (nothing was changed)."""
    future: asyncio.Future[tuple[Any, int]] | None = None
    """A command's caller: ``(value, generation)`` once the loop has staged the step."""


@dataclass(slots=True)
class Command:
    """A call from the loop, run on the orderer's thread in turn with the messages before it."""

    run: Callable[[], Step]
    future: asyncio.Future[tuple[Any, int]] | None = None


_STOP = object()


class OrdererThread:
    """The thread that owns the orderer: a queue in (raw messages and commands, in arrival
    order), steps out (to ``deliver`` on the loop, in order).

    ``cycle(items, steps)`` runs on the thread for each cycle's items, appends the steps it
    makes and returns the items it left for later (the writes are behind: it waits for
    :meth:`room_to_take`, then takes them first); ``deliver(steps)`` runs on the loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        cycle: Callable[[list[Any], list[Step]], list[Any]],
        deliver: Callable[[list[Step]], None],
        on_error: Callable[[BaseException], None],
        name: str = "evb-orderer",
    ) -> None:
        self._loop = loop
        self._cycle, self._deliver_steps, self._on_error = cycle, deliver, on_error
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._steps: deque[Step] = deque()
        self._delivery_scheduled = False
        self._put_bytes = 0  # written by the loop only
        self._taken_bytes = 0  # written by the thread only
        self._room = asyncio.Event()
        self._room.set()
        self._written = threading.Event()  # set by the loop after every write round
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the loop's side

    def put(self, item: Any, size: int = 0) -> None:
        """Queue a message (``(stream, raw bytes)``, ``(stream, None)`` for its end) or a
        :class:`Command`."""
        self._queue.append(item)
        self._put_bytes += size
        if not self._wake.is_set():
            self._wake.set()
        if self._put_bytes - self._taken_bytes > MAX_QUEUED_BYTES:
            self._room.clear()

    async def room(self) -> None:
        """Returns at once unless :data:`MAX_QUEUED_BYTES` are queued; then once the thread
        has taken the queue below half of that."""
        if not self._room.is_set():
            await self._room.wait()

    def room_to_take(self) -> None:
        """A write round ended (or input is no longer held to the writes): the thread looks
        again at what it left."""
        self._written.set()

    @property
    def queued_bytes(self) -> int:
        return self._put_bytes - self._taken_bytes

    async def stop(self) -> None:
        """Let the thread take everything queued, then end it."""
        if self._thread.is_alive():
            self.put(_STOP)
            await asyncio.to_thread(self._thread.join)
        self._deliver()

    def _deliver(self) -> None:
        self._delivery_scheduled = False
        steps = self._steps
        taken = [steps.popleft() for _ in range(len(steps))]
        if self._put_bytes - self._taken_bytes <= MAX_QUEUED_BYTES // 2:
            self._room.set()
        if taken:
            self._deliver_steps(taken)

    # ------------------------------------------------------------------ the thread's side

    def _post(self, steps: list[Step]) -> None:
        self._steps.extend(steps)
        if not self._delivery_scheduled:
            self._delivery_scheduled = True
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to tell
                self._loop.call_soon_threadsafe(self._deliver)

    def _run(self) -> None:
        name_this_thread(self._thread.name)
        queue, wake = self._queue, self._wake
        while True:
            wake.wait()
            wake.clear()
            while queue:
                items: list[Any] = []
                while queue and len(items) < PASS_MESSAGES and queue[0] is not _STOP:
                    items.append(queue.popleft())
                self._written.clear()
                left = self._finish(items) if items else []
                if left:  # the writes are behind: these wait, first in the queue
                    queue.extendleft(reversed(left))
                    self._written.wait(1.0)
                elif queue and queue[0] is _STOP:
                    return

    def _finish(self, items: list[Any]) -> list[Any]:
        """One cycle; what it left for later."""
        steps: list[Step] = []
        left: list[Any] = []
        try:
            if items:
                left = self._cycle(items, steps)
        except BaseException as error:  # the orderer is in doubt: the service fails
            self._report(error)
        finally:
            taken = items[: len(items) - len(left)]
            self._taken_bytes += sum(
                len(item[1]) for item in taken if item.__class__ is tuple and item[1] is not None
            )
            self._post(steps)
        return left

    def _report(self, error: BaseException) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_error, error)
