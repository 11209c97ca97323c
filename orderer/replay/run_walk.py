"""The walk over a recorded arrival stream: one implementation of how each kind of record is
taken in, shared by recovery (:func:`orderer.service.recovery.recover`) and ``evb replay``.

Why one module: live = replay of the arrival record is a guarantee, and recovery and replay are
the two readers of that record. Were the handling of a configuration change, a begin or an end
of run written twice, the two could drift apart silently; here is the only copy.

The records the core replays itself (fragments, watermarks, ends of source, source-state
changes) go to :meth:`~orderer.api.Orderer.replay_records` batch by batch, as they come; the
three others are applied here, each at its own arrival time, after what came before it:

- ``CONFIGURE``: the payload's JSON changes over the orderer's current configuration, applied
  with :meth:`~orderer.api.Orderer.configure` at the record's time;
- ``END_RUN``: :meth:`~orderer.api.Orderer.end_run` at the record's time;
- ``BEGIN_RUN``: the orderer is untouched; the run's number and its first output offset are
  noted (the service's run table).

``emitted`` is called once :data:`CHUNK_ROWS` records went in since the last call, after each
of those three and at the end, so a caller takes the output while memory stays bounded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords

__all__ = ["CHUNK_ROWS", "ArrivalWalker", "RunWalk", "walk_arrivals"]

CHUNK_ROWS = 1 << 16
"""Records taken in between two hand-overs of the output: few calls, bounded memory."""
_CONTROL = np.zeros(256, dtype=np.bool_)
_CONTROL[[ArrivalKind.CONFIGURE, ArrivalKind.END_RUN, ArrivalKind.BEGIN_RUN]] = True


@dataclass(slots=True)
class RunWalk:
    """What the walk saw of the runs: every begun run as ``(number, output offset of its first
    fragment)``, and whether the stream's last run had ended (an end of run with no fragment
    after it)."""

    runs: list[tuple[int, int]] = field(default_factory=list)
    run_ended: bool = False
    last_t: float | None = None
    """Arrival time of the last record walked; None when there was none."""


def _pieces(records: ArrivalRecords) -> Iterable[ArrivalRecords]:
    """The records cut so that each record the walk applies itself stands alone."""
    control = np.flatnonzero(_CONTROL[records.kind])
    if control.size == 0:
        yield records
        return
    start = 0
    for row in control.tolist():
        if row > start:
            yield records.slice(start, row)
        yield records.slice(row, row + 1)
        start = row + 1
    if start < len(records):
        yield records.slice(start, len(records))


class ArrivalWalker:
    """The walk fed one record batch at a time (:meth:`feed`), so that one pass over an input
    can feed several orderers (``evb replay``'s sweeps); :meth:`finish` hands the rest over."""

    __slots__ = ("_chunk_rows", "_emitted", "_orderer", "_taken_in", "walk")

    def __init__(
        self, orderer: Orderer, emitted: Callable[[], None], chunk_rows: int = CHUNK_ROWS
    ) -> None:
        self._orderer = orderer
        self._emitted = emitted
        self._chunk_rows = chunk_rows
        self._taken_in = 0
        self.walk = RunWalk()

    def _hand_over(self) -> None:
        """Hand the output over (``emitted``) once ``chunk_rows`` records went in since the last
        time: the records themselves go in as they come, without being joined (a copy)."""
        if self._taken_in:
            self._taken_in = 0
            self._emitted()

    def feed(self, batch: ArrivalRecords) -> None:
        """The next records, in arrival order, with their times."""
        if len(batch) == 0:
            return
        orderer, walk = self._orderer, self.walk
        walk.last_t = float(batch.times()[-1])
        for records in _pieces(batch):
            kind = int(records.kind[0])
            if kind == ArrivalKind.BEGIN_RUN:
                self._hand_over()
                walk.runs.append((int(records.value[0]), orderer.emitted_seq))
                walk.run_ended = False
                continue
            if kind in (ArrivalKind.CONFIGURE, ArrivalKind.END_RUN):
                self._hand_over()
                t = float(records.times()[0])
                if kind == ArrivalKind.CONFIGURE:
                    changes = json.loads(records.payload_of(0))
                    config = orderer.config
                    orderer.configure(
                        config.from_mapping({**config.to_mapping(), **changes}), now=t
                    )
                else:
                    orderer.end_run(now=t)
                    walk.run_ended = True
                self._emitted()
                continue
            if walk.run_ended and bool((records.kind == ArrivalKind.FRAGMENT).any()):
                walk.run_ended = False
            orderer.replay_records(records)
            self._taken_in += len(records)
            if self._taken_in >= self._chunk_rows:
                self._hand_over()

    def finish(self) -> RunWalk:
        """Hand over the rest of the output; the end of the stream does not end the run."""
        self._hand_over()
        return self.walk


def walk_arrivals(
    orderer: Orderer,
    batches: Iterable[ArrivalRecords],
    emitted: Callable[[], None],
    chunk_rows: int = CHUNK_ROWS,
) -> RunWalk:
    """Take every record of ``batches`` (in arrival order, with their times) into ``orderer``,
    calling ``emitted`` after each step; the end of the stream does not end the run."""
    walker = ArrivalWalker(orderer, emitted, chunk_rows)
    for batch in batches:
        walker.feed(batch)
    return walker.finish()
