"""``evb replay``: the deterministic simulator of docs/ordering.md, over records in memory.

Feeds a run's records (:class:`~orderer.batch.ArrivalRecords`: a JSON Lines run read by
:func:`orderer.formats.json_lines.read_records`, NSCLDAQ ring items' fragments) to the same core
the live service runs, with time taken from the records, and returns what was emitted and the
counters. A recorded input too large for memory is replayed chunk by chunk instead
(:mod:`orderer.replay.stream`).
"""

from __future__ import annotations

from typing import Any

from orderer.api import Orderer
from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.clock import SimulatedClock
from orderer.config import OrdererConfig

__all__ = ["replay"]


def replay(
    records: ArrivalRecords, config: OrdererConfig
) -> tuple[EmittedBatch, dict[str, Any]]:
    """Run the records through an orderer on simulated time; end of run at the last ``t``."""
    orderer = Orderer(config, clock=SimulatedClock())
    orderer.replay_records(records)
    if len(records):
        orderer.end_run(now=float(records.times()[-1]))
    return orderer.take_emitted(), orderer.counters()
