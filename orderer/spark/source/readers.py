"""The ``evb`` data source's readers of one orderer: :class:`EvbStreamReader` (micro-batches
of a live orderer's output, ``readStream``) and :class:`EvbBatchReader` (a finished run's
ordered log, ``path``, or what a live orderer holds, ``target``), planned by
:mod:`orderer.spark.source.planning`; and what each partition reads on its executor: the
orderer's ``Subscribe`` stream from and until its offsets, or the log's segments with the
payloads gathered from the arrival log (:func:`read_segments`), as rows
(:func:`~orderer.building.glom.fragment_rows`).

gRPC channels are opened in the methods that use them, never in ``__init__`` (readers are pickled
to the executors).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from orderer.building.glom import fragment_rows
from orderer.errors import ConfigError, InterfaceError, ServiceUnavailable
from orderer.formats.payloads import ArrivalPayloads, read_ordered, read_ordered_range
from orderer.spark.source.access import channel_security, segment_files
from orderer.spark.source.options import Options
from orderer.spark.source.planning import OffsetRange, Planner, plan_log, target_end

__all__ = ["EvbBatchReader", "EvbStreamReader", "read_segments"]

log = logging.getLogger("evb.spark")


# ------------------------------------------------------------------------------ live orderer


def _read_target(partition: OffsetRange) -> Iterator[pa.RecordBatch]:
    from orderer.client import OrderedStreamReader

    assert partition.target is not None
    reader = OrderedStreamReader(
        partition.target,
        partition.first,
        until=partition.until,
        reconnect_timeout=partition.reconnect_timeout,
        connect_timeout=partition.reconnect_timeout,  # an orderer restarting: wait as for a loss
        security=channel_security(partition.security),
    )
    for batch in reader:
        yield fragment_rows(batch)


class EvbStreamReader(DataSourceStreamReader):
    """Micro-batches of the live orderer's output, ending at event starts."""

    def __init__(self, options: Options) -> None:
        if options.target is None:
            raise ConfigError("target", None, "a streaming read needs the option target")
        self.options = options
        self._planner = Planner(options)
        self._last_look = 0.0
        self._idle_at: int | None = None

    def initialOffset(self) -> dict:
        from orderer.client import commit

        offset = self.options.starting_offset
        try:  # register: retention keeps this consumer's output from now on
            commit(
                self.options.target,  # type: ignore[arg-type]
                self.options.consumer,
                offset,
                connect_timeout=self.options.reconnect_timeout,
                security=channel_security(self.options.security),
            )
        except InterfaceError as error:
            log.warning("could not register consumer %s: %s", self.options.consumer, error)
        return {"offset": offset}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_per_trigger)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        first = int(start["offset"])
        now = time.monotonic()
        if self._idle_at == first and now - self._last_look < self.options.poll_interval:
            return start
        self._last_look = now
        available, ended = target_end(self.options)
        ending = self.options.ending_offset
        if ending is not None and available >= ending:  # read a prefix: it ends there
            available, ended = ending, True
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = self._planner.end(first, available, ended, rows)
        self._idle_at = first if end == first else None
        return {"offset": end}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, until = int(start["offset"]), int(end["offset"])
        return [
            OffsetRange(
                a, b, self.options.target, (), self.options.reconnect_timeout,
                self.options.security,
            )
            for a, b in self._planner.partitions(first, until)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return self.options.rows(_read_target(partition))

    def commit(self, end: dict) -> None:
        from orderer.client import commit

        try:
            commit(
                self.options.target,  # type: ignore[arg-type]
                self.options.consumer,
                int(end["offset"]),
                connect_timeout=self.options.reconnect_timeout,
                security=channel_security(self.options.security),
            )
        except (ServiceUnavailable, InterfaceError) as error:
            # only delays retention: the next commit covers this one
            log.warning("commit of offset %s failed: %s", end["offset"], error)


# ------------------------------------------------------------------------------ finished run


def read_segments(partition: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The partition's fragments, with the payloads of those alone gathered from the run's
    arrival log."""
    if not partition.segments:
        return
    with contextlib.closing(
        ArrivalPayloads.of_data_dir(Path(partition.segments[0]).parent.parent)
    ) as payloads:
        segments = [Path(name) for name in partition.segments]
        for batch in read_ordered_range(segments, partition.first, partition.until, payloads):
            yield fragment_rows(batch)


def _log_chunks(segments: Sequence[Path]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The ordered log's timestamps and barrier types, one record batch at a time."""
    for segment in segments:
        for batch in read_ordered(segment):
            yield batch.first_seq, batch.timestamp, batch.barrier


class EvbBatchReader(DataSourceReader):
    """A finished run's ordered log (``path``), or what a live orderer holds (``target``)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        if options.path is not None:
            segments = segment_files(options.path)
            spans = []  # (first offset, offset after the last, segment) of each segment
            for segment in segments:
                rows = [(b.first_seq, b.first_seq + len(b)) for b in read_ordered(segment)]
                if rows:
                    spans.append((rows[0][0], rows[-1][1], str(segment)))
            if not spans:
                return []
            first = max(spans[0][0], options.starting_offset)
            until = spans[-1][1]
            if options.ending_offset is not None:
                until = min(until, options.ending_offset)
            plan = plan_log(
                _log_chunks(segments), first, until, options.partitions, options.starts
            )
            return [
                OffsetRange(a, b, None, tuple(s for lo, hi, s in spans if lo < b and hi > a))
                for a, b in plan
            ]
        available, ended = target_end(options)
        if options.ending_offset is not None:
            available, ended = min(available, options.ending_offset), True
        planner = Planner(options)
        end = planner.end(options.starting_offset, available, ended, None)
        return [
            OffsetRange(a, b, options.target, (), options.reconnect_timeout, options.security)
            for a, b in planner.partitions(options.starting_offset, end)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.segments:
            return self.options.rows(read_segments(partition))
        return self.options.rows(_read_target(partition))
