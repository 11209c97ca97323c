"""Dead time and live time per source: how long each digitizer was busy converting.

The physics: a digitizer that takes a hit is busy for its conversion time ``DEAD_TIME`` and
loses (or piles up) whatever comes in the meantime. Over a run, its dead time is the length of
the union of the intervals ``[t, t + DEAD_TIME)`` of its fragments, and its live fraction the
rest of the time it ran. With the fragments in time order that union grows, at each fragment,
by ``min(gap to the previous fragment, DEAD_TIME)``; a fragment that comes less than
``DEAD_TIME`` after the previous one is piled up.

Why it is order-sensitive: the gap is to the *previous* fragment of the same source, so the
stage needs each source's fragments in stream order, and the last timestamp carried from one
micro-batch to the next (its state). The sums it outputs are then order-insensitive: any
grouping of its rows adds up the same (:func:`live_time`).

The stages:

- ``source_hits`` (a sequencer): one row per fragment (source, timestamp), ordered by its
  ``offset``; it reads no payload, so it fits any data;
- ``dead_time`` (order-sensitive, keyed by ``source``): per source and call, the fragments,
  the piled-up ones and the dead ticks they add.

Run it::

    evb spark-job --stages examples/dead_time.py --dt 100 ...

and sum ``OUTPUT/stages/dead_time/run=RUN/`` with :func:`live_time`. A late fragment (a
timestamp before its predecessor's) counts as piled up and adds no dead time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.stages import order_sensitive, sequencer

DEAD_TIME = 1_000
"""Conversion time, ticks (10 us at 100 MHz)."""


@sequencer(
    schema=[("offset", pa.int64()), ("source", pa.int64()), ("timestamp", pa.int64())],
    order_by=("offset",),
)
def source_hits(events: pa.Table) -> pa.Table:
    """Every fragment of the events (barrier rows left out), in stream order."""
    events = events.filter(pc.equal(events["barrier"], 0))
    fragments = pc.list_flatten(events["fragments"])
    return pa.table(
        {name: pc.struct_field(fragments, name) for name in ("offset", "source", "timestamp")}
    )


@order_sensitive(
    schema=[
        ("source", pa.int64()),
        ("fragments", pa.int64()),
        ("piled_up", pa.int64()),
        ("dead", pa.int64()),
        ("first", pa.int64()),
        ("last", pa.int64()),
    ],
    reads="source_hits",
    key="source",
)
def dead_time(hits: pa.Table, previous: int | None) -> tuple[pa.Table, int]:
    """One source's fragments in stream order; ``previous``: the timestamp of its fragment
    before them (None: these are its first). One row: what they add."""
    timestamp = hits["timestamp"].to_numpy()
    first = timestamp[0] - DEAD_TIME if previous is None else previous  # the first: all busy
    gap = np.diff(timestamp, prepend=first)
    row = {
        "source": [hits["source"][0].as_py()],
        "fragments": [len(timestamp)],
        "piled_up": [int(np.count_nonzero(gap < DEAD_TIME))],
        "dead": [int(np.clip(gap, 0, DEAD_TIME).sum())],
        "first": [int(timestamp[0])],
        "last": [int(timestamp[-1])],
    }
    return pa.table(row), int(timestamp[-1])


def live_time(rows: pa.Table) -> pa.Table:
    """The stage's rows summed per source: fragments, piled up, dead ticks, and the live
    fraction of the time from its first fragment to the end of its last's conversion."""
    total = rows.group_by("source").aggregate(
        [("fragments", "sum"), ("piled_up", "sum"), ("dead", "sum"), ("first", "min"),
         ("last", "max")]
    ).sort_by("source")
    span = pc.add(pc.subtract(total["last_max"], total["first_min"]), DEAD_TIME)
    live = pc.subtract(1.0, pc.divide(pc.cast(total["dead_sum"], pa.float64()), span))
    return pa.table(
        {
            "source": total["source"],
            "fragments": total["fragments_sum"],
            "piled_up": total["piled_up_sum"],
            "dead": total["dead_sum"],
            "live_fraction": live,
        }
    )
