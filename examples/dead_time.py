"""Dead time and live time per source: how long each digitizer was busy converting.

The physics: a digitizer that takes a hit is busy for its conversion time ``DEAD_TIME`` and
loses (or piles up) whatever comes in the meantime. Over a run, its dead time is the length of
the union of the intervals ``[t, t + DEAD_TIME)`` of its fragments, and its live fraction the
rest of the time it ran. With the fragments in time order that union grows, at each fragment,
by ``min(gap to the previous fragment, DEAD_TIME)``; a fragment that comes less than
``DEAD_TIME`` after the previous one is piled up.

Why one stage is order-sensitive and the other an aggregation: the gap is to the *previous*
fragment of the same source, so the stage that takes it needs each source's fragments in stream
order, and the last timestamp carried from one micro-batch to the next (its state). What it
gives each fragment (the dead ticks it adds, piled up or not) is then a fact of that fragment,
and the run's totals are sums of them, which add up in any grouping: an aggregation, whose
results are one row per source for the whole run, the same however the job split or batched it.

The stages:

- ``source_hits`` (a sequencer): one row per fragment (source, timestamp), ordered by its
  ``offset``; it reads no payload, so it fits any data;
- ``conversions`` (order-sensitive, keyed by ``source``): one row per fragment, the dead ticks
  its conversion adds and whether it piled up;
- ``dead_time`` (an aggregation of ``conversions``): per source, the run's fragments, piled-up
  fragments, dead ticks, and its first and last timestamps.

Run it::

    evb spark-job --stages examples/dead_time.py --dt 100 ...

and read ``OUTPUT/stages/dead_time/run=RUN/`` with :func:`live_time`. A late fragment (a
timestamp before its predecessor's) counts as piled up and adds no dead time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from orderer.stages import aggregation, order_sensitive, sequencer

DEAD_TIME = 1_000
"""Conversion time, ticks (10 us at 100 MHz)."""

Totals = dict[int, npt.NDArray[np.int64]]
"""``dead_time``'s accumulator: per source, (fragments, piled up, dead ticks, first, last)."""


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
        ("offset", pa.int64()),
        ("source", pa.int64()),
        ("timestamp", pa.int64()),
        ("dead", pa.int64()),
        ("piled_up", pa.bool_()),
    ],
    reads="source_hits",
    key="source",
)
def conversions(hits: pa.Table, previous: int | None) -> tuple[pa.Table, int]:
    """One source's fragments in stream order; ``previous``: the timestamp of its fragment
    before them (None: these are its first, whose conversion is all dead time)."""
    timestamp = hits["timestamp"].to_numpy()
    before = timestamp[0] - DEAD_TIME if previous is None else previous
    gap = np.diff(timestamp, prepend=before)
    table = hits.select(["offset", "source", "timestamp"])
    table = table.append_column("dead", pa.array(np.clip(gap, 0, DEAD_TIME)))
    table = table.append_column("piled_up", pa.array(gap < DEAD_TIME))
    return table, int(timestamp[-1])


def _no_totals() -> Totals:
    return {}


def _add(first: Totals, second: Totals) -> Totals:
    """Two sets of totals as one: counts and dead ticks added, the earliest first and the
    latest last kept."""
    out = dict(first)
    for source, more in second.items():
        have = out.get(source)
        if have is None:
            out[source] = more
        else:
            counted = have[:3] + more[:3]
            out[source] = np.array(
                [*counted, min(have[3], more[3]), max(have[4], more[4])], np.int64
            )
    return out


def _rows(totals: Totals) -> pa.Table:
    """The totals, one row per source, by source."""
    sources = sorted(totals)
    values = np.array([totals[s] for s in sources], np.int64).reshape(len(sources), 5)
    names = ("fragments", "piled_up", "dead", "first", "last")
    return pa.table(
        {"source": pa.array(sources, pa.int64())}
        | {name: values[:, k] for k, name in enumerate(names)}
    )


@aggregation(
    schema=[
        ("source", pa.int64()),
        ("fragments", pa.int64()),
        ("piled_up", pa.int64()),
        ("dead", pa.int64()),
        ("first", pa.int64()),
        ("last", pa.int64()),
    ],
    reads="conversions",
    initial=_no_totals,
    combine=_add,
    finish=_rows,
)
def dead_time(rows: pa.Table, totals: Totals) -> Totals:
    """These fragments' conversions added to each source's totals."""
    piece = rows.group_by("source").aggregate(
        [
            ("offset", "count"),
            ("piled_up", "sum"),
            ("dead", "sum"),
            ("timestamp", "min"),
            ("timestamp", "max"),
        ]
    )
    columns = ("offset_count", "piled_up_sum", "dead_sum", "timestamp_min", "timestamp_max")
    values = np.stack([piece[c].to_numpy().astype(np.int64) for c in columns], axis=1)
    return _add(totals, dict(zip(piece["source"].to_pylist(), values, strict=True)))


def live_time(rows: pa.Table) -> pa.Table:
    """``dead_time``'s rows (or any rows of those columns: they are summed per source) with
    each source's live fraction of the time from its first fragment to the end of its last's
    conversion."""
    total = (
        rows.group_by("source")
        .aggregate(
            [
                ("fragments", "sum"),
                ("piled_up", "sum"),
                ("dead", "sum"),
                ("first", "min"),
                ("last", "max"),
            ]
        )
        .sort_by("source")
    )
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
