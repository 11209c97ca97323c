"""What arrived since the last intake pass: input waiting to be taken in as one step.

Why: gRPC Python hands the service one message at a time, and every orderer call, arrival-log
append and ordered-log append has a fixed cost (Arrow record batches, timers, bookkeeping) that
dwarfs the per-fragment work at 1000 fragments a message. So the orderer's thread
(:mod:`~orderer.service.ingest`) only checks each message of a cycle, deduplicates it and puts it
here; then it takes everything that is here in one *intake pass* at one arrival time: one
orderer call per run of batches, one arrival-log record batch, one ordered-log append, one
timer re-arm.

Why that is still the ordering contract: the pass gives every record it takes in the same
arrival time ``t`` and logs them so, in arrival order. A run of batches submitted at ``t`` is
"records arriving at one time, each followed by a flush" (the core's batch semantics), which is
exactly what ``evb replay`` (and recovery) does with consecutive records of equal ``t``; a
watermark or end of source between two batches splits the run and is its own call at ``t``. The
arrival log therefore replays to the very output the live service produced.

Acks wait here too, also for resends that brought nothing new: the sequence they acknowledge may
still be in this intake, and an ack must never go out before what it covers is written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orderer._core.core import arrival_rows
from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch
from orderer.service.payload_rows import fragments_with_rows

if TYPE_CHECKING:
    from orderer.api import Orderer

__all__ = ["ALONE_BYTES", "Intake", "IntakePass", "arrival_records"]


@dataclass(slots=True)
class _Marker:
    """A watermark or an end of source, between batches."""

    kind: ArrivalKind
    source: int
    value: int = 0


@dataclass(slots=True)
class IntakePass:
    """Everything taken from the intake at once, in arrival order."""

    batches: list[FragmentBatch] = field(default_factory=list)
    sequences: list[int | None] = field(default_factory=list)
    """First sequence number of each batch (None: an unsequenced multi-source batch)."""
    markers: list[tuple[int, _Marker]] = field(default_factory=list)
    """(number of batches before it, marker)."""
    acks: list[tuple[Any, int, int]] = field(default_factory=list)
    """(stream, source, durable sequence) owed once this pass is written."""
    fragments: int = 0
    payload_bytes: int = 0
    first_row: int = 0
    """Row number in the arrival log of the pass's first record (set when it is taken)."""

    def __bool__(self) -> bool:
        return bool(self.batches or self.markers or self.acks)

    @property
    def records(self) -> int:
        """Rows this pass adds to the arrival log."""
        return self.fragments + len(self.markers)

    def run(self, orderer: Orderer, now: float) -> None:
        """The orderer calls of this pass at ``now``: the batches between two markers in one
        call (:meth:`Orderer.submit_batches`, a submit of each in turn), markers between them;
        each fragment's row in the arrival log (from :attr:`first_row`) in place of its payload
        (:mod:`~orderer.service.payload_rows`).

        Not the batches joined into one: the same output (records of one arrival time, each
        followed by a flush, see above), without the copy that joining costs; the arrival
        log's rows are joined once for many passes (:func:`arrival_records`)."""
        row = self.first_row
        run: list[FragmentBatch] = []
        for item in self.rows():
            if isinstance(item, _Marker):
                if run:
                    orderer.submit_batches(run, now=now)
                    run = []
                if item.kind is ArrivalKind.WATERMARK:
                    orderer.watermark(item.source, item.value, now=now)
                else:
                    orderer.end_source(item.source, now=now)
                row += 1
            else:
                run.append(fragments_with_rows(item, row))
                row += len(item)
        if run:
            orderer.submit_batches(run, now=now)

    def rows(self) -> Iterator[FragmentBatch | _Marker]:
        """The pass's batches and markers in arrival order."""
        start = 0
        for before, marker in self.markers:
            yield from self.batches[start:before]
            start = before
            yield marker
        yield from self.batches[start:]


ALONE_BYTES = 512 << 10
"""A batch with at least this many payload bytes is an arrival-log record batch of its own,
its payload written from the received message where it lies; smaller ones are joined (the
figures: README, "The service")."""


def arrival_records(passes: Sequence[tuple[float, IntakePass]]) -> list[ArrivalRecords]:
    """Taken passes as arrival-log rows in arrival order, each row with its pass's arrival
    time, in pieces that are each one record batch of the log: runs of small batches and
    markers joined, each batch of :data:`ALONE_BYTES` or more alone.

    Why joined: a record batch has a fixed cost (its metadata, a write per column) that dwarfs
    the rows of one small message. Why a large batch alone: its payload then needs no copy at
    all before the kernel's (Arrow writes it from the message), where joining copied every
    payload byte once more. Each piece is one compiled call (:func:`orderer._core.core.
    arrival_rows`) that makes the columns without the GIL: the service calls this on a writer
    thread while the event loop's and the orderer's threads are busy, where each of the numpy
    calls it took before could wait for the GIL. Here only a tuple per batch and per marker is
    made. Passes without a row at all raise ``ValueError``, as before (the service stages
    none)."""
    pieces: list[ArrivalRecords] = []
    groups: list[tuple[Any, ...]] = []
    for t, taken in passes:
        sequences = iter(taken.sequences)
        for row in taken.rows():
            if isinstance(row, _Marker):
                groups.append((t, row.kind, row.source, row.value))
                continue
            group = (
                t, next(sequences), row.source, row.timestamp, row.barrier,
                row.payload_offsets, row.payload,
            )
            if row.payload.shape[0] < ALONE_BYTES:
                groups.append(group)
                continue
            if groups:
                pieces.append(ArrivalRecords(*arrival_rows(groups)))
                groups = []
            pieces.append(ArrivalRecords(*arrival_rows([group])))
    if groups:
        pieces.append(ArrivalRecords(*arrival_rows(groups)))
    if not pieces:
        raise ValueError("arrival records of passes without batches or markers")
    return pieces


class Intake:
    """The input waiting for the next intake pass."""

    __slots__ = ("_pass",)

    def __init__(self) -> None:
        self._pass = IntakePass()

    def __bool__(self) -> bool:
        return bool(self._pass)

    @property
    def fragments(self) -> int:
        return self._pass.fragments

    @property
    def records(self) -> int:
        """Arrival-log rows the pass so far adds."""
        return self._pass.records

    @property
    def payload_bytes(self) -> int:
        """Their payload bytes."""
        return self._pass.payload_bytes

    def add_batch(self, batch: FragmentBatch, first_sequence: int | None) -> None:
        if len(batch):
            self._pass.batches.append(batch)
            self._pass.sequences.append(first_sequence)
            self._pass.fragments += len(batch)
            self._pass.payload_bytes += batch.payload.shape[0]

    def add_watermark(self, source: int, watermark: int) -> None:
        marker = _Marker(ArrivalKind.WATERMARK, source, watermark)
        self._pass.markers.append((len(self._pass.batches), marker))

    def add_end_of_source(self, source: int) -> None:
        marker = _Marker(ArrivalKind.END_OF_SOURCE, source)
        self._pass.markers.append((len(self._pass.batches), marker))

    def owe_ack(self, stream: Any, source: int, sequence: int) -> None:
        self._pass.acks.append((stream, source, sequence))

    def take(self) -> IntakePass:
        taken, self._pass = self._pass, IntakePass()
        return taken
