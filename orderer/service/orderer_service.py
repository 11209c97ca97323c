"""The orderer as a service: :class:`OrdererService` takes input in, serves deadlines, and owns
the run from recovery to shutdown.

Why a plain asyncio class: the gRPC servicer (:mod:`orderer.service.servicer`) only converts
messages and translates errors into status codes, once, at the edge; everything else lives
here, with the :class:`~orderer.api.Orderer`, the per-source sequence table that deduplicates
resends, and the one deadline timer. Making the logs durable is the job of
:mod:`~orderer.service.group_commit`, serving their readers that of
:mod:`~orderer.service.subscriptions`; a ``Submit`` call's acks and flow signals wait in its
:mod:`~orderer.service.submit_stream`.

How a batch travels: ``Submit`` hands the service its raw bytes, which one compiled call checks,
converts and deduplicates (what the service already has, by sequence numbers per source, is
dropped: :meth:`OrdererService.take_message`); the service takes the new part in at time
``now`` (strictly after every earlier time, so that the arrival log replays to the same output)
in one intake pass
(:mod:`~orderer.service.intake`), stages it for the arrival log, and owes the stream an ``Ack``.
A write round (group commit) makes the logs durable and then releases the acks and the new
output to subscribers, which only ever see durable output. Deadlines are served by one
``loop.call_later`` on ``Orderer.next_deadline()``, re-armed after every call: no polling.

The run lives in its data directory (:mod:`~orderer.service.data_dir`), locked while a service
runs on it: :meth:`OrdererService.open` recovers the run the logs hold,
:meth:`OrdererService.close` makes everything durable and releases the lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch
from orderer.clock import MonotonicClock
from orderer.config import OrdererConfig, parameter_value
from orderer.errors import InterfaceError, ServiceUnavailable
from orderer.service import data_dir, restart
from orderer.service.diagnostics import BarrierLog
from orderer.service.group_commit import GroupCommit
from orderer.service.intake import Intake
from orderer.service.metrics import ArrivalLatency, BarrierTally, MetricsSnapshot, directory_bytes
from orderer.service.settings import GivenParameter, ServiceConfig, every_parameter
from orderer.service.storage import ArrivalLog, ConsumerOffsets, OrderedLog, Recovered
from orderer.service.submit_stream import END_OF_STREAM, SubmitStream
from orderer.service.subscriptions import Retention, Subscriptions
from orderer.wire import convert, submit

__all__ = ["OrdererService"]

log = logging.getLogger("evb.service")


class OrdererService:
    """The orderer as a service: input, durability, output, deadlines. All methods run on one
    asyncio loop; only the writes and fsyncs leave it (worker thread)."""

    def __init__(
        self,
        *,
        recovered: Recovered,
        arrivals: ArrivalLog,
        ordered: OrderedLog,
        limits: convert.BatchLimits | None = None,
        subscribe_max_fragments: int = 65536,
        subscribe_max_bytes: int = convert.REPLY_MAX_BYTES,
        lock: int | None = None,
        retention_bytes: int | None = None,
        retention_seconds: float | None = None,
        consumers: ConsumerOffsets | None = None,
        run: int = 1,
    ) -> None:
        self.limits = limits if limits is not None else convert.BatchLimits()
        self._lock = lock
        self._orderer: Orderer = recovered.orderer
        self._clock = MonotonicClock(start=recovered.resume_time)
        self._last_time = recovered.resume_time
        self._next_sequence = dict(recovered.next_sequence)
        self._run_ended = recovered.run_ended
        self._run = run if recovered.run is None else recovered.run
        self._run_start = recovered.run_start_offset
        # the run table: (number, first offset) of every run, the first the server's own
        self._runs = [(run, 0), *recovered.runs]
        self._streams: set[SubmitStream] = set()
        self._paused: dict[int, bool] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
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
            self._orderer,
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
        self._intake = Intake()
        self._intake_scheduled = False
        self._restart_changes: tuple[restart.LiveChange, ...] = ()
        for flow in self._orderer.take_flow_signals():
            self._paused[flow.source] = flow.paused
        # those the recovery resolved: the whole run's, from the start (it replays every arrival)
        self._take_barrier_log()
        self._rearm()

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
        locked: a second server on it (two pods on one volume) is refused."""
        run = data_dir.open_run(
            config,
            service.data_dir,
            given=every_parameter() if given is None else given,
            fsync=service.fsync,
            segment_bytes=service.segment_bytes,
        )
        sources = run.recovered.orderer.config.sources  # the run's, whatever was given
        opened = cls(
            recovered=run.recovered,
            arrivals=run.arrivals,
            ordered=run.ordered,
            lock=run.lock,
            limits=convert.BatchLimits(
                max_payload_bytes=service.max_payload_bytes,
                sources=frozenset(sources) if service.strict_sources else None,
            ),
            subscribe_max_fragments=service.subscribe_max_fragments,
            subscribe_max_bytes=service.subscribe_max_bytes,
            retention_bytes=service.retention_bytes,
            retention_seconds=service.retention_seconds,
            consumers=ConsumerOffsets(service.data_dir / "consumers.json"),
            run=service.run,
        )
        opened._restart_changes = run.changes
        return opened

    async def apply_restart_changes(self) -> None:
        """The live changes the start's parameters ask of the recovered run, made as
        ``Configure`` makes them (recorded in the arrival log, durable when this returns), each
        logged with both values; one already in force (a live change before the restart) is
        left as it is."""
        changes, self._restart_changes = self._restart_changes, ()
        wanted: dict[str, Any] = {}
        for change in changes:
            before = parameter_value(self._orderer.config, change.name)
            if before == change.value:
                log.info(
                    "%s: %s (%s) is in force already",
                    change.name,
                    restart.shown(change.name, change.value),
                    change.written,
                )
                continue
            wanted[change.name] = change.value
            log.info(
                "%s: %s -> %s (%s differs from the run's), a live change after recovery",
                change.name,
                restart.shown(change.name, before),
                restart.shown(change.name, change.value),
                change.written,
            )
        if wanted:
            await self.configure(wanted)

    # ------------------------------------------------------------------ properties

    @property
    def orderer(self) -> Orderer:
        return self._orderer

    @property
    def durable_offset(self) -> int:
        """Offset of the next ordered fragment that is not durable yet; subscribers see below."""
        return self._commit.durable_offset

    # ------------------------------------------------------------------ time

    def _tick(self, at_least: float = -math.inf) -> float:
        """The time of the next input or flush: the clock, but strictly after every time used
        before (a record at a flush's time would replay before that flush, not after)."""
        now = max(self._clock.now(), math.nextafter(self._last_time, math.inf), at_least)
        self._last_time = now
        return now

    def _peek(self) -> float:
        return max(self._clock.now(), self._last_time)

    def _rearm(self) -> None:
        """One timer, on the orderer's next deadline."""
        deadline = None if self._closed or self.failed else self._orderer.next_deadline()
        if deadline is not None and deadline == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, deadline - self._clock.now()), self._on_deadline)
        self._timer_at = deadline

    def _on_deadline(self) -> None:
        deadline = self._timer_at if self._timer_at is not None else -math.inf
        self._timer = self._timer_at = None
        if self._closed or self.failed:
            return
        self.take_intake()
        try:
            self._orderer.advance(self._tick(at_least=deadline))
            self._after_call()
        except Exception as error:
            self._fail(error)

    # ------------------------------------------------------------------ input

    def _check_open(self) -> None:
        if self.failed is not None or self.degraded is not None or self._closed:
            raise self._unavailable()

    def open_stream(self, peer: str = "") -> SubmitStream:
        stream = SubmitStream(peer)
        self._streams.add(stream)
        if self._closed or self.failed or self.degraded:
            stream.finish(self._unavailable())
        return stream

    def finish_stream(self, stream: SubmitStream) -> None:
        """The client closed its side: the call ends OK once everything it sent is durable, so
        a client knows its watermarks and ends (which get no ack) are safe too."""
        self.take_intake()
        stream.owe_ack(self._commit.written_generation, END_OF_STREAM, 0)
        stream.finish()
        stream.release(self._commit.synced_generation)

    def close_stream(self, stream: SubmitStream) -> None:
        self._streams.discard(stream)

    @property
    def max_unwritten(self) -> int:
        """Records taken in but not written past which Submit streams are not read."""
        return self._commit.max_unwritten

    @max_unwritten.setter
    def max_unwritten(self, records: int) -> None:
        self._commit.max_unwritten = records

    async def room_for_input(self) -> None:
        """Returns at once unless the writes are ``max_unwritten`` records behind; then when a
        write round has caught up (or the service stops taking input)."""
        await self._commit.room_for_input()

    def _speaks_for(self, stream: SubmitStream, source: int) -> None:
        if source not in stream.sources:
            stream.sources.add(source)
            if self._paused.get(source):
                stream.signal(source, True)

    def take_message(self, stream: SubmitStream, data: bytes) -> None:
        """One ``Submit`` message from ``stream``, as its raw bytes: decoded, checked and
        deduplicated against the sequence numbers this service holds by one compiled call
        (:func:`orderer.wire.submit.decode_submit`, which only reads them), then taken in."""
        item = submit.decode_submit(data, self.limits, self._next_sequence)
        if isinstance(item, submit.IncomingBatch):
            self._submit(stream, item)
        elif isinstance(item, submit.WatermarkItem):
            self.watermark(stream, item.source, item.watermark)
        else:
            self.end_source(stream, item.source)

    def _submit(self, stream: SubmitStream, incoming: submit.IncomingBatch) -> None:
        """A batch checked and deduplicated by :meth:`take_message`: into the intake, the
        source's next sequence moved, its ack owed."""
        self._check_open()
        batch = incoming.batch
        for source in incoming.sources:
            self._speaks_for(stream, source)
        if incoming.source is None or incoming.next_sequence is None:
            self._intake.add_batch(batch, None)
            self._intake_soon()
            return
        if len(batch):
            self._intake.add_batch(batch, incoming.first_sequence)
            self._next_sequence[incoming.source] = incoming.next_sequence
        self._intake.owe_ack(stream, incoming.source, incoming.next_sequence)
        self._intake_soon()

    def watermark(self, stream: SubmitStream, source: int, watermark: int) -> None:
        self._check_open()
        self._speaks_for(stream, source)
        self._intake.add_watermark(source, watermark)
        self._intake_soon()

    def end_source(self, stream: SubmitStream, source: int) -> None:
        self._check_open()
        self._speaks_for(stream, source)
        self._intake.add_end_of_source(source)
        self._intake_soon()

    def _intake_soon(self) -> None:
        """Take the intake in once the loop has read what is ready now (see intake.py)."""
        if not self._intake_scheduled:
            self._intake_scheduled = True
            asyncio.get_running_loop().call_soon(self.take_intake)

    def take_intake(self) -> None:
        """One intake pass: everything waiting goes in at one arrival time, is staged for the
        arrival log as one record batch, and its acks are owed to the generation that stages
        it. Every other input (configure, end of run, a deadline, a stream's end) takes the
        intake first, so the orderer sees input in arrival order."""
        self._intake_scheduled = False
        if not self._intake or self.failed is not None:
            return
        taken = self._intake.take()
        now = self._tick()
        if taken.batches or taken.markers:
            # convert checked every batch as the core does: the core cannot refuse one here
            taken.run(self._orderer, now)
            self._commit.stage_input(now, taken)
        if taken.fragments:
            self._latency.arrived(now, taken.fragments)
            self._run_ended = False
        self._after_call()
        for stream, source, sequence in taken.acks:
            stream.owe_ack(self._commit.written_generation, source, sequence)
            stream.release(self._commit.synced_generation)

    async def configure(self, changes: Mapping[str, Any]) -> OrdererConfig:
        """A live change of parameters (checked first: ``ConfigError`` names the parameter),
        recorded in the arrival log; returns once durable."""
        self._check_open()
        new = self._orderer.config.with_changes(**changes)
        self.take_intake()
        now = self._tick()
        self._orderer.configure(new, now=now)
        self._commit.stage(now, ArrivalRecords.configure(changes))
        self._after_call()
        await self._durable(self._commit.written_generation)
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
        self._check_open()
        declared = self.limits.sources
        if declared is not None and source not in declared:
            raise InterfaceError(
                f"source: {source} is not a declared source",
                hint=f"the server accepts only {sorted(declared)}",
            )
        self.take_intake()
        known_sources = self._orderer.source_ids
        if source not in known_sources:
            raise InterfaceError(
                f"source: {source} is not known to this orderer (known: "
                f"{', '.join(map(str, known_sources)) or 'none yet'})",
                hint="a source is known once declared (--sources) or once it has sent anything",
            )
        now = self._tick()
        known = self._orderer.set_source_state(source, dead, now=now)
        self._commit.stage(now, ArrivalRecords.source_state(source, dead))
        self._after_call()
        dead_now = bool(self._orderer.source_states(now=now).get(source, {}).get("dead", dead))
        await self._durable(self._commit.written_generation)
        log.info("source %d %s by hand", source, "marked dead" if dead else "revived")
        return known, dead_now

    async def end_run(self) -> int:
        """The spec's end of run: drain every queue now; returns the offset after the run's last
        fragment once everything is durable."""
        self._check_open()
        self.take_intake()
        now = self._tick()
        self._orderer.end_run(now=now)
        self._commit.stage(now, ArrivalRecords.marker(ArrivalKind.END_RUN))
        self._run_ended = True
        self._after_call()
        await self._durable(self._commit.written_generation)
        return self._commit.durable_offset

    async def begin_run(self, run: int | None = None) -> tuple[int, int]:
        """The next run on the same server, once the current one has ended: recorded in the
        arrival log (recovery continues with it); returns ``(its number, the output offset of
        its first fragment)`` once durable. The orderer itself is untouched (docs/ordering.md,
        "Runs one after another"): the number only names the output from that offset on."""
        self._check_open()
        self.take_intake()
        if not self._run_ended:
            raise InterfaceError(
                f"run {self._run} has not ended",
                hint="end it first (evb end-run); a run begins only after the previous one ended",
            )
        number = self._run + 1 if run is None else run
        if number <= self._run:
            raise InterfaceError(
                f"run: {number} is not above the current run {self._run}",
                hint="run numbers increase from run to run",
            )
        now = self._tick()
        self._commit.stage(now, ArrivalRecords.marker(ArrivalKind.BEGIN_RUN, value=number))
        self._after_call()
        await self._durable(self._commit.written_generation)
        self._run, self._run_start, self._run_ended = number, self._commit.durable_offset, False
        self._runs.append((number, self._run_start))
        log.info("run %d begun at output offset %d", number, self._run_start)
        return number, self._run_start

    def _after_call(self) -> None:
        """After every orderer call: note what it emitted (the output stays in the core until
        the next write round takes it all at once), relay flow control, re-arm the timer, and
        have the new state written and made durable."""
        self._take_barrier_log()
        self._latency.left(self._last_time, self._orderer.queued)
        self._commit.advance(self._orderer.emitted_seq)
        for flow in self._orderer.take_flow_signals():
            self._paused[flow.source] = flow.paused
            for stream in self._streams:
                if flow.source in stream.sources:
                    stream.signal(flow.source, flow.paused)
        self._rearm()
        self._commit.start()

    def _take_barrier_log(self) -> None:
        """The barriers the last orderer call resolved (taken after every call, or the core's
        list grows), into the metrics and the barrier log ``GetStats`` shows."""
        resolved = self._orderer.take_barrier_log()
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
        self.health_changed.set()
        self._rearm()
        for stream in self._streams:
            stream.abandon()
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

    def stats(self, barrier_log_limit: int = 0) -> pb.Stats:
        """``GetStats``: the counters, the newest ``barrier_log_limit`` resolved barriers (0:
        1000), the open Submit streams and the consumers with their lag."""
        now = self._peek()
        durable = self._commit.durable_offset
        ended = self.run_ended_durably
        return convert.stats_to_pb(
            counters=self._orderer.counters(),
            states=self._orderer.source_states(now=now),
            next_offset=durable,
            high_water_mark=self._orderer.high_water_mark,
            queued=self._orderer.queued,
            now=now,
            # ended only once the run's last output is durable: a consumer that sees run_ended
            # and next_offset has the whole run (the Spark source closes its last event there)
            run_ended=ended,
            config=self._orderer.config,
            consumers=self._output.consumer_states(now),
            barrier_log=self._barrier_log.newest(barrier_log_limit),
            barriers_by_type=self._barrier_log.by_type,
            connections=[_connection(stream) for stream in self._streams],
            wall_time=time.time() - (self._clock.now() - now),
            run=self._run,
            run_start_offset=self._run_start,
            runs=self._run_table(durable if ended else None),
        )

    @property
    def run_ended_durably(self) -> bool:
        """The current run has ended and all its output is durable: what ``GetStats`` and the
        metrics call ended (a consumer that sees it and ``next_offset`` has the whole run)."""
        return self._run_ended and self._commit.durable_offset == self._commit.written_offset

    def _run_table(self, current_end: int | None) -> list[tuple[int, int, int | None]]:
        """``(run, start, end)`` of every run: a run ends where the next began (output between
        an end of run and the next begin run is the earlier run's, as ``run_start_offset``
        says), the current one at ``current_end`` once it has ended (None: it goes on)."""
        ends: list[int | None] = [start for _, start in self._runs[1:]]
        return [
            (number, start, end)
            for (number, start), end in zip(self._runs, [*ends, current_end], strict=True)
        ]

    def metrics_snapshot(self) -> MetricsSnapshot:
        now = self._peek()
        return MetricsSnapshot(
            counters=self._orderer.counters(),
            states=self._orderer.source_states(now=now),
            output_offset=self._commit.durable_offset,
            high_water_mark=self._orderer.high_water_mark,
            submit_streams=len(self._streams),
            subscribers=self._output.subscribers,
            now=now,
            run_ended=self.run_ended_durably,
            barriers=self._barriers.counts(),
            latency=self._latency.histogram.data(),
            fsync={name: h.data() for name, h in self._commit.fsync_seconds.items()},
            log_bytes={
                "arrival": directory_bytes(self.arrivals.directory),
                "ordered": directory_bytes(self.ordered.directory),
            },
            volume=_volume(self.arrivals.directory),
            degraded=self.degraded is not None,
            consumers=self._output.committed(),
            consumer_lag_seconds={
                name: state["lag_seconds"]
                for name, state in self._output.consumer_states(now).items()
            },
        )

    def next_sequence(self, source: int) -> int:
        return self._next_sequence.get(source, 0)

    # ------------------------------------------------------------------ shutdown

    def begin_shutdown(self) -> None:
        """Stop taking input: Submit streams finish (their owed acks still go out once durable,
        then they end UNAVAILABLE so clients reconnect elsewhere or later); subscribers end."""
        if not self._closed:
            self.take_intake()
        self._closed = True
        self._commit.shut()
        for stream in self._streams:
            stream.finish(ServiceUnavailable("the orderer is shutting down; reconnect and resend"))
        self._rearm()
        self._output.close()

    async def close(self) -> None:
        """Make everything durable and close the logs."""
        self.begin_shutdown()
        await self._commit.settle()
        try:
            await self._commit.close()
        except Exception:
            log.exception("closing the logs failed; the next start recovers from what is on disk")
        finally:
            if self._lock is not None:
                os.close(self._lock)  # releases the directory lock
                self._lock = None


def _connection(stream: SubmitStream) -> dict[str, Any]:
    """A Submit stream as ``GetStats`` lists it (``Stats.connections``)."""
    return {
        "peer": stream.peer,
        "sources": sorted(stream.sources),
        "since": stream.since,
        "messages": stream.messages,
        "bytes": stream.bytes,
        "acked": dict(stream.acked),
    }


def _volume(directory: Path) -> tuple[int, int] | None:
    """(free bytes for an unprivileged writer, size) of the volume holding ``directory``."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
