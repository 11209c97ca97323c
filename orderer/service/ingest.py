"""What the orderer's thread does: raw ``Submit`` messages into intake passes, the loop's
commands in turn with them, and a :class:`~orderer.service.orderer_thread.Step` for the loop
after every orderer call.

Why apart from :class:`~orderer.service.orderer_service.OrdererService`: the service lives on
the event loop and owns what the loop owns (streams, acks, the write rounds, the timer); this
class owns what the orderer's thread owns (the orderer, the clock of input times, the sequence
numbers that deduplicate resends, the intake) and touches nothing of the loop's. What it makes
of a cycle crosses over as steps, in order.

Why that is still the ordering contract: a cycle's messages are taken in as one intake pass at
one arrival time (:mod:`~orderer.service.intake`), strictly after every earlier time, and its
arrival records carry that time; a command runs between two passes at a time of its own. The
arrival log therefore replays to the very output the live service produced, as before.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.clock import MonotonicClock
from orderer.errors import EvbError, InterfaceError, ServiceUnavailable
from orderer.service.intake import Intake, IntakePass
from orderer.service.orderer_thread import Command, OrdererThread, Step
from orderer.service.payload_rows import rows_of
from orderer.service.slices import PieceCutter, SliceOwner
from orderer.service.submit_stream import END_OF_STREAM, SubmitStream
from orderer.wire import submit

__all__ = ["Ingest"]

log = logging.getLogger("evb.service")


class Ingest:
    """The orderer and its input, driven by the orderer's thread.

    The loop queues messages (:meth:`put_message`, :meth:`end_stream`) and commands
    (:meth:`call`, :meth:`advance_soon`); reads of the orderer from another thread take
    :attr:`lock`, which the thread holds around each cycle."""

    def __init__(
        self,
        orderer: Orderer,
        *,
        resume_time: float,
        next_sequence: Iterable[tuple[int, int]],
        run_ended: bool,
        limits: submit.BatchLimits,
        taken_offset: int,
        arrival_rows: int,
        unwritten_room: Callable[[int, int], bool],
        refusal: Callable[[], ServiceUnavailable | None],
        deliver: Callable[[list[Step]], None],
        on_error: Callable[[BaseException], None],
        owner: SliceOwner | None = None,
        cutter: PieceCutter | None = None,
    ) -> None:
        self.orderer = orderer
        self.limits = limits
        self._owner = owner
        """Orderer K of N > 1: the ordinary fragments of other orderers' slices are refused.
        None (a plain orderer): nothing is checked, at no cost."""
        self._cutter = cutter
        """With a slice length: each output taken is cut into pieces for the slice index."""
        self.lock = threading.Lock()
        """Held by the orderer's thread around each cycle; another thread that reads the
        orderer (statistics, metrics) takes it too."""
        self.next_sequence: dict[int, int] = dict(next_sequence)
        """Per source, the sequence number of the next new fragment (written by the thread)."""
        self.run_ended = run_ended
        """The run ended and no fragment came since (as input goes: the loop learns it from the
        steps, once staged)."""
        self._clock = MonotonicClock(start=resume_time)
        self._last_time = resume_time
        self._refusal = refusal
        self._unwritten_room = unwritten_room
        self._records_taken = 0  # arrival-log rows of every step made so far
        self._bytes_taken = 0  # and their payload bytes
        self._arrival_rows = arrival_rows
        """Rows the arrival log held when the thread began: the next record's row is this plus
        ``_records_taken`` (steps are written in the order they are made)."""
        self.stopping = False
        """Set by the loop when input stops: what is queued goes in whatever the writes."""
        self.closed = False
        """Input is refused from here on (set in turn, after what was queued before)."""
        self._intake = Intake()
        self._refused: list[tuple[Any, BaseException]] = []
        self._new_sources: list[tuple[Any, int]] = []
        self._taken_offset = taken_offset
        """Output below this offset has been taken out of the core."""
        self._thread = OrdererThread(asyncio.get_running_loop(), self._cycle, deliver, on_error)

    # ------------------------------------------------------------------ the loop's side

    def put_message(self, stream: SubmitStream, data: bytes) -> None:
        self._thread.put((stream, data), len(data))

    def end_stream(self, stream: SubmitStream) -> None:
        """The client closed ``stream``: once everything it sent before is staged, the stream
        is owed an "everything is durable" and ends."""
        self._thread.put((stream, None))

    def call(self, run: Callable[[], Step], future: asyncio.Future[tuple[Any, int]]) -> None:
        """Run ``run`` on the orderer's thread after everything queued before it; ``future``
        gets its value and the generation that makes it durable, or its refusal."""
        self._thread.put(Command(run, future))

    def advance_soon(self, deadline: float) -> None:
        """A deadline passed: the orderer advances to it (or later) in turn."""
        self._thread.put(Command(lambda: self._advance(deadline)))

    def close_input(self, closed: asyncio.Future[tuple[Any, int]]) -> None:
        """Input queued before now is still taken in; what comes after is refused."""
        self.stopping = True
        self._thread.room_to_take()
        self._thread.put(Command(self._close, closed))

    def written(self) -> None:
        """A write round ended: input held back for the writes may go in."""
        self._thread.room_to_take()

    async def room(self) -> None:
        await self._thread.room()

    async def stop(self) -> None:
        """Everything queued is taken in (or refused); then the thread ends."""
        await self._thread.stop()

    def peek(self) -> float:
        """Now on the orderer's clock, never before the last input's time."""
        return max(self._clock.now(), self._last_time)

    def clock(self) -> float:
        """Now on the orderer's clock (to turn its times into wall time)."""
        return self._clock.now()

    # ------------------------------------------------------------------ the thread's side

    def _tick(self, at_least: float = -math.inf) -> float:
        """The time of the next input or flush: the clock, but strictly after every time used
        before (a record at a flush's time would replay before that flush, not after)."""
        now = max(self._clock.now(), math.nextafter(self._last_time, math.inf), at_least)
        self._last_time = now
        return now

    def _cycle(self, items: list[Any], steps: list[Step]) -> list[Any]:
        """One cycle: the messages into one intake pass, a command between passes, the output
        taken out of the core at the end; returns what it left for later: everything from
        the first message that would take the arrival records not yet written past
        ``max_unwritten`` (the writes are behind: what the loop has read waits as raw bytes,
        and the loop stops reading once that queue is full)."""
        left: list[Any] = []
        with self.lock:
            for k, item in enumerate(items):
                if item.__class__ is tuple:
                    stream, data = item
                    if data is None:
                        self._intake.owe_ack(stream, END_OF_STREAM, 0)
                    elif not stream.refused:
                        if not self._room_for(self._intake.records, self._intake.payload_bytes):
                            left = items[k:]
                            break
                        self._take(stream, data)
                    continue
                self._pass(steps)
                try:
                    step = item.run()
                except EvbError as error:
                    step = Step(error=error)
                step.future = item.future
                self._append(steps, step)
            self._pass(steps)
            if steps and self.orderer.emitted_seq > self._taken_offset:
                # the output leaves the core at every cycle: warm buffers (PASS_MESSAGES)
                emitted = rows_of(self.orderer.take_emitted())
                self._taken_offset = emitted.first_seq + len(emitted)
                steps[-1].emitted = emitted
                if self._cutter is not None:
                    steps[-1].pieces = self._cutter.cut(emitted)
        return left

    def _room_for(self, pending: int, pending_bytes: int) -> bool:
        """Whether the next message may go in: the arrival-log rows taken in and not yet
        written, and their payload bytes (with ``pending`` rows and ``pending_bytes`` of the
        pass being made), are under ``max_unwritten`` and ``max_unwritten_bytes``, or input is
        stopping or refused (then the cap no longer holds anything back)."""
        if self.stopping or self._refusal() is not None:
            return True
        return self._unwritten_room(
            self._records_taken + pending, self._bytes_taken + pending_bytes
        )

    def _take(self, stream: SubmitStream, data: bytes) -> None:
        """One message into the intake: decoded, checked and deduplicated against the sequence
        numbers held by one compiled call (which only reads them), or the stream refused."""
        try:
            self._check()
            item = submit.decode_submit(data, self.limits, self.next_sequence)
            if self._owner is not None and isinstance(item, submit.IncomingBatch):
                self._owner.check(item.batch)  # before anything of the message is taken
        except EvbError as error:
            log.warning("Submit stream refused: %s", error)
            self._refuse(stream, error)
            return
        except Exception as error:  # a bug met by one client's message: that stream ends
            log.exception("Submit stream failed")
            self._refuse(stream, error)
            return
        intake = self._intake
        if isinstance(item, submit.IncomingBatch):
            sources = stream.sources
            for source in item.sources:
                if source not in sources:
                    sources.add(source)
                    self._new_sources.append((stream, source))
            if item.source is None or item.next_sequence is None:
                intake.add_batch(item.batch, None)
                return
            if len(item.batch):
                intake.add_batch(item.batch, item.first_sequence)
                self.next_sequence[item.source] = item.next_sequence
            intake.owe_ack(stream, item.source, item.next_sequence)
            return
        if item.source not in stream.sources:
            stream.sources.add(item.source)
            self._new_sources.append((stream, item.source))
        if isinstance(item, submit.WatermarkItem):
            intake.add_watermark(item.source, item.watermark)
        else:
            intake.add_end_of_source(item.source)

    def _refuse(self, stream: SubmitStream, error: BaseException) -> None:
        """The stream ends with ``error`` once what it sent before is staged; the thread drops
        what it sent after."""
        stream.refused = True
        self._refused.append((stream, error))

    def _pass(self, steps: list[Step]) -> None:
        """The intake so far as one pass at one arrival time (see intake.py), if anything is
        there."""
        if not self._intake and not self._refused and not self._new_sources:
            return
        taken = self._intake.take()
        taken.first_row = self._arrival_rows + self._records_taken
        if taken.batches or taken.markers:
            # the decoder checked every batch as the core does: the core cannot refuse one here
            step = self._called(self._tick(), taken.run)
            step.rows = taken
            step.fragments = taken.fragments
            if taken.fragments:
                step.run_ended = self.run_ended = False
        else:
            step = Step()
        step.acks = taken.acks
        step.refused, self._refused = self._refused, []
        step.sources, self._new_sources = self._new_sources, []
        self._append(steps, step)

    def _append(self, steps: list[Step], step: Step) -> None:
        """A step made, its arrival-log rows counted against ``max_unwritten``."""
        if isinstance(step.rows, IntakePass):
            self._records_taken += step.rows.records
            self._bytes_taken += step.rows.payload_bytes
        elif step.rows is not None:
            self._records_taken += len(step.rows)
            self._bytes_taken += int(step.rows.payload.shape[0])
        steps.append(step)

    def _called(self, now: float, call: Callable[[Orderer, float], object]) -> Step:
        """``call(orderer, now)``, and the step it makes."""
        orderer = self.orderer
        call(orderer, now)
        return Step(
            called=True,
            t=now,
            flows=orderer.take_flow_signals(),
            barriers=orderer.take_barrier_log(),
            queued=orderer.queued,
            deadline=orderer.next_deadline(),
            high_water_mark=orderer.high_water_mark,
        )

    # ------------------------------------------------------------------ commands (thread)

    def _refused_now(self) -> ServiceUnavailable | None:
        if self.closed:
            return ServiceUnavailable("the orderer is shutting down; reconnect and resend")
        return self._refusal()

    def _check(self) -> None:
        refusal = self._refused_now()
        if refusal is not None:
            raise refusal

    def _close(self) -> Step:
        self.closed = True
        return Step()

    def _advance(self, deadline: float) -> Step:
        if self._refused_now() is not None:
            return Step()
        return self._called(self._tick(at_least=deadline), lambda o, now: o.advance(now))

    def configure(self, changes: dict[str, Any]) -> Step:
        """A live change of parameters, checked first (``ConfigError`` names the parameter);
        value: the new configuration."""
        self._check()
        new = self.orderer.config.with_changes(**changes)
        step = self._called(self._tick(), lambda o, now: o.configure(new, now=now))
        step.rows = ArrivalRecords.configure(changes)
        step.value = new
        return step

    def set_source_state(self, source: int, dead: bool) -> Step:
        """Mark ``source`` dead by hand or revive it; value: ``(known, dead now)``."""
        self._check()
        declared = self.limits.sources
        if declared is not None and source not in declared:
            raise InterfaceError(
                f"source: {source} is not a declared source",
                hint=f"the server accepts only {sorted(declared)}",
            )
        known_sources = self.orderer.source_ids
        if source not in known_sources:
            raise InterfaceError(
                f"source: {source} is not known to this orderer (known: "
                f"{', '.join(map(str, known_sources)) or 'none yet'})",
                hint="a source is known once declared (--sources) or once it has sent anything",
            )
        known = [False]

        def mark(orderer: Orderer, now: float) -> None:
            known[0] = orderer.set_source_state(source, dead, now=now)

        step = self._called(self._tick(), mark)
        step.rows = ArrivalRecords.source_state(source, dead)
        states = self.orderer.source_states(now=step.t)
        step.value = (known[0], bool(states.get(source, {}).get("dead", dead)))
        return step

    def end_run(self) -> Step:
        """The spec's end of run: every queue drained now."""
        self._check()
        step = self._called(self._tick(), lambda o, now: o.end_run(now=now))
        step.rows = ArrivalRecords.marker(ArrivalKind.END_RUN)
        step.run_ended = self.run_ended = True
        return step

    def begin_run(self, number: int, current: int) -> Step:
        """The record of the next run's beginning (the orderer itself is untouched)."""
        self._check()
        if not self.run_ended:
            raise InterfaceError(
                f"run {current} has not ended",
                hint="end it first (evb end-run); a run begins only after the previous one ended",
            )
        if number <= current:
            raise InterfaceError(
                f"run: {number} is not above the current run {current}",
                hint="run numbers increase from run to run",
            )
        self.run_ended = False
        now = self._tick()
        step = Step(t=now, rows=ArrivalRecords.marker(ArrivalKind.BEGIN_RUN, value=number))
        step.value = number
        return step
