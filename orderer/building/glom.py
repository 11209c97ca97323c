"""Event building ("glom") over the ordered stream, as NSCLDAQ's glom does it.

An **event** is the maximal run of consecutive ordinary fragments whose timestamps lie within
``dt`` ticks of the event's first fragment (``|ts - first| <= dt``), at most ``max_fragments + 1``
per event, as glom's ``--maxfragments N`` makes them (NSCLDAQ 12.0-maint,
``main/daq/evbtools/glom/glomMain.cpp``, ``accumulateEvent``: before it adds a fragment, glom
flushes the open event when ``fragmentCount > maxFragments``, so an event reaches ``N + 1``
fragments; ``N`` = 0 makes one event per fragment). A **barrier** closes the open event and passes
through as a row of its own. The event's timestamp follows the timestamp policy, as glom's
``--timestamp-policy`` sets it (NSCLDAQ's ``GLOM_TIMESTAMP_FIRST``, ``_LAST``, ``_AVERAGE``):
``earliest`` is the timestamp of the event's *first fragment in stream order*, ``latest`` that of
its *last* one, ``average`` the integer mean (rounded down). Stream order, not the smallest or
largest timestamp: an event that holds a late fragment can have a first fragment that is not its
smallest timestamp, and glom keeps the first one all the same. The no-build mode makes one event
per fragment (``dt`` None). How events are built is a :class:`~orderer.building.config.GlomConfig`.

The window is measured in exact integers, ``|ts - first|``. glom measures it in unsigned 64-bit
arithmetic both ways round and takes the shorter (``min(ts - first, first - ts)`` modulo 2**64,
glomMain.cpp, ``accumulateEvent``), so two timestamps more than 2**63 apart are close to glom
across the wrap (2**64 - 10 and 5 are 15 apart) and far apart here. The two agree whenever both
timestamps are below 2**63, and the Spark data source refuses any timestamp from 2**63 up
(:func:`fragment_rows`), so the events of the Spark job never differ.

Why the rule is split in two steps (numpy, pyarrow and the core's compiled chain of event starts):
the only order-sensitive step of the whole consumer is *where an event starts*
(:func:`event_starts`). Once a position is known to be an event start, everything after it is
glommed the same whatever came before, so the stream can be cut there into pieces that are built
independently and in parallel (:func:`glom_batches`, :func:`build_events`). The Spark source
(:mod:`orderer.spark.source.planning`) runs :func:`event_starts` over the small timestamp and
barrier columns to end micro-batches and partitions only at event starts, and the executors run
:func:`glom_batches` over their own piece, payloads and all; the sliced replay
(:mod:`orderer.replay.sliced_merge`) runs :func:`event_starts` from each slice's first sure start.
All call the same function, so the events are identical to a sequential, single-threaded glom of
the whole stream for any number of partitions, wherever micro-batches end, and however many
orderers ordered the run.

Callers: :mod:`orderer.spark.source` (the boundaries on the driver,
:mod:`~orderer.spark.source.planning`; the building in each partition's ``read()``,
:mod:`~orderer.spark.source.options`), :mod:`orderer.replay.sliced_merge` (the events of one
orderer and of N sliced ones), the benchmarks' baselines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from orderer._core import core
from orderer.batch import EmittedBatch
from orderer.building.config import GlomConfig, TimestampPolicy
from orderer.errors import InterfaceError

__all__ = [
    "EVENT_SCHEMA",
    "FRAGMENT_SCHEMA",
    "build_events",
    "event_starts",
    "fragment_rows",
    "glom_batches",
]

_INT64_LIMIT = 2**63


FRAGMENT_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("source", pa.int64()),
        ("timestamp", pa.int64()),
        ("barrier", pa.int64()),
        ("late", pa.bool_()),
        ("payload", pa.binary()),
    ]
)
"""The fragments events are built of, in offset order: the rows of the ``evb`` data source (Spark
has no unsigned types: ids and timestamps are longs; in Spark's words
:data:`orderer.spark.source.glom.FRAGMENT_SPARK_SCHEMA`)."""

_FRAGMENT_IN_EVENT = pa.struct([field for field in FRAGMENT_SCHEMA if field.name != "barrier"])
"""A fragment inside an event: a row of the data source less its barrier (the event row has it)."""
EVENT_SCHEMA = pa.schema(
    [
        ("event", pa.int64()),  # offset of the event's first fragment: unique in the run
        ("timestamp", pa.int64()),  # by the timestamp policy
        ("multiplicity", pa.int32()),  # fragments in the event
        ("barrier", pa.int64()),  # 0 for an event; the barrier type for a barrier row
        ("late", pa.int32()),  # late fragments in the event
        ("fragments", pa.list_(_FRAGMENT_IN_EVENT)),
    ]
)
"""Built events, one row each (in Spark's words
:data:`orderer.spark.source.glom.EVENT_SPARK_SCHEMA`); what the Spark job writes, the analysis
stages read and :mod:`orderer.spark.output.nscldaq` turns into ring items."""


def fragment_rows(
    batch: EmittedBatch, offsets: npt.NDArray[np.int64] | None = None
) -> pa.RecordBatch:
    """An ordered batch (from the orderer, or read from its log) as FRAGMENT_SCHEMA rows, the
    rows events are built of; ``offsets``: each row's ``offset`` (default: its offset in the
    orderer's output, ``first_seq`` on; a run over several orderers numbers the merged stream).
    A timestamp from 2**63 up is refused: Spark's long would hold it negative."""
    n = len(batch)
    timestamp = batch.timestamp
    if n and int(timestamp.max()) >= _INT64_LIMIT:
        bad = int(np.argmax(timestamp >= np.uint64(_INT64_LIMIT)))
        raise InterfaceError(
            f"offset {batch.first_seq + bad}: timestamp {int(timestamp[bad])} does not fit "
            "Spark's signed 64-bit long"
        )
    payload_offsets = batch.payload_offsets
    if payload_offsets.shape[0]:
        base = payload_offsets[0]
        if int(payload_offsets[-1] - base) >= 2**31:
            raise InterfaceError(f"offset {batch.first_seq}: more than 2 GiB of payload in a batch")
        binary = pa.Array.from_buffers(
            pa.binary(),
            n,
            [
                None,
                pa.py_buffer((payload_offsets - base).astype(np.int32)),
                pa.py_buffer(batch.payload),
            ],
        )
    else:
        binary = pa.array([b""] * n, pa.binary())
    if offsets is None:
        offsets = np.arange(batch.first_seq, batch.first_seq + n, dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.asarray(offsets, dtype=np.int64)),
            pa.array(batch.source.astype(np.int64)),
            pa.array(timestamp.view(np.int64)),
            pa.array(batch.barrier.astype(np.int64)),
            pa.array(batch.late.astype(np.bool_)),
            binary,
        ],
        schema=FRAGMENT_SCHEMA,
    )


def event_starts(
    timestamp: npt.NDArray[np.uint64],
    barrier: npt.NDArray[np.integer],
    *,
    dt: int | None,
    max_fragments: int = 1000,
) -> npt.NDArray[np.int64]:
    """Indices where an event (or a barrier row) starts, ascending, 0 first; glom from index 0.

    ``max_fragments`` is glom's ``--maxfragments``: an event holds at most ``max_fragments + 1``
    fragments, 0 makes every index a start (glomMain.cpp, ``accumulateEvent``).

    The rule is a chain (each event's first fragment decides where the event ends), so it runs
    as one compiled pass (``orderer._core``, ``glom_starts.pyx``): the Spark driver runs it over
    every micro-batch's timestamps, each executor over its partition's, the sliced replay over
    each orderer's output and the merged stream.
    """
    n = int(timestamp.shape[0])
    if max_fragments < 0:
        raise ValueError(f"max_fragments must be >= 0, not {max_fragments}")
    if dt is None or max_fragments == 0:
        return np.arange(n, dtype=np.int64)
    if dt < 0:
        raise ValueError(f"dt must be >= 0, not {dt}")
    is_barrier = np.ascontiguousarray(np.asarray(barrier) != 0).view(np.uint8)
    return core.event_starts_of(
        np.ascontiguousarray(timestamp, dtype=np.uint64),
        is_barrier,
        min(dt, 2**64 - 1),
        max_fragments + 1,
    )


def build_events(
    fragments: pa.Table | pa.RecordBatch,
    config: GlomConfig,
    starts: npt.NDArray[np.int64] | None = None,
) -> pa.RecordBatch:
    """Build every event of ``fragments`` (FRAGMENT_SCHEMA rows in offset order that start at an
    event start and end at an event end) into EVENT_SCHEMA rows; ``starts``: their
    :func:`event_starts`, when the caller has them already."""
    if isinstance(fragments, pa.RecordBatch):
        fragments = pa.Table.from_batches([fragments])
    table = fragments.combine_chunks()
    n = table.num_rows
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=EVENT_SCHEMA)
    ts = table.column("timestamp").chunk(0).to_numpy().view(np.uint64)
    barrier = table.column("barrier").chunk(0).to_numpy()
    late = table.column("late").chunk(0).to_numpy(zero_copy_only=False)
    offset = table.column("offset").chunk(0)
    if starts is None:
        starts = event_starts(
            ts,
            barrier,
            dt=config.dt if config.builds else None,
            max_fragments=config.max_fragments,
        )
    counts = np.diff(np.append(starts, n))
    if config.timestamp_policy is TimestampPolicy.EARLIEST:  # the first fragment's, as glom
        stamp = ts[starts]
    elif config.timestamp_policy is TimestampPolicy.LATEST:  # the last fragment's, as glom
        stamp = ts[starts + counts - 1]
    else:  # floor of the mean, exactly: min + floor(sum(ts - min) / n), no overflow
        smallest = np.minimum.reduceat(ts, starts)
        above = ts - np.repeat(smallest, counts)
        stamp = smallest + np.add.reduceat(above, starts) // counts.astype(np.uint64)
    inner = pa.StructArray.from_arrays(
        [
            offset,
            table.column("source").chunk(0),
            table.column("timestamp").chunk(0),
            table.column("late").chunk(0),
            table.column("payload").chunk(0),
        ],
        fields=list(_FRAGMENT_IN_EVENT),
    )
    list_offsets = pa.array(np.append(starts, n).astype(np.int32))
    return pa.RecordBatch.from_arrays(
        [
            offset.take(pa.array(starts)),
            pa.array(stamp.view(np.int64)),
            pa.array(counts.astype(np.int32)),
            pa.array(barrier[starts].astype(np.int64)),
            pa.array(np.add.reduceat(late.astype(np.int32), starts)),
            pa.ListArray.from_arrays(
                list_offsets, inner, type=EVENT_SCHEMA.field("fragments").type
            ),
        ],
        schema=EVENT_SCHEMA,
    )


def glom_batches(batches: Iterable[pa.RecordBatch], config: GlomConfig) -> Iterator[pa.RecordBatch]:
    """Events of a piece of the ordered stream that starts at an event start and ends at an event
    end, as record batches (the executors' step; iterator to iterator, no Spark needed).

    Each incoming batch is built with the fragments of the still-open last event carried in
    front of it; that event is held back until the next batch (it may go on) or the end."""
    carry: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = (
            pa.Table.from_batches([batch])
            if carry is None
            else pa.concat_tables([carry, pa.Table.from_batches([batch])])
        )
        table = table.combine_chunks()
        ts = table.column("timestamp").chunk(0).to_numpy().view(np.uint64)
        barrier = table.column("barrier").chunk(0).to_numpy()
        starts = event_starts(
            ts, barrier, dt=config.dt if config.builds else None, max_fragments=config.max_fragments
        )
        last = int(starts[-1])
        if last > 0:
            yield build_events(table.slice(0, last), config, starts[:-1])
        carry = table.slice(last)
    if carry is not None and carry.num_rows:
        yield build_events(carry, config)
