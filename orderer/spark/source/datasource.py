"""The ``evb`` PySpark data source: the ordered stream as rows, split only where events start.

``spark.readStream.format("evb").option("target", "orderer:50051")`` reads a live orderer over
gRPC; ``spark.read.format("evb").option("path", "<data dir>")`` reads a finished run's ordered log
directly (``option("target", ...)`` also works for a batch read of what a live orderer holds).
A comma list of targets or paths is a run spread over several orderers, read in slice order by
:mod:`orderer.spark.source.sliced_source`.
Rows: ``offset, source, timestamp, barrier, late, payload`` (:data:`~orderer.spark.source.glom.
FRAGMENT_SPARK_SCHEMA`), or with ``option("output", "events")`` the events built of them
(:data:`~orderer.spark.source.glom.EVENT_SPARK_SCHEMA`).

Why the source knows the glom window (options ``dt``, ``maxFragments``): event building is the one
order-sensitive step, and it is only sensitive to *where an event starts*. The driver runs
:func:`~orderer.building.glom.event_starts` over the timestamp and barrier columns only (the orderer
leaves the payloads out: ``omit_payload``) and ends every micro-batch and every partition at an
event start. Each partition then holds whole events, the executors build them in parallel with no
shuffle and no state, and the result is the sequential glom's for any number of partitions and
any trigger. With ``output`` = ``events`` each partition's ``read()`` builds its events itself
(:func:`~orderer.building.glom.glom_batches`), so a fragment crosses from Python to the JVM once, as
part of an event: one Python step per fragment, where reading fragments and building them in a
``mapInArrow`` took two (two Python workers, and every fragment through the JVM between them).
The event still open at the live end of the log is left for the next micro-batch; at the end of
the run (``GetStats.run_ended``) the end of the log closes it.

A batch read of a log directory plans its partitions one record batch at a time
(:func:`~orderer.spark.source.planning.plan_log`): the driver never holds the run's timestamps,
whatever its size. The log is read through :mod:`orderer.formats.log_format` (segments, the
torn-tail rule, the columns), the module the orderer writes it with.

Offsets are ``{"offset": N}``, the ordered log's offset (replayable: the orderer serves any offset
it still holds). ``commit`` tells the orderer (``Commit``) that the query processed everything
below the offset, so its retention keeps the rest until then. Without ``dt`` the source does not
build (every offset is an event start).

Options: ``target`` or ``path``; ``output`` (``fragments`` or ``events``); ``dt``,
``maxFragments`` (1000); ``numPartitions`` (2);
``maxFragmentsPerTrigger`` (a micro-batch holds at most this many fragments, or one whole event if
that is longer); ``consumer`` (``spark``, the name commits are kept under); ``startingOffset``
(0); ``endingOffset`` (read only a prefix of the run: it ends there); ``run`` (a run number of
the orderer's run table, ``GetStats.runs``: the read ends where that run ends, the end of the run
closing its last event, so no event spans two runs; give ``startingOffset`` = the run's start to
read that run alone, as ``evb spark-job --follow-runs`` does); ``pollInterval``
(seconds between two looks at an idle orderer, 0.05); ``reconnectTimeout`` (seconds, 120);
``tlsCa``, ``tlsCert``, ``tlsKey``, ``tokenFile``, ``tls`` (an orderer serving TLS and tokens,
as ``evb tail``'s flags; the files must be readable on the driver and the executors).

gRPC channels are opened in the methods that use them, never in ``__init__`` (readers are pickled
to the executors).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from orderer.spark.source.options import Options
from orderer.spark.source.readers import EvbBatchReader, EvbStreamReader

__all__ = ["EvbDataSource", "register"]


def register(spark: Any) -> None:
    """Make ``format("evb")`` known to a SparkSession."""
    spark.dataSource.register(EvbDataSource)


class EvbDataSource(DataSource):
    """``format("evb")``: the orderer's ordered output as fragment rows, or (``output`` =
    ``events``) as the events built of them."""

    @classmethod
    def name(cls) -> str:
        return "evb"

    def schema(self) -> str:
        return Options.parse(self.options).schema

    def reader(self, schema: StructType) -> DataSourceReader:
        several = _several(self.options)
        if several is not None:  # a run over several orderers (orderer.spark.source.sliced_source)
            from orderer.spark.source.sliced_source import SlicedBatchReader

            return SlicedBatchReader(Options.parse(self.options), *several)
        return EvbBatchReader(Options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        several = _several(self.options)
        if several is not None:
            from orderer.spark.source.sliced_source import SlicedStreamReader

            return SlicedStreamReader(Options.parse(self.options), *several)
        return EvbStreamReader(Options.parse(self.options))


def _several(options: Any) -> tuple[str, list[str]] | None:
    """The option (``target`` or ``path``) and its parts where it names several orderers."""
    from orderer.spark.source.sliced_source import several_orderers

    return several_orderers(options)
