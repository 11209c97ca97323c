"""The orderer as a service: :class:`OrdererService` takes input in, serves deadlines, and owns
the run from recovery to shutdown.

Why a plain asyncio class: the gRPC servicer (:mod:`orderer.service.servicer`) only converts
messages and translates errors into status codes, once, at the edge; everything else lives
here, with the :class:`~orderer.api.Orderer`, the per-source sequence table that deduplicates
resends, and the one deadline timer. Making the logs durable is the job of
:mod:`~orderer.service.group_commit`, serving their readers that of
:mod:`~orderer.service.subscriptions`; a ``Submit`` call's acks and flow signals wait in its
:mod:`~orderer.service.submit_stream`; what the service shows of itself (``GetStats``, the
metrics snapshot) is read in :mod:`~orderer.service.inspection`.

How a batch travels: ``Submit`` hands the service its raw bytes, which the loop only queues
for the orderer's thread (:mod:`~orderer.service.ingest`): there one compiled call checks,
converts and deduplicates each (what the service already has, by sequence numbers per source,
is dropped), and a cycle's messages go into the orderer at one time ``now`` (strictly after
every earlier time, so that the arrival log replays to the same output) as one intake pass
(:mod:`~orderer.service.intake`). Back on the loop, each orderer call's
:class:`~orderer.service.orderer_thread.Step` is staged for the logs and the stream is owed an
``Ack`` (:meth:`OrdererService._apply`). A write round (group commit) makes the logs durable and
then releases the acks and the new output to subscribers, which only ever see durable output.
Deadlines are served by one ``loop.call_later`` on the orderer's next deadline, re-armed after
every call (:mod:`~orderer.service.deadlines`): no polling.

Which thread does what: the loop's receives messages, sends replies and keeps the books; the
orderer's thread decodes, orders and takes the output; one thread per log writes and syncs
(:mod:`~orderer.service.group_commit`). Nothing per fragment runs on the loop's thread.

The run lives in its data directory (:mod:`~orderer.service.data_dir`), locked while a service
runs on it: :meth:`OrdererService.open` recovers the run the logs hold
(:mod:`~orderer.service.opening`), :meth:`OrdererService.close` makes everything durable and
releases the lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from orderer.api import Orderer
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.config import OrdererConfig
from orderer.errors import InterfaceError, ServiceUnavailable
from orderer.service import restart
from orderer.service.consumers import ConsumerOffsets
from orderer.service.deadlines import DeadlineTimer
from orderer.service.diagnostics import BarrierLog
from orderer.service.group_commit import GroupCommit
from orderer.service.ingest import Ingest
from orderer.service.inspection import Inspection
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.metrics import ArrivalLatency, BarrierTally, MetricsSnapshot
from orderer.service.opening import open_directory, slice_owner, wanted_changes
from orderer.service.orderer_thread import Step
from orderer.service.recovery import Recovered
from orderer.service.runs import RunTable
from orderer.service.settings import GivenParameter, ServiceConfig
from orderer.service.slices import PieceCutter, PieceIndex
from orderer.service.submit_stream import END_OF_STREAM, SubmitStream
from orderer.service.subscriptions import Retention, Subscriptions
from orderer.stats import SliceIndex, SliceRole, Stats
from orderer.wire.limits import REPLY_MAX_BYTES, BatchLimits

__all__ = ["OrdererService"]

log = logging.getLogger("evb.service")


class OrdererService:
    """The orderer as a service: input, durability, output, deadlines. All methods run on one
    asyncio loop; the orderer runs on its own thread (:mod:`~orderer.service.ingest`), the
    writes and fsyncs on the logs' threads."""

    def __init__(
        self,
        *,
        recovered: Recovered,
        arrivals: ArrivalLog,
        ordered: OrderedLog,
        limits: BatchLimits | None = None,
        subscribe_max_fragments: int = 65536,
        subscribe_max_bytes: int = REPLY_MAX_BYTES,
        lock: int | None = None,
        retention_bytes: int | None = None,
        retention_seconds: float | None = None,
        consumers: ConsumerOffsets | None = None,
        run: int = 1,
        role: SliceRole | None = None,
        slice_index: PieceIndex | None = None,
        cutter: PieceCutter | None = None,
    ) -> None:
        self.limits = limits if limits is not None else BatchLimits()
        self.role = SliceRole() if role is None else role
        """Where this orderer stands in its run (a plain orderer: orderer 0 of 1)."""
        self._slice_index = slice_index
        """The pieces of the durable output (with a slice length only), as recovery rebuilt
        them and the output staged since adds to (cut by ``cutter`` on the orderer's
        thread)."""
        if (slice_index is None) != (cutter is None):
            raise ValueError("a slice index is kept with the cutter of its pieces, or neither")
        self._lock = lock
        self._orderer: Orderer = recovered.orderer
        self._runs = RunTable(run, recovered.runs, ended=recovered.run_ended)
        self._streams: set[SubmitStream] = set()
        self._paused: dict[int, bool] = {}
        self._deadlines = DeadlineTimer(
            clock=lambda: self._ingest.clock(),
            due=lambda deadline: self._ingest.advance_soon(deadline),
            stopped=lambda: self._closed or self.failed is not None,
        )
        self._closed = False
        self.failed: BaseException | None = None
        """A storage error the service cannot get over: it takes no more input (exit, restart)."""
        self.failure = asyncio.Event()
        self.health_changed = asyncio.Event()
        """Set when :attr:`failed` or :attr:`degraded` changed (the server's health checks)."""
        self.arrivals = arrivals
        """The arrival log: every input, in arrival order (written by the group commit)."""
        self.ordered = ordered
        """The ordered log: the output, by offset (written by the group commit)."""
        self._commit = GroupCommit(
            arrivals,
            ordered,
            health_changed=self.health_changed,
            on_durable=self._on_durable,
            on_refused=self._on_refused,
            on_failure=self._fail,
        )
        self._output = Subscriptions(
            self._commit,
            max_fragments=subscribe_max_fragments,
            max_bytes=subscribe_max_bytes,
            consumers=consumers,
            retention=Retention(retention_bytes, retention_seconds),
        )
        self._latency = ArrivalLatency(self._orderer.queued)
        self._barriers = BarrierTally()
        self._barrier_log = BarrierLog()
        self._restart_changes: tuple[restart.LiveChange, ...] = ()
        self._commands: set[asyncio.Future[Any]] = set()
        for flow in self._orderer.take_flow_signals():
            self._paused[flow.source] = flow.paused
        # those the recovery resolved: the whole run's, from the start (it replays every arrival)
        self._note_barriers(self._orderer.take_barrier_log())
        self.high_water_mark: int | None = self._orderer.high_water_mark
        """The orderer's high-water mark as of the last step the loop has seen."""
        self._ingest = Ingest(
            self._orderer,
            resume_time=recovered.resume_time,
            next_sequence=recovered.next_sequence.items(),
            run_ended=recovered.run_ended,
            limits=self.limits,
            taken_offset=ordered.next_offset,
            arrival_rows=arrivals.records,
            unwritten_room=self._commit.room_for_records,
            refusal=self._storage_refusal,
            deliver=self._apply,
            on_error=self._fail,
            owner=slice_owner(self.role),
            cutter=cutter,
        )
        self._inspection = Inspection(
            orderer=self._orderer,
            ingest=self._ingest,
            commit=self._commit,
            output=self._output,
            streams=self._streams,
            runs=self._runs,
            barrier_log=self._barrier_log,
            barriers=self._barriers,
            latency=self._latency,
            arrivals=arrivals,
            ordered=ordered,
            role=self.role,
        )
        self._deadlines.rearm(self._orderer.next_deadline())

    @classmethod
    def open(
        cls,
        config: OrdererConfig,
        service: ServiceConfig,
        given: Iterable[GivenParameter] | None = None,
    ) -> OrdererService:
        """Open (or create) the logs in ``service.data_dir`` and recover the run they hold, with
        the parameters it recorded; of ``config``, only the parameters ``given`` count (None:
        all of them), each weighed against the run's (:mod:`~orderer.service.restart`): the
        live changes they ask for wait for :meth:`apply_restart_changes`. The directory is
        locked: a second server on it (two pods on one volume) is refused
        (:mod:`~orderer.service.opening`)."""
        directory = open_directory(config, service, given)
        run = directory.run
        sources = run.recovered.orderer.config.sources  # the run's, whatever was given
        opened = cls(
            recovered=run.recovered,
            arrivals=run.arrivals,
            ordered=run.ordered,
            lock=run.lock,
            limits=BatchLimits(
                max_payload_bytes=service.max_payload_bytes,
                sources=frozenset(sources) if service.strict_sources else None,
            ),
            subscribe_max_fragments=service.subscribe_max_fragments,
            subscribe_max_bytes=service.subscribe_max_bytes,
            retention_bytes=service.retention_bytes,
            retention_seconds=service.retention_seconds,
            consumers=ConsumerOffsets(service.data_dir / "consumers.json"),
            run=service.run,
            role=service.slice_role,
            slice_index=directory.slice_index,
            cutter=directory.cutter,
        )
        opened._restart_changes = run.changes
        return opened

    async def apply_restart_changes(self) -> None:
        """The live changes the start's parameters ask of the recovered run, made as
        ``Configure`` makes them (recorded in the arrival log, durable when this returns), each
        logged with both values; one already in force (a live change before the restart) is
        left as it is."""
        changes, self._restart_changes = self._restart_changes, ()
        wanted = wanted_changes(self._orderer.config, changes)
        if wanted:
            await self.configure(wanted)

    # ------------------------------------------------------------------ properties

    @property
    def orderer(self) -> Orderer:
        """The orderer itself: its own thread calls it; read it from another thread only
        under that thread's lock (as :meth:`stats` does), or once input is quiet (the tests)."""
        return self._orderer

    @property
    def durable_offset(self) -> int:
        """Offset of the next ordered fragment that is not durable yet; subscribers see below."""
        return self._commit.durable_offset

    # ------------------------------------------------------------------ input

    def _check_open(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            raise refusal

    def _refusal(self) -> ServiceUnavailable | None:
        """Why input is refused now, if it is (read by the orderer's thread too)."""
        if self.failed is not None or self.degraded is not None or self._closed:
            return self._unavailable()
        return None

    def _storage_refusal(self) -> ServiceUnavailable | None:
        """Why the logs take no input now, if they do not (read by the orderer's thread)."""
        if self.failed is not None or self.degraded is not None:
            return self._unavailable()
        return None

    def open_stream(self, peer: str = "") -> SubmitStream:
        stream = SubmitStream(peer)
        self._streams.add(stream)
        if self._closed or self.failed or self.degraded:
            stream.finish(self._unavailable())
        return stream

    def finish_stream(self, stream: SubmitStream) -> None:
        """The client closed its side: the call ends OK once everything it sent is durable, so
        a client knows its watermarks and ends (which get no ack) are safe too."""
        self._ingest.end_stream(stream)

    def close_stream(self, stream: SubmitStream) -> None:
        self._streams.discard(stream)

    @property
    def max_unwritten(self) -> int:
        """Records taken in but not written past which Submit streams are not read."""
        return self._commit.max_unwritten

    @max_unwritten.setter
    def max_unwritten(self, records: int) -> None:
        self._commit.max_unwritten = records

    @property
    def max_unwritten_bytes(self) -> int:
        """Their payload bytes past which Submit streams are not read either."""
        return self._commit.max_unwritten_bytes

    @max_unwritten_bytes.setter
    def max_unwritten_bytes(self, payload_bytes: int) -> None:
        self._commit.max_unwritten_bytes = payload_bytes

    async def room_for_input(self) -> None:
        """Returns at once unless the writes are ``max_unwritten`` records behind or the
        orderer's thread has too much queued; then once they have caught up (or the service
        stops taking input)."""
        await self._commit.room_for_input()
        await self._ingest.room()

    def take_message(self, stream: SubmitStream, data: bytes) -> None:
        """One ``Submit`` message from ``stream``, as its raw bytes, for the orderer's thread
        (which decodes, checks and deduplicates it; a refusal ends the stream)."""
        self._check_open()
        self._ingest.put_message(stream, data)

    # ------------------------------------------------------------------ steps (loop)

    def _apply(self, steps: list[Step]) -> None:
        """The orderer's thread made these steps, in order: their arrival records and output
        are staged for the logs (an orderer call, or anything staged, is a new generation),
        their acks owed to that generation, flow signals relayed, the timer re-armed, a
        command's caller answered."""
        commit = self._commit
        deadline: float | None = self._deadlines.at
        rearm = False
        for step in steps:
            for stream, source in step.sources:
                if self._paused.get(source):
                    stream.signal(source, True)
            rows = step.rows
            if rows is not None:
                if isinstance(rows, ArrivalRecords):
                    commit.stage(step.t, rows)
                else:
                    commit.stage_input(step.t, rows)
            if step.emitted is not None:
                commit.stage_output(step.emitted)
                if step.pieces is not None and self._slice_index is not None:
                    self._slice_index.add(step.pieces)
            if step.called or rows is not None or step.emitted is not None:
                commit.advance()
            if step.called:
                if step.fragments:
                    self._latency.arrived(step.t, step.fragments)
                self._latency.left(step.t, step.queued)
                if step.barriers:
                    self._note_barriers(step.barriers)
                for flow in step.flows:
                    self._paused[flow.source] = flow.paused
                    for stream in self._streams:
                        if flow.source in stream.sources:
                            stream.signal(flow.source, flow.paused)
                deadline, rearm = step.deadline, True
                self.high_water_mark = step.high_water_mark
            if step.run_ended is not None:
                self._runs.ended = step.run_ended
            generation = commit.written_generation
            for stream, source, sequence in step.acks:
                stream.owe_ack(generation, source, sequence)
                if source == END_OF_STREAM:  # the client closed its side: nothing more comes
                    stream.finish()
                stream.release(commit.synced_generation)
            for stream, error in step.refused:
                stream.finish(error)
            future = step.future
            if future is not None and not future.done():
                if step.error is not None:
                    future.set_exception(step.error)
                else:
                    future.set_result((step.value, generation))
        if rearm:
            self._deadlines.rearm(deadline)
        commit.start()

    async def _call(self, run: Callable[[], Step]) -> tuple[Any, int]:
        """A command on the orderer's thread; failed with the service if it fails."""
        self._check_open()
        call: asyncio.Future[tuple[Any, int]] = asyncio.get_running_loop().create_future()
        self._commands.add(call)
        try:
            self._ingest.call(run, call)
            return await call
        finally:
            self._commands.discard(call)

    async def configure(self, changes: Mapping[str, Any]) -> OrdererConfig:
        """A live change of parameters (checked first: ``ConfigError`` names the parameter),
        recorded in the arrival log; returns once durable."""
        new, generation = await self._call(lambda: self._ingest.configure(dict(changes)))
        await self._durable(generation)
        log.info("configured %s", dict(changes))
        return new

    async def set_source_state(self, source: int, dead: bool) -> tuple[bool, bool]:
        """Mark ``source`` dead by hand, or revive it, recorded in the arrival log (recovery
        replays it at the same time, so the restarted orderer resolves the same barriers);
        returns ``(whether the source was known, whether it is dead now)`` once durable.

        A source the orderer does not know (neither declared nor heard from) is refused, naming
        the known ones: the core would make it known, and a typo (``evb source revive 9`` for
        source 6) would then add a silent source that holds every fragment for the whole build
        window. Declare a source (``--sources``) to mark it before it connects."""
        (known, dead_now), generation = await self._call(
            lambda: self._ingest.set_source_state(source, dead)
        )
        await self._durable(generation)
        log.info("source %d %s by hand", source, "marked dead" if dead else "revived")
        return known, dead_now

    async def end_run(self) -> int:
        """The spec's end of run: drain every queue now; returns the offset after the run's last
        fragment once everything is durable."""
        _, generation = await self._call(self._ingest.end_run)
        await self._durable(generation)
        return self._commit.durable_offset

    async def begin_run(self, run: int | None = None) -> tuple[int, int]:
        """The next run on the same server, once the current one has ended: recorded in the
        arrival log (recovery continues with it); returns ``(its number, the output offset of
        its first fragment)`` once durable. The orderer itself is untouched (docs/ordering.md,
        "Runs one after another"): the number only names the output from that offset on."""
        current = self._runs.current
        number = current + 1 if run is None else run
        _, generation = await self._call(lambda: self._ingest.begin_run(number, current))
        await self._durable(generation)
        start = self._commit.durable_offset
        self._runs.begin(number, start)
        log.info("run %d begun at output offset %d", number, start)
        return number, start

    def _note_barriers(self, resolved: list[dict[str, Any]]) -> None:
        """Barriers an orderer call resolved, into the metrics and the barrier log ``GetStats``
        shows."""
        if resolved:
            self._barriers.add(resolved)
            self._barrier_log.add(resolved)

    # ------------------------------------------------------------------ durability

    @property
    def degraded(self) -> OSError | None:
        """The log volume refuses writes (full): input is refused until a retry succeeds."""
        return self._commit.degraded

    def _on_durable(self, generation: int, advanced: bool) -> None:
        """A write round made everything up to ``generation`` durable: acks go out, and new
        output to the subscribers."""
        if advanced:
            self._output.notify()
            if self._slice_index is not None:
                self._slice_index.durable(self._commit.durable_offset)
        self._ingest.written()
        for stream in self._streams:
            stream.release(generation)
        self._output.apply_retention()

    def _on_refused(self) -> None:
        """The log volume refused a write: open streams end UNAVAILABLE (clients back off and
        resend what was not acknowledged; what the service already holds is deduplicated, then
        acknowledged once written)."""
        for stream in self._streams:
            stream.finish(self._unavailable())

    def _unavailable(self) -> ServiceUnavailable:
        if self.failed is not None:
            return ServiceUnavailable(f"the orderer's storage failed ({self.failed}); retry later")
        if self.degraded is not None:
            return ServiceUnavailable(
                f"the log volume of {self.arrivals.directory.parent} refuses writes"
                f" ({self.degraded}); nothing more is acknowledged"
                " until it has space again; retry later"
            )
        return ServiceUnavailable("the orderer is shutting down; reconnect and resend")

    async def _durable(self, generation: int) -> None:
        if self._commit.is_durable(generation):
            return
        self._check_open()
        await self._commit.durable(generation)

    def _fail(self, error: BaseException) -> None:
        """The storage failed for good: stop taking input (what was acked is safe; the rest
        will be resent to a restarted service)."""
        if self.failed is not None:
            return
        log.error("storage failed, no more input is taken: %r", error)
        self.failed = error
        self.failure.set()
        self._commit.fail(error)
        self._ingest.written()  # what it held back is refused now
        self.health_changed.set()
        self._deadlines.rearm(None)
        for stream in self._streams:
            stream.abandon()
        for call in self._commands:
            if not call.done():
                call.set_exception(self._unavailable())
        self._output.fail()

    # ------------------------------------------------------------------ output

    def subscribe(
        self, from_offset: int, max_fragments: int = 0, *, payload: bool = True
    ) -> AsyncIterator[tuple[EmittedBatch, int]]:
        """``(batch, durable offset)`` from ``from_offset``: what is in the log, then live
        (:meth:`.Subscriptions.subscribe`)."""
        return self._output.subscribe(from_offset, max_fragments, payload=payload)

    def commit(
        self, consumer: str, offset: int, metadata: bytes | None = None
    ) -> tuple[int, int, bytes]:
        """A consumer processed every offset below ``offset``: ``(its offset now, lowest over
        every consumer, the metadata kept with its offset)``."""
        return self._output.commit(consumer, offset, metadata)

    def get_committed(self, consumer: str) -> tuple[bool, int, int, bytes]:
        """``(known, offset, lowest, metadata)`` of a consumer, read only."""
        return self._output.get_committed(consumer)

    def delete_consumer(self, consumer: str) -> tuple[bool, int | None]:
        """Forget a consumer: ``(whether it was known, lowest offset over those left)``."""
        return self._output.delete_consumer(consumer)

    # ------------------------------------------------------------------ inspection

    def stats(self, barrier_log_limit: int = 0) -> Stats:
        """``GetStats``: the counters, the newest ``barrier_log_limit`` resolved barriers (0:
        1000), the open Submit streams and the consumers with their lag
        (:meth:`.Inspection.stats`)."""
        return self._inspection.stats(barrier_log_limit)

    def slice_index(self, from_slice: int = 0, limit: int = 0) -> SliceIndex:
        """``GetSliceIndex``: the pieces of slice ``from_slice`` and above, ``limit`` at most
        (0: the server's choice), of the durable output (:mod:`~orderer.service.slices`).
        An orderer without a slice length keeps none: ``InterfaceError``."""
        index = self._slice_index
        if index is None:
            raise InterfaceError(
                "this orderer keeps no slice index: it was started without --slice-ticks "
                "(a run of one orderer)"
            )
        index.durable(self._commit.durable_offset)
        return index.read(from_slice, limit, complete=self.run_ended_durably)

    @property
    def run_ended_durably(self) -> bool:
        """The current run has ended and all its output is durable: what ``GetStats`` and the
        metrics call ended (a consumer that sees it and ``next_offset`` has the whole run)."""
        return self._inspection.run_ended_durably

    def metrics_snapshot(self) -> MetricsSnapshot:
        return self._inspection.metrics_snapshot()

    def next_sequence(self, source: int) -> int:
        return self._ingest.next_sequence.get(source, 0)

    # ------------------------------------------------------------------ shutdown

    def begin_shutdown(self) -> None:
        """Stop taking input: what was received is still taken in, then Submit streams finish
        (their owed acks still go out once durable, then they end UNAVAILABLE so clients
        reconnect elsewhere or later); subscribers end."""
        if self._closed:
            return
        self._closed = True
        self._commit.shut()
        self._deadlines.rearm(None)
        self._output.close()
        closed: asyncio.Future[tuple[Any, int]] = asyncio.get_running_loop().create_future()
        closed.add_done_callback(self._finish_streams)
        self._ingest.close_input(closed)

    def _finish_streams(self, _: object = None) -> None:
        for stream in self._streams:
            stream.finish(ServiceUnavailable("the orderer is shutting down; reconnect and resend"))

    async def close(self) -> None:
        """Make everything durable and close the logs."""
        self.begin_shutdown()
        await self._ingest.stop()
        self._finish_streams()
        await self._commit.settle()
        try:
            await self._commit.close()
        except Exception:
            log.exception("closing the logs failed; the next start recovers from what is on disk")
        finally:
            if self._lock is not None:
                os.close(self._lock)  # releases the directory lock
                self._lock = None
