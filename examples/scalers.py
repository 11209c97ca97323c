"""Scaler sums in time order: what the scaler module counted over the run, channel by channel.

The physics: a scaler module counts signals (triggers, a clock) on free-running 32-bit
counters and is read periodically; each read gives the counters' raw values. What counted
between two reads is their difference modulo 2**32 (a counter wraps), and the run's totals are
the sums of those increments: the trigger scaler against the events built tells the trigger
efficiency, the clock scaler the run's length.

Why it is order-sensitive: an increment is the difference from the *previous* read of the same
channel, so the reads must be taken in time order, and the previous read carried from one
micro-batch to the next (the state). The first read of a channel is its baseline (increment 0).

The stages:

- ``scaler_reads`` (a sequencer): the SCALER fragments of the events (payload of
  :mod:`orderer.replay.physics`), one row each (channel, raw count), ordered by ``timestamp``
  (then ``offset``);
- ``scaler_sums`` (order-sensitive, keyed by ``channel``): each read's increment and the
  channel's running total.

Run it::

    evb spark-job --stages examples/scalers.py --dt 100 ...

and read ``OUTPUT/stages/scaler_sums/run=RUN/``; :func:`totals` gives each channel's total.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.replay.physics import SCALER, fragment_table
from orderer.stages import order_sensitive, sequencer

_WRAP = 2**32


@sequencer(
    schema=[
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("channel", pa.int32()),
        ("count", pa.int64()),
    ],
    order_by=("timestamp", "offset"),
)
def scaler_reads(events: pa.Table) -> pa.Table:
    """Every scaler read of the events, in time order (a read's timestamp; the stream's order
    between reads of one time). Not the stream's order alone: a run over several orderers
    (docs/scale-out.md) keeps a source's order only for the fragments that are not late, and a
    late read placed after a later one would count a wrapped counter's 2**32."""
    rows = fragment_table(events)
    rows = rows.filter(pc.equal(rows["kind"], SCALER))
    return rows.rename_columns({"pixel": "channel"})


@order_sensitive(
    schema=[
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("channel", pa.int32()),
        ("increment", pa.int64()),
        ("total", pa.int64()),
    ],
    reads="scaler_reads",
    key="channel",
)
def scaler_sums(
    reads: pa.Table, state: tuple[int, int] | None
) -> tuple[pa.Table, tuple[int, int]]:
    """One channel's reads in time order; ``state``: its previous raw count and running total
    (None: these are its first reads, the first is the baseline)."""
    count = reads["count"].to_numpy()
    previous, total = (int(count[0]), 0) if state is None else state
    increment = np.diff(count, prepend=previous) % _WRAP
    running = total + np.cumsum(increment)
    out = reads.select(["offset", "timestamp", "channel"])
    out = out.append_column("increment", pa.array(increment))
    out = out.append_column("total", pa.array(running))
    return out, (int(count[-1]), int(running[-1]))


def totals(rows: pa.Table) -> dict[int, int]:
    """Each channel's total over the rows (the sum of its increments: any grouping)."""
    summed = rows.group_by("channel").aggregate([("increment", "sum")])
    return dict(
        zip(summed["channel"].to_pylist(), summed["increment_sum"].to_pylist(), strict=True)
    )
