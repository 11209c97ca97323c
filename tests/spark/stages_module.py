"""Stages as a user writes them, one of each class, for the tests of ``--stages``: the
order-sensitive ones give a different answer in any other order, so that the tests see a
reordering.

- ``fragments`` (a sequencer): one row per fragment, ordered by its output offset;
- ``gaps`` (order-sensitive, per source): each fragment's timestamp minus its source's previous
  one (a dead-time computation), the state being the source's last timestamp; it declares a
  histogram of its gaps (``GAP_HISTOGRAM``: power-of-two bins, exact in floating point) and a
  2D one of its gaps by source (``SOURCE_GAP_HISTOGRAM``);
- ``running`` (order-sensitive, global): the running sum of the events' multiplicities;
- ``sizes`` (order-insensitive): each event's payload bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orderer.stages import Histogram, Histogram2D, order_insensitive, order_sensitive, sequencer

FRAGMENT_ROWS = pa.schema(
    [
        ("offset", pa.int64()),
        ("event", pa.int64()),
        ("source", pa.int64()),
        ("timestamp", pa.int64()),
        ("late", pa.bool_()),
    ]
)


GAP_HISTOGRAM = Histogram("gap", 128, -(2**20), 3 * 2**20, label="gap", unit="ticks", log=True)
"""Bins of 2**15 ticks (a source sends every 500,000 ticks or so); a stall's gap overflows."""
SOURCE_GAP_HISTOGRAM = Histogram2D(
    Histogram("source", 4, 1, 5), Histogram("gap", 32, -(2**20), 3 * 2**20, unit="ticks")
)
"""The gaps by source, 2D: each source's row of 2**17-tick bins."""


@sequencer(schema=FRAGMENT_ROWS, order_by=("offset",))
def fragments(events: pa.Table) -> pa.Table:
    lists = events.column("fragments").combine_chunks()
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists)
    return pa.table(
        {
            "offset": flat.field("offset"),
            "event": pc.take(events.column("event"), parents),
            "source": flat.field("source"),
            "timestamp": flat.field("timestamp"),
            "late": flat.field("late"),
        }
    )


@order_sensitive(
    schema=[("offset", pa.int64()), ("source", pa.int64()), ("gap", pa.int64())],
    reads="fragments",
    key="source",
    histograms=[GAP_HISTOGRAM, SOURCE_GAP_HISTOGRAM],
)
def gaps(rows: pa.Table, last: int | None) -> tuple[pa.Table, int]:
    stamps = rows.column("timestamp").to_numpy()
    before = np.concatenate([[stamps[0] if last is None else last], stamps[:-1]])
    table = pa.table(
        {"offset": rows.column("offset"), "source": rows.column("source"), "gap": stamps - before}
    )
    return table, int(stamps[-1])


@order_sensitive(schema=[("event", pa.int64()), ("running", pa.int64())], initial=lambda: 0)
def running(events: pa.Table, total: int) -> tuple[pa.Table, int]:
    sums = np.cumsum(events.column("multiplicity").to_numpy().astype(np.int64)) + total
    return pa.table({"event": events.column("event"), "running": sums}), int(sums[-1])


@order_insensitive(schema=[("event", pa.int64()), ("payload_bytes", pa.int64())])
def sizes(events: pa.Table) -> pa.Table:
    lists = events.column("fragments").combine_chunks()
    lengths = pc.binary_length(pc.list_flatten(lists).field("payload"))
    per_event = pa.table(
        {"parent": pc.list_parent_indices(lists), "length": lengths}
    ).group_by("parent").aggregate([("length", "sum")])
    order = pc.sort_indices(per_event, [("parent", "ascending")])
    totals = pc.take(per_event.column("length_sum"), order)
    present = pc.take(per_event.column("parent"), order)
    return pa.table(
        {"event": pc.take(events.column("event"), present), "payload_bytes": totals}
    )
