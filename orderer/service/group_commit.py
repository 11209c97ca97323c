"""Group commit: what the service staged for its two logs, written and made durable in rounds.

Why rounds: an fsync costs as much for one record as for a thousand. The service stages what
each intake pass, configure or end of run took in (arrival records) and what the orderer
emitted (taken out of the core on the orderer's thread); one background task then runs write
rounds: each round writes everything staged to the arrival log and then to the ordered log
(which points at the arrival log's rows), each log on a thread of its own, the ordered log's
write beside the arrival log's fsync, forces each to disk with one fsync, and only then
tells the service, which releases the acks and the new output (nothing unwritten is ever
acknowledged or shown to a subscriber).

Generations order this: every orderer call (anything staged) starts a new one
(:meth:`GroupCommit.advance`); an ack or a waiter is owed to the generation that staged its
input, and is released once a round that began at or after that generation is durable.

Storage errors: a write the volume refuses (full, quota) *degrades* the service (input refused,
the round retried every :data:`STORAGE_RETRY` seconds); anything else, such as a failed fsync,
is fatal (the process exits and the restarted one recovers from the logs). Too much staged and
unwritten (:data:`MAX_UNWRITTEN` records) stops the service reading Submit streams until a
round catches up (:meth:`GroupCommit.room_for_input`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.errors import InternalOrdererError, ServiceUnavailable
from orderer.service.intake import IntakePass, arrival_records
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.metrics import FSYNC_BUCKETS, Histogram
from orderer.service.threads import single_thread

__all__ = [
    "JOIN_BYTES",
    "JOIN_RECORDS",
    "MAX_UNWRITTEN",
    "MAX_UNWRITTEN_BYTES",
    "STORAGE_RETRY",
    "GroupCommit",
]

log = logging.getLogger("evb.service")

MAX_UNWRITTEN = 1_000_000
"""Records taken in but not yet written (the disk behind the network). Past this the service
stops reading Submit streams until a write round catches up: HTTP/2 flow control then holds
the clients back, instead of the server's memory growing with the length of the run."""

MAX_UNWRITTEN_BYTES = 256 << 20
"""... or payload bytes taken in but not yet written: at 4 KiB payloads ``MAX_UNWRITTEN``
records alone would be 4 GiB of memory. It is also as much freed memory as the serving process
keeps for its next allocations (``server.py``): the received messages wait here until their
rows are written, and memory given back to the kernel between two bursts of them was faulted in
again page by page on the event loop's thread (the README's Performance)."""

JOIN_RECORDS = 32768
"""Intake passes are joined into arrival-log record batches of about this many rows: a record
batch of tens of thousands of rows stays in the CPU's caches while it is written, where a larger
one does not and a single message's pays the per-batch cost for few rows (the figures: README,
"The service")."""

JOIN_BYTES = 2 << 20
"""... and of at most about this many payload bytes: the joined batch stays in the CPU's caches
while Arrow hands it to the kernel, and below glibc's mmap threshold (``server.py``), so that its
memory is reused from one group to the next instead of mapped, faulted in and unmapped each time
(at 1 KiB payloads, 32,768 rows were 32 MiB)."""

STORAGE_RETRY = 1.0
"""Seconds between attempts to write to a log volume that refused a write (full, quota)."""

_RETRYABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


_Staged = tuple[float | None, ArrivalRecords | list[tuple[float, IntakePass]]]
"""An arrival-log entry to write: records with their time (None: each row carries its own), or
a group of intake passes to join."""


def _records(rows: ArrivalRecords | list[tuple[float, IntakePass]]) -> int:
    """Rows an entry adds to the arrival log."""
    if isinstance(rows, list):
        return sum(taken.records for _, taken in rows)
    return len(rows)


def _payload_bytes(rows: ArrivalRecords | list[tuple[float, IntakePass]]) -> int:
    """Payload bytes an entry adds to the arrival log."""
    if isinstance(rows, list):
        return sum(taken.payload_bytes for _, taken in rows)
    return int(rows.payload.shape[0])


class _Written:
    """A round's arrival records are written (:attr:`event`), and whether they all were
    (:attr:`ok`): the ordered log's thread waits for it."""

    __slots__ = ("event", "ok")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ok = False


def _retryable(error: OSError) -> bool:
    """Errors that more space cures; anything else (EIO, a failed fsync) is not retried, since
    after it the kernel no longer says what reached the disk."""
    return error.errno in _RETRYABLE


class GroupCommit:
    """The write rounds of one service's arrival log and ordered log. Runs on the service's
    loop; only :meth:`_write_arrivals` and :meth:`_write_output` leave it, each on its log's
    thread.

    The service hears of a round through three callbacks: ``on_durable(generation, advanced)``
    after a round made everything up to ``generation`` durable (``advanced``: the durable
    output grew), ``on_refused()`` after the volume refused a write (:attr:`degraded` is set)
    and ``on_failure(error)`` on an error no retry cures."""

    def __init__(
        self,
        arrivals: ArrivalLog,
        ordered: OrderedLog,
        *,
        health_changed: asyncio.Event,
        on_durable: Callable[[int, bool], None],
        on_refused: Callable[[], None],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self.arrivals = arrivals
        self.ordered = ordered
        self._health_changed = health_changed
        self._on_durable, self._on_refused = on_durable, on_refused
        self._on_failure = on_failure
        self.written_generation = self.synced_generation = 0
        """The generation staged last; the last one a round made durable."""
        self.written_offset = self.durable_offset = ordered.next_offset
        """Offset after what the orderer emitted; after what of it is durable (subscribers
        see only below ``durable_offset``)."""
        self.max_unwritten = MAX_UNWRITTEN
        self.max_unwritten_bytes = MAX_UNWRITTEN_BYTES
        self.records_written = 0
        self.bytes_written = 0
        """Arrival-log rows and their payload bytes written so far (by the arrival log's
        thread; the orderer's thread reads them to hold its intake to ``max_unwritten`` and
        ``max_unwritten_bytes``)."""
        self.degraded: OSError | None = None
        """The log volume refuses writes (full): input is refused until a retry succeeds."""
        self._failed: BaseException | None = None
        self._closing = False
        self._unwritten_arrivals: deque[_Staged] = deque()
        """Arrival records to write, each with its arrival time, or intake passes to join into
        one record batch (each row with its pass's time); the loop's thread appends, the
        arrival log's thread removes."""
        self._pending_passes: list[tuple[float, IntakePass]] = []
        self._pending_records = 0
        self._pending_bytes = 0
        self._unwritten_bytes = 0
        self._unwritten_output: deque[EmittedBatch] = deque()
        self._unwritten_records = 0
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.fsync_seconds = {name: Histogram(FSYNC_BUCKETS) for name in ("arrival", "ordered")}
        """Each round's sync of each log, in seconds (``evb_fsync_duration_seconds``)."""
        self._threads = {name: single_thread(f"evb-{name}-log") for name in ("arrival", "ordered")}

    # ------------------------------------------------------------------ staging

    def stage(self, t: float, rows: ArrivalRecords) -> None:
        """Arrival records taken in at ``t`` (a configure, an end of run), for the next round."""
        self._group_pending()
        self._unwritten_arrivals.append((t, rows))
        self._unwritten_bytes += _payload_bytes(rows)

    def stage_input(self, t: float, taken: IntakePass) -> None:
        """An intake pass: counted against ``max_unwritten``, and grouped with the passes
        before it until they hold :data:`JOIN_RECORDS` rows or :data:`JOIN_BYTES` payload
        bytes (or a round begins); the arrival log's thread joins a group into one record
        batch."""
        self._pending_passes.append((t, taken))
        self._pending_records += taken.records
        self._pending_bytes += taken.payload_bytes
        self._unwritten_records += taken.records
        self._unwritten_bytes += taken.payload_bytes
        if self._pending_records >= JOIN_RECORDS or self._pending_bytes >= JOIN_BYTES:
            self._group_pending()
        if not self._room():
            self._caught_up.clear()

    def _group_pending(self) -> None:
        """The pending intake passes, as one group for the next round to join and write.

        Why joined on the arrival log's thread, by one compiled call (:func:`arrival_records`):
        nothing per fragment is left on the event loop's thread, and a join of numpy calls
        there waited for the GIL after each while the other threads ran Python."""
        if self._pending_passes:
            self._unwritten_arrivals.append((None, self._pending_passes))
            self._pending_passes, self._pending_records, self._pending_bytes = [], 0, 0

    def stage_output(self, emitted: EmittedBatch) -> None:
        """Output the orderer's thread took out of the core, for the ordered log. Each take is a
        record batch of its own, not joined with the next: a take is already as large as a
        record batch should be (a cycle's, see ``orderer_thread.PASS_MESSAGES``)."""
        if len(emitted):
            self._unwritten_output.append(emitted)
            self.written_offset = emitted.first_seq + len(emitted)

    def advance(self) -> None:
        """After every orderer call (and anything else staged): a new generation."""
        self.written_generation += 1

    def start(self) -> None:
        """Run rounds until everything staged is durable (unless they run already)."""
        if self._task is None and self._failed is None:
            self._task = asyncio.get_running_loop().create_task(self._rounds())

    def _room(self) -> bool:
        """What is staged and not written is under both bounds (the loop's count)."""
        return (
            self._unwritten_records < self.max_unwritten
            and self._unwritten_bytes < self.max_unwritten_bytes
        )

    def room_for_records(self, taken: int, taken_bytes: int) -> bool:
        """Whether input may go on with ``taken`` arrival-log rows and ``taken_bytes`` payload
        bytes taken in so far (every one ever, counted by the orderer's thread): fewer than
        ``max_unwritten`` rows and ``max_unwritten_bytes`` bytes of them are not written yet.
        Read on the orderer's thread (plain numbers, written by the others)."""
        return (
            taken - self.records_written < self.max_unwritten
            and taken_bytes - self.bytes_written < self.max_unwritten_bytes
        )

    async def room_for_input(self) -> None:
        """Returns at once unless the writes are ``max_unwritten`` records behind; then when a
        write round has caught up (or the service stops taking input)."""
        if not self._caught_up.is_set():
            await self._caught_up.wait()

    def is_durable(self, generation: int) -> bool:
        return self.synced_generation >= generation

    async def durable(self, generation: int) -> None:
        """Returns once a round made ``generation`` durable; ServiceUnavailable if none will."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((generation, future))
        await future

    # ------------------------------------------------------------------ rounds

    def _write_arrivals(self, entries: int, written: _Written) -> None:
        """Write the first ``entries`` staged arrival records, in order, then force the log to
        disk (the arrival log's thread); ``written`` tells the ordered log's thread once they
        are written (before the sync).

        An entry leaves its queue only once written, and a failed append leaves its log as it
        was (segments.py cuts what it half wrote), so after an error such as a full volume the
        next round simply tries again from the same entry."""
        try:
            arrivals = self._unwritten_arrivals
            left = entries
            while left:
                t, rows = arrivals[0]
                if isinstance(rows, list):  # intake passes: joined once, into record batches
                    pieces = arrival_records(rows)
                    arrivals.popleft()
                    arrivals.extendleft((None, piece) for piece in reversed(pieces))
                    left += len(pieces) - 1
                    continue
                self.arrivals.append_rows(t, rows)
                arrivals.popleft()
                left -= 1
                self.records_written += len(rows)
                self.bytes_written += int(rows.payload.shape[0])
            written.ok = True
        finally:
            written.event.set()
        self._sync("arrival", self.arrivals)

    def _write_output(self, entries: int, written: _Written) -> None:
        """Write the first ``entries`` staged outputs, in order, then force the log to disk
        (the ordered log's thread), once the arrival records of the round are written: the
        ordered log points at rows of the arrival log (``payload_row``), and a process killed
        between the two writes must not leave it pointing at rows that were never written.
        While the arrival log's thread syncs, this one writes. After a failed arrival write
        nothing is written here (the next round writes both)."""
        written.event.wait()
        if not written.ok:
            return
        output = self._unwritten_output
        for _ in range(entries):
            self.ordered.append(output[0])  # after a failed try: appends only what it lacks
            output.popleft()
        self._sync("ordered", self.ordered)

    def _sync(self, name: str, written: ArrivalLog | OrderedLog) -> None:
        began = time.perf_counter()
        try:
            written.sync()
        except OSError as error:  # never retried: after a failed fsync nothing is known
            raise InternalOrdererError(f"fsync of a log failed: {error}") from error
        self.fsync_seconds[name].observe(time.perf_counter() - began)

    async def _write_out(self) -> None:
        """Both logs written and synced, each on its thread (the ordered log written once the
        arrival log is); the first error (after both have stopped: neither is left writing)."""
        loop = asyncio.get_running_loop()
        written = _Written()
        # What the round writes is what is staged now: output staged from here on may come from
        # intake passes not yet grouped for the arrival log, whose rows this round does not
        # write (the ordered log would get ahead of the arrival log: after a kill, recovery
        # could not rebuild it, and its payload rows would point at nothing).
        arrivals, output = len(self._unwritten_arrivals), len(self._unwritten_output)
        results = await asyncio.gather(
            loop.run_in_executor(
                self._threads["arrival"], self._write_arrivals, arrivals, written
            ),
            loop.run_in_executor(self._threads["ordered"], self._write_output, output, written),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _rounds(self) -> None:
        """Each round writes everything staged before it and makes it durable with one fsync
        per log, then releases the service's acks and output and the waiters. A refused write
        is retried every ``STORAGE_RETRY`` seconds until it succeeds; any other error is the
        service's failure."""
        try:
            while self.synced_generation < self.written_generation and self._failed is None:
                generation, offset = self.written_generation, self.written_offset
                self._group_pending()
                try:
                    await self._write_out()
                except OSError as error:
                    if not _retryable(error):
                        raise
                    self._degrade(error)
                    if self._closing:
                        log.error(
                            "stopping with the log volume full: what is not written was never"
                            " acknowledged, and its senders resend it to the next server"
                        )
                        return
                    await asyncio.sleep(STORAGE_RETRY)
                    continue
                if self.degraded is not None:
                    self._recovered_from(self.degraded)
                self._unwritten_records = self._pending_records + sum(
                    _records(rows) for _, rows in self._unwritten_arrivals
                )
                self._unwritten_bytes = self._pending_bytes + sum(
                    _payload_bytes(rows) for _, rows in self._unwritten_arrivals
                )
                if self._room():
                    self._caught_up.set()
                self.synced_generation = generation
                advanced = offset > self.durable_offset
                if advanced:
                    self.durable_offset = offset
                self._on_durable(generation, advanced)
                self._release_waiters(generation)
        except Exception as error:
            self._on_failure(error)
        finally:
            self._task = None

    def _release_waiters(self, generation: int) -> None:
        still = []
        for wanted, future in self._waiters:
            if wanted <= generation:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((wanted, future))
        self._waiters = still

    def _degrade(self, error: OSError) -> None:
        """The log volume refused a write: stop taking input until it takes writes again (the
        service ends its open streams UNAVAILABLE)."""
        if self.degraded is None:
            log.error(
                "the log volume of %s refuses writes (%s): input refused, retrying",
                self.arrivals.directory.parent,
                error,
            )
            self._health_changed.set()
        self.degraded = error
        self._caught_up.set()  # readers wake up to find their streams finished
        self._on_refused()

    def _recovered_from(self, error: OSError) -> None:
        log.warning("the log volume takes writes again (after %s): input accepted", error)
        self.degraded = None
        self._health_changed.set()

    # ------------------------------------------------------------------ the end

    def fail(self, error: BaseException) -> None:
        """The service failed for good: no more rounds; readers wake up, waiters get
        ServiceUnavailable (what was acked is safe; the rest will be resent)."""
        self._failed = error
        self._caught_up.set()
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(ServiceUnavailable(f"the orderer's storage failed: {error}"))
        self._waiters = []

    def shut(self) -> None:
        """The service stops taking input: readers wake up; a refused write is not retried."""
        self._closing = True
        self._caught_up.set()

    async def settle(self) -> None:
        """Returns once no round runs."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Write out the rest unless the storage failed or refuses writes, then close the
        logs (after :meth:`settle`)."""
        try:
            if self._failed is None and self.degraded is None:
                self._group_pending()
                await self._write_out()
        finally:
            for thread in self._threads.values():
                thread.shutdown(wait=False)
            self.arrivals.close()
            self.ordered.close()
