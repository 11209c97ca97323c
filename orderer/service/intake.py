"""What arrived since the last intake pass: input waiting to be taken in as one step.

Why: gRPC Python hands the service one message at a time, and every orderer call, arrival-log
append and ordered-log append has a fixed cost (Arrow record batches, timers, bookkeeping) that
dwarfs the per-fragment work at 1000 fragments a message. So ``Submit`` only checks a message,
deduplicates it and puts it here; the service then takes everything that is here in one *intake
pass* at one arrival time: one orderer call per run of batches, one arrival-log record batch, one
ordered-log append, one timer re-arm.

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch

if TYPE_CHECKING:
    from orderer.api import Orderer

__all__ = ["Intake", "IntakePass"]


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

    def __bool__(self) -> bool:
        return bool(self.batches or self.markers or self.acks)

    @property
    def records(self) -> int:
        """Rows this pass adds to the arrival log."""
        return self.fragments + len(self.markers)

    def run(self, orderer: Orderer, now: float) -> None:
        """The orderer calls of this pass at ``now``: a submit per batch, markers between them.

        A submit per batch rather than one of the batches joined: the same output (records of
        one arrival time, each followed by a flush, see above), and the copy that joining costs
        is left to :meth:`arrival_rows`, which the write round runs off the event loop."""
        batches = iter(self.batches)
        start = 0
        for before, marker in self.markers:
            for _ in range(before - start):
                orderer.submit(next(batches), now=now)
            start = before
            if marker.kind is ArrivalKind.WATERMARK:
                orderer.watermark(marker.source, marker.value, now=now)
            else:
                orderer.end_source(marker.source, now=now)
        for batch in batches:
            orderer.submit(batch, now=now)

    def arrival_rows(self) -> ArrivalRecords:
        """The pass as arrival-log rows (fragments and markers interleaved in arrival order).
        Safe in a worker thread: a taken pass is never changed again."""
        pieces: list[ArrivalRecords] = []
        start = 0
        for before, marker in self.markers:
            if before > start:
                pieces.append(self._fragment_rows(start, before))
                start = before
            pieces.append(ArrivalRecords.marker(marker.kind, marker.source, marker.value))
        if len(self.batches) > start:
            pieces.append(self._fragment_rows(start, len(self.batches)))
        return ArrivalRecords.concat(pieces)

    def _fragment_rows(self, start: int, stop: int) -> ArrivalRecords:
        batch = FragmentBatch.concat(self.batches[start:stop])
        lengths = [len(b) for b in self.batches[start:stop]]
        firsts = self.sequences[start:stop]
        sequence = np.zeros(len(batch), dtype=np.uint64)
        sequenced: npt.NDArray[np.bool_] | None = None
        position = 0
        for first, n in zip(firsts, lengths, strict=True):
            if first is None:
                if sequenced is None:
                    sequenced = np.ones(len(batch), dtype=np.bool_)
                sequenced[position : position + n] = False
            else:
                sequence[position : position + n] = np.arange(first, first + n, dtype=np.uint64)
            position += n
        return ArrivalRecords.fragments(batch, sequence, sequenced)


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

    def add_batch(self, batch: FragmentBatch, first_sequence: int | None) -> None:
        if len(batch):
            self._pass.batches.append(batch)
            self._pass.sequences.append(first_sequence)
            self._pass.fragments += len(batch)

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
