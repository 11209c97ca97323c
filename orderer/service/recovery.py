"""Recovery: the orderer a restarted service continues with, rebuilt from the arrival log, and
the ordered log completed.

Why its own module: the orderer is deterministic given the arrival times, so the arrival log
alone rebuilds it; what the crash kept from the ordered log is emitted again by the replay and
appended, so every offset is written exactly once. The walk over the arrival log (how each kind
of record is taken in) is :mod:`orderer.replay.run_walk`'s, shared with ``evb replay``, so that
a recovered run and its replay cannot drift apart; here are only the orderer it is built with,
the resend bookkeeping (the next sequence number of each source) and the check that the two
logs belong together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from orderer.api import Orderer
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.clock import MonotonicClock
from orderer.config import OrdererConfig
from orderer.errors import InternalOrdererError
from orderer.replay.run_walk import walk_arrivals
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.payload_rows import records_with_rows, rows_of

__all__ = ["Recovered", "recover"]


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a restarted service continues from."""

    orderer: Orderer
    next_sequence: dict[int, int]
    """Per source: the sequence number the next new fragment must carry (dedupe of resends)."""
    resume_time: float
    """Time of the last record or flush of the recovered run; the live clock starts here."""
    run_ended: bool
    run: int | None = None
    """The run number of the log's last begin run; None: no run was begun (the first run)."""
    run_start_offset: int = 0
    """Output offset of that run's first fragment."""
    runs: tuple[tuple[int, int], ...] = ()
    """Every begun run, in order: ``(number, output offset of its first fragment)`` (the
    service's run table, after its first run)."""


def recover(
    config: OrdererConfig,
    arrivals: ArrivalLog,
    ordered: OrderedLog,
    *,
    emitted: Callable[[EmittedBatch], None] | None = None,
) -> Recovered:
    """Rebuild the orderer from the arrival log and complete the ordered log.

    Every arrival is replayed at its recorded time, then the deadlines up to the last flush the
    ordered log saw are run; the orderer being deterministic, its output up to the log's end is
    what the log holds, and what comes after was emitted (or due) before the crash but not yet
    written: it is appended now. A fresh directory gives a fresh orderer at time 0.

    ``emitted`` is handed every batch the replay emits, in order from offset 0 (payloads
    replaced by their arrival-log rows): the whole output, whatever retention deleted of the
    ordered log, which is what the slice index is rebuilt from.
    """
    resume = max(arrivals.last_arrival_time or 0.0, ordered.last_emit_time or 0.0)
    orderer = Orderer(config, clock=MonotonicClock(start=resume))
    next_sequence: dict[int, int] = {}
    logged = ordered.next_offset

    def complete_log() -> None:
        output = rows_of(orderer.take_emitted())
        n = len(output)
        if n == 0:
            return
        if emitted is not None:
            emitted(output)
        end = output.first_seq + n
        if end <= logged:
            return
        skip = max(0, logged - output.first_seq)
        if skip:
            output = output.slice(skip)
        ordered.append(output)

    def noting_sequences() -> Iterator[ArrivalRecords]:
        """The arrival log's records as the live orderer took them in (each record's row in
        place of its payload), noting each source's next sequence number on the way."""
        row = 0
        for records in arrivals.read_records():
            if records.sequence is not None:
                sources, values = records.source, records.sequence
                valid = records.carries_sequence()
                for source in np.unique(sources[valid]):
                    top = int(values[valid & (sources == source)].max())
                    next_sequence[int(source)] = max(next_sequence.get(int(source), 0), top + 1)
            yield records_with_rows(records, row)
            row += len(records)

    walk = walk_arrivals(orderer, noting_sequences(), complete_log)
    run, run_start_offset = walk.runs[-1] if walk.runs else (None, 0)
    # deadline flushes the live run made after its last arrival, up to its last logged flush
    orderer.advance(now=resume)
    complete_log()
    if ordered.next_offset < logged or orderer.emitted_seq < logged:
        raise InternalOrdererError(
            f"the ordered log holds {logged} fragments but replaying the arrival log emits "
            f"only {orderer.emitted_seq}: the two logs do not belong together"
        )
    ordered.sync()
    return Recovered(
        orderer, next_sequence, resume, walk.run_ended, run, run_start_offset, tuple(walk.runs)
    )
