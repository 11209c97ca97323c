"""A micro-batch's counts made where its events are built: in the ``evb`` data source's
``read()``, on the executors, carried to the driver inside the micro-batch itself.

Why there and not in a pass of their own: a second Spark job over each micro-batch's events
(even over cached ones) costs a job's fixed price every micro-batch, a large share of a
streamed job's time (README, "The live page"). The events are in a Python worker once already,
in Arrow batches, when the source builds them; counted there, nothing is read twice.

How they travel: with the data source's option ``liveCounts``, its rows carry one more column,
:data:`COLUMN`, null but in the last row of each partition, where it holds that partition's
counts (a zstd-compressed Arrow IPC stream of rows ``kind, a, b, c, sum, min, max``, already
summed over the partition), as base64 text cut in pieces of :data:`PIECE` characters, the first
marked. The stages sink takes the column out of the events with Spark's ``observe``
(:func:`collect`), which gathers it in the job that writes the events: no second job.

Why pieces of text: the driver's Python reads them from the JVM through py4j, where an answer
longer than about 8 KB waits some 40 ms for a delayed TCP acknowledgement (measured: 2 ms for
5 KB, 42-47 ms for 6 KB to 80 KB), and bytes are decoded one by one in Python; each piece is
one short answer (:func:`gathered`).

The counting is the end of run's (:func:`orderer.spark.output.event_counts.batch_rows`);
:mod:`orderer.spark.live.counts` sums the parts on the driver.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from orderer.spark.output.coincidence import rows_batch, spectrum_axis
from orderer.spark.output.event_counts import batch_rows, summed

__all__ = [
    "COLUMN",
    "OPTION",
    "SPARK_COLUMN",
    "collect",
    "decoded",
    "gathered",
    "gathering",
    "with_counts",
]

OPTION = "liveCounts"
"""The data source's option ("true") that adds :data:`COLUMN` to its event rows."""
COLUMN = "_evb_live_counts"
"""The column of the partition's counts (its last row's; null in every other)."""
SPARK_COLUMN = f"{COLUMN} array<string>"
""":data:`COLUMN` in Spark's DDL, after the event columns."""

PIECE = 4000
"""Characters of one piece of a partition's counts (one py4j answer each, under 8 KB)."""
_FIRST = "#"
"""The mark of a partition's first piece (not a base64 character)."""

def with_counts(batches: Iterator[pa.RecordBatch], dt: int | None) -> Iterator[pa.RecordBatch]:
    """``batches`` (a partition's events) with :data:`COLUMN` added: the partition's counts in
    the last row, null elsewhere (the last batch is held back until the partition ends).

    Why counted once at the end and not per batch: numpy's fixed cost per call, paid for each
    of a partition's batches, was most of the counting's time; what is kept meanwhile is the
    counted columns alone (no payload)."""
    kept: list[pa.RecordBatch] = []
    held: pa.RecordBatch | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if held is not None:
            yield _with_column(held, None)
        kept.append(_counted_columns(batch))
        held = batch
    if held is not None:
        table = pa.Table.from_batches(kept).combine_chunks()
        rows = batch_rows(table.to_batches()[0], spectrum_axis(dt))
        yield _with_column(held, _encoded(summed(pa.Table.from_batches([rows_batch(rows)]))))


def _counted_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    """What :func:`batch_rows` reads of a batch of events: its fragments without offsets and
    payloads."""
    lists = batch.column("fragments")
    flat = pc.list_flatten(lists)
    offsets = pc.subtract(lists.offsets, lists.offsets[0])
    slim = pa.ListArray.from_arrays(
        offsets,
        pa.StructArray.from_arrays(
            [flat.field("source"), flat.field("timestamp"), flat.field("late")],
            names=["source", "timestamp", "late"],
        ),
    )
    return pa.RecordBatch.from_arrays(
        [batch.column("multiplicity"), batch.column("barrier"), batch.column("late"), slim],
        names=["multiplicity", "barrier", "late", "fragments"],
    )


def _with_column(batch: pa.RecordBatch, blob: bytes | None) -> pa.RecordBatch:
    values: list[list[str] | None] = [None] * batch.num_rows
    if blob is not None:
        text = _FIRST + base64.b64encode(blob).decode("ascii")
        values[-1] = [text[k : k + PIECE] for k in range(0, len(text), PIECE)]
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array(values, pa.list_(pa.string()))],
        names=[*batch.schema.names, COLUMN],
    )


def _encoded(table: pa.Table) -> bytes:
    """The counts as an Arrow IPC stream, compressed (zstd: about 13 times smaller, so fewer
    pieces to read through py4j)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decoded(blobs: list[bytes]) -> pa.Table:
    """The micro-batch's counts: every partition's (:data:`COLUMN`'s values) summed."""
    tables = [pa.ipc.open_stream(pa.py_buffer(blob)).read_all() for blob in blobs]
    if not tables:
        return summed(
            pa.table(
                {
                    "kind": pa.array([], pa.int32()),
                    **{k: pa.array([], pa.int64()) for k in ("a", "b", "c", "value")},
                }
            )
        )
    return summed(pa.concat_tables(tables))


def gathering() -> Any:
    """The column expression :func:`collect` observes (made once per run and given to it on
    every micro-batch: it is three py4j calls, paid on the driver between micro-batches)."""
    from pyspark.sql import functions as F

    return F.flatten(F.collect_list(COLUMN)).alias("counts")


def collect(events: Any, name: str, expression: Any = None) -> tuple[Any, Any]:
    """``events`` without :data:`COLUMN`, observed so that the first action over them (the
    events' write) gathers its pieces; and the :class:`pyspark.sql.Observation` to read them
    from (:func:`gathered`) once that action ran. ``expression``: :func:`gathering`'s, if
    already made."""
    from pyspark.sql import Observation

    observation = Observation(name)
    observed = events.observe(observation, gathering() if expression is None else expression)
    return observed.drop(COLUMN), observation


def gathered(observation: Any) -> list[bytes]:
    """Every partition's counts that ``observation`` (of :func:`collect`) gathered.

    The pieces are read one py4j call each from the JVM's row of the observation
    (``Observation._jo``, not public: the public ``get`` answers in one message, which costs
    the 40 ms wait the module docstring measures); without it, through ``get``."""
    handle = getattr(observation, "_jo", None)
    if handle is not None:
        row = handle.getRow()
        listed = row.getList(0)
        pieces = [str(listed.get(k)) for k in range(int(listed.size()))]
    else:
        pieces = list(observation.get["counts"])
    blobs: list[str] = []
    for piece in pieces:
        if piece.startswith(_FIRST):
            blobs.append(piece[len(_FIRST) :])
        else:
            blobs[-1] += piece
    return [base64.b64decode(text) for text in blobs]
