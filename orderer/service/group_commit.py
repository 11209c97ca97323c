"""Group commit: what the service staged for its two logs, written and made durable in rounds.

Why rounds: an fsync costs as much for one record as for a thousand. The service stages what
each intake pass, configure or end of run took in (arrival records) and leaves what the orderer
emitted in the core; one background task then runs write rounds: each round takes the core's
output once, writes everything staged to the arrival log and the ordered log in a worker thread,
forces both to disk with one fsync each, and only then tells the service, which releases the
acks and the new output (nothing unwritten is ever acknowledged or shown to a subscriber).

Generations order this: every orderer call starts a new one (:meth:`GroupCommit.advance`); an
ack or a waiter is owed to the generation that staged its input, and is released once a round
that began at or after that generation is durable.

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
import time
from collections import deque
from collections.abc import Callable

from orderer.api import Orderer
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.errors import InternalOrdererError, ServiceUnavailable
from orderer.service.intake import IntakePass, arrival_records
from orderer.service.metrics import FSYNC_BUCKETS, Histogram
from orderer.service.storage import ArrivalLog, OrderedLog

__all__ = ["JOIN_RECORDS", "MAX_UNWRITTEN", "STORAGE_RETRY", "GroupCommit"]

log = logging.getLogger("evb.service")

MAX_UNWRITTEN = 1_000_000
"""Records taken in but not yet written (the disk behind the network). Past this the service
stops reading Submit streams until a write round catches up: HTTP/2 flow control then holds
the clients back, instead of the server's memory growing with the length of the run."""

TAKE_FRAGMENTS = 16384
"""The service takes the core's output once this much is there (and at every round): a take
per orderer call cost 69 us on the loop's thread, 21 us per 1000 fragments at 3 M/s."""

JOIN_RECORDS = 32768
"""Intake passes are joined into arrival-log record batches of about this many rows."""

STORAGE_RETRY = 1.0
"""Seconds between attempts to write to a log volume that refused a write (full, quota)."""

_RETRYABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _retryable(error: OSError) -> bool:
    """Errors that more space cures; anything else (EIO, a failed fsync) is not retried, since
    after it the kernel no longer says what reached the disk."""
    return error.errno in _RETRYABLE


class GroupCommit:
    """The write rounds of one service's arrival log and ordered log. Runs on the service's
    loop; only :meth:`_write_out` leaves it (worker thread).

    The service hears of a round through three callbacks: ``on_durable(generation, advanced)``
    after a round made everything up to ``generation`` durable (``advanced``: the durable
    output grew), ``on_refused()`` after the volume refused a write (:attr:`degraded` is set)
    and ``on_failure(error)`` on an error no retry cures."""

    def __init__(
        self,
        orderer: Orderer,
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
        self._orderer: Orderer = orderer
        self._health_changed = health_changed
        self._on_durable, self._on_refused = on_durable, on_refused
        self._on_failure = on_failure
        self.written_generation = self.synced_generation = 0
        """The generation staged last; the last one a round made durable."""
        self.written_offset = self.durable_offset = ordered.next_offset
        """Offset after what the orderer emitted; after what of it is durable (subscribers
        see only below ``durable_offset``)."""
        self.max_unwritten = MAX_UNWRITTEN
        self.degraded: OSError | None = None
        """The log volume refuses writes (full): input is refused until a retry succeeds."""
        self._failed: BaseException | None = None
        self._closing = False
        self._unwritten_arrivals: deque[tuple[float | None, ArrivalRecords]] = deque()
        """Arrival records to write, each with its arrival time or None (joined intake
        passes: each row carries its own); the loop's thread appends, the worker's removes."""
        self._pending_passes: list[tuple[float, IntakePass]] = []
        self._pending_records = 0
        self._taken_offset = ordered.next_offset
        """Output below this offset has been taken out of the core."""
        self._unwritten_output: deque[EmittedBatch] = deque()
        self._unwritten_records = 0
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.fsync_seconds = {name: Histogram(FSYNC_BUCKETS) for name in ("arrival", "ordered")}
        """Each round's sync of each log, in seconds (``evb_fsync_duration_seconds``)."""

    # ------------------------------------------------------------------ staging

    def stage(self, t: float, rows: ArrivalRecords) -> None:
        """Arrival records taken in at ``t`` (a configure, an end of run), for the next round."""
        self._join_pending()
        self._unwritten_arrivals.append((t, rows))

    def stage_input(self, t: float, taken: IntakePass) -> None:
        """An intake pass: counted against ``max_unwritten``, and joined with the passes
        before it into arrival-log rows once they hold :data:`JOIN_RECORDS` (or a round
        begins)."""
        self._pending_passes.append((t, taken))
        self._pending_records += taken.records
        self._unwritten_records += taken.records
        if self._pending_records >= JOIN_RECORDS:
            self._join_pending()
        if self._unwritten_records >= self.max_unwritten:
            self._caught_up.clear()

    def _join_pending(self) -> None:
        """Join the pending intake passes into one arrival-log record batch for the next round.

        Why here, on the event loop's thread, in pieces of about :data:`JOIN_RECORDS` rows:
        the write round's worker thread waits for the loop's GIL after every numpy call it
        makes (0.3-0.5 ms each while the loop is busy); joining there, a pass or a join at a
        time, it spent five times its CPU time waiting, and the rounds set the pace of
        ingest. The loop holds the GIL anyway. And a record batch of tens of thousands of
        rows is written at four times the speed of one larger than the CPU's caches (20-24
        against 86-138 us per 1000 rows)."""
        if self._pending_passes:
            self._unwritten_arrivals.append((None, arrival_records(self._pending_passes)))
            self._pending_passes, self._pending_records = [], 0

    def advance(self, emitted_seq: int) -> None:
        """After every orderer call: a new generation, its output ending at ``emitted_seq``
        (taken out of the core once :data:`TAKE_FRAGMENTS` are there, see
        :meth:`_stage_output`, and at the start of every round)."""
        if emitted_seq - self._taken_offset >= TAKE_FRAGMENTS:
            self._stage_output()
        self.written_offset = emitted_seq
        self.written_generation += 1

    def start(self) -> None:
        """Run rounds until everything staged is durable (unless they run already)."""
        if self._task is None and self._failed is None:
            self._task = asyncio.get_running_loop().create_task(self._rounds())

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

    def _stage_output(self) -> None:
        """Take the output the core holds for the ordered log. Every :data:`TAKE_FRAGMENTS`,
        not once per write round: output left in the core for a whole round (hundreds of
        thousands of fragments at 2 M/s) grew its buffers by reallocation each round and was
        handed over in fresh memory, page faults and copies that doubled the cost of the
        core's submit on the loop's thread (105 against 45 us per 1000 fragments, taking every
        million against every 16,000, in-process); smaller takes reuse warm buffers. Each take
        is a record batch of its own, not joined with the next: a take is already as large as
        a record batch should be (see :meth:`_join_pending`), and the join cost the loop's
        thread 11 us per 1000 fragments."""
        emitted = self._orderer.take_emitted()
        self._taken_offset = emitted.first_seq + len(emitted)
        if len(emitted):
            self._unwritten_output.append(emitted)

    def _write_out(self) -> None:
        """Write what is staged, in order, then force both logs to disk (worker thread).

        An entry leaves its queue only once written, and a failed append leaves its log as it
        was (storage.py cuts what it half wrote), so after an error such as a full volume the
        next round simply tries again from the same entry."""
        arrivals, output = self._unwritten_arrivals, self._unwritten_output
        while arrivals:
            t, rows = arrivals[0]
            self.arrivals.append_rows(t, rows)
            arrivals.popleft()
        while output:
            self.ordered.append(output[0])  # after a failed try: appends only what it lacks
            output.popleft()
        try:
            for name, written in (("arrival", self.arrivals), ("ordered", self.ordered)):
                began = time.perf_counter()
                written.sync()
                self.fsync_seconds[name].observe(time.perf_counter() - began)
        except OSError as error:  # never retried: after a failed fsync nothing is known
            raise InternalOrdererError(f"fsync of a log failed: {error}") from error

    async def _rounds(self) -> None:
        """Each round writes everything staged before it and makes it durable with one fsync
        per log, then releases the service's acks and output and the waiters. A refused write
        is retried every ``STORAGE_RETRY`` seconds until it succeeds; any other error is the
        service's failure."""
        try:
            while self.synced_generation < self.written_generation and self._failed is None:
                generation, offset = self.written_generation, self.written_offset
                self._stage_output()
                self._join_pending()
                try:
                    await asyncio.to_thread(self._write_out)
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
                staged = self._unwritten_arrivals
                self._unwritten_records = self._pending_records + sum(len(r) for _, r in staged)
                if self._unwritten_records < self.max_unwritten:
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
        if self._failed is None and self.degraded is None:
            self._stage_output()
            self._join_pending()
            await asyncio.to_thread(self._write_out)
        self.arrivals.close()
        self.ordered.close()
