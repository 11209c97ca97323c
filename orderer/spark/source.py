"""The ``evb`` PySpark data source: the ordered stream as rows, split only where events start.

``spark.readStream.format("evb").option("target", "orderer:50051")`` reads a live orderer over
gRPC; ``spark.read.format("evb").option("path", "<data dir>")`` reads a finished run's ordered log
directly (``option("target", ...)`` also works for a batch read of what a live orderer holds).
A comma list of targets or paths is a run spread over several orderers, read in slice order by
:mod:`orderer.spark.sliced_source`.
Rows: ``offset, source, timestamp, barrier, late, payload`` (:data:`~orderer.spark.glom.
FRAGMENT_SPARK_SCHEMA`), or with ``option("output", "events")`` the events built of them
(:data:`~orderer.spark.glom.EVENT_SPARK_SCHEMA`).

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
(:func:`plan_log`): the driver never holds the run's timestamps, whatever its size. The log is
read through :mod:`orderer.formats.log_format` (segments, the torn-tail rule, the columns), the
module the orderer writes it with.

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

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from orderer.building.config import GlomConfig
from orderer.building.glom import event_starts, fragment_rows, glom_batches
from orderer.errors import ConfigError, InterfaceError, ServiceUnavailable
from orderer.formats.payloads import ArrivalPayloads, read_ordered, read_ordered_range
from orderer.spark.access import channel_security, retried, segment_files
from orderer.spark.glom import EVENT_SPARK_SCHEMA, FRAGMENT_SPARK_SCHEMA, glom_from_options
from orderer.spark.live.partials import OPTION, SPARK_COLUMN, with_counts
from orderer.spark.runs import run_end

__all__ = [
    "EvbDataSource",
    "channel_security",
    "fragment_rows",
    "plan_log",
    "plan_partitions",
    "register",
    "segment_files",
]

log = logging.getLogger("evb.spark")

_SECURITY_OPTIONS = ("tlsCa", "tlsCert", "tlsKey", "tokenFile", "tls")


def _output(value: str | None) -> bool:
    """Whether the option ``output`` asks for events (else fragments, the default)."""
    if value is None or value == "" or value.lower() == "fragments":
        return False
    if value.lower() == "events":
        return True
    raise ConfigError("output", value, "must be fragments or events")


def _flag(name: str, value: str | None) -> bool:
    """A true/false option (unset: false)."""
    if value is None or value == "" or value.lower() == "false":
        return False
    if value.lower() == "true":
        return True
    raise ConfigError(name, value, "must be true or false")


def register(spark: Any) -> None:
    """Make ``format("evb")`` known to a SparkSession."""
    spark.dataSource.register(EvbDataSource)


@dataclass(frozen=True)
class _Options:
    target: str | None
    path: Path | None
    glom: GlomConfig
    partitions: int
    max_per_trigger: int | None
    consumer: str
    starting_offset: int
    ending_offset: int | None
    poll_interval: float
    reconnect_timeout: float
    run: int | None = None
    """Read up to the end of this run of the orderer's run table (``GetStats.runs``)."""
    events: bool = False
    """Rows are built events (``output`` = ``events``), not fragments."""
    live: bool = False
    """Event rows carry their partition's counts for the live page (option ``liveCounts``,
    :mod:`orderer.spark.live.partials`)."""
    security: tuple[tuple[str, str], ...] = ()
    """TLS and token files (``tlsCa``, ``tlsCert``, ``tlsKey``, ``tokenFile``, ``tls``), read
    where a channel is opened (driver and executors alike)."""

    @classmethod
    def parse(cls, options: Any) -> _Options:
        lowered = {str(key).lower(): str(value) for key, value in dict(options).items()}

        def number(name: str, default: float | None, kind: type = int, low: float = 0) -> Any:
            raw = lowered.get(name.lower())
            if raw is None or raw == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise ConfigError(name, raw, f"must be {what}") from None
            if value < low:
                raise ConfigError(name, raw, f"must be >= {low}")
            return value

        target = lowered.get("target") or None
        path = lowered.get("path") or None
        if (target is None) == (path is None):
            raise ConfigError("target", target, "give exactly one of the options target and path")
        return cls(
            target=target,
            path=Path(path) if path else None,
            glom=glom_from_options(dict(options)),
            partitions=number("numPartitions", 2, int, 1),
            max_per_trigger=number("maxFragmentsPerTrigger", None, int, 1),
            consumer=lowered.get("consumer", "spark"),
            starting_offset=number("startingOffset", 0, int, 0),
            ending_offset=number("endingOffset", None, int, 0),
            poll_interval=number("pollInterval", 0.05, float, 0),
            reconnect_timeout=number("reconnectTimeout", 120.0, float, 0),
            run=number("run", None, int, 0),
            events=_output(lowered.get("output")),
            live=_flag(OPTION, lowered.get(OPTION.lower())),
            security=tuple(
                (name, lowered[name.lower()])
                for name in _SECURITY_OPTIONS
                if lowered.get(name.lower())
            ),
        )

    def rows(self, fragments: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A partition's rows: its fragments, or the events built of them (a partition holds
        whole events, so it builds alone, exactly as the sequential glom)."""
        if not self.events:
            return fragments
        events = glom_batches(fragments, self.glom)
        if not self.live:
            return events
        return with_counts(events, self.glom.dt if self.glom.builds else None)

    @property
    def schema(self) -> str:
        """The rows' schema in Spark's DDL."""
        if not self.events:
            return FRAGMENT_SPARK_SCHEMA
        return f"{EVENT_SPARK_SCHEMA}, {SPARK_COLUMN}" if self.live else EVENT_SPARK_SCHEMA

    def starts(self, timestamp: np.ndarray, barrier: np.ndarray) -> np.ndarray:
        """Event starts (indices) of a stretch that begins at an event start."""
        dt = self.glom.dt if self.glom.builds else None
        return event_starts(timestamp, barrier, dt=dt, max_fragments=self.glom.max_fragments)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One partition: the offsets ``[first, until)``, whole events (pickled to an executor)."""

    first: int
    until: int
    target: str | None
    segments: tuple[str, ...] = ()
    reconnect_timeout: float = 120.0
    security: tuple[tuple[str, str], ...] = ()


def plan_partitions(
    starts: np.ndarray, first: int, until: int, parts: int
) -> list[tuple[int, int]]:
    """Cut ``[first, until)`` into at most ``parts`` offset ranges of about equal size, each
    beginning at an event start (``starts``: absolute offsets of the event starts, ascending)."""
    if until <= first:
        return []
    cuts = [first]
    for k in range(1, parts):
        ideal = first + (until - first) * k // parts
        at = int(np.searchsorted(starts, ideal, "left"))
        if at < len(starts) and cuts[-1] < int(starts[at]) < until:
            cuts.append(int(starts[at]))
    cuts.append(until)
    return list(itertools.pairwise(cuts))


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


def _scan_target(options: _Options, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps and barrier types of ``[first, until)``, without payloads."""
    from orderer.client import OrderedStreamReader

    assert options.target is not None
    if until <= first:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
    batches = list(
        OrderedStreamReader(
            options.target,
            first,
            until=until,
            payload=False,
            reconnect_timeout=options.reconnect_timeout,
            connect_timeout=options.reconnect_timeout,
            security=channel_security(options.security),
        )
    )
    return (
        np.concatenate([b.timestamp for b in batches]),
        np.concatenate([b.barrier for b in batches]),
    )


def _stats(options: _Options) -> tuple[int, bool]:
    """(durable end of the ordered log, whether the run ended); with the option ``run``, (that
    run's end, True) once the run table gives it one, else (the durable end, False)."""
    from orderer.client import get_stats

    assert options.target is not None
    target = options.target
    stats = retried(  # an orderer killed and restarting: the query waits, it does not end
        lambda: get_stats(  # every latestOffset: one barrier record, not the default thousand
            target,
            barrier_log_limit=1,
            timeout=options.reconnect_timeout,
            connect_timeout=options.reconnect_timeout,
            security=channel_security(options.security),
        ),
        target, options.reconnect_timeout,
    )  # fmt: skip
    available = stats.next_offset
    if options.run is None:
        return available, stats.run_ended
    end = run_end(stats.runs, options.run)
    return (available, False) if end is None else (min(available, end), True)


class _Planner:
    """Where a read may end and how it splits, from the timestamps of the orderer's output."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        self._plans: dict[tuple[int, int], np.ndarray] = {}

    def end(self, first: int, available: int, ended: bool, limit: int | None) -> int:
        """The furthest event start at or below ``first + limit`` (at least one whole event),
        ``available`` itself once the run ended; ``first`` when no event is complete yet."""
        if available <= first:
            return first
        cap = available if limit is None else min(available, first + limit)
        if not self.options.glom.builds:
            self._plans[(first, cap)] = np.arange(first, cap, dtype=np.int64)
            return cap
        scan_to = min(available, cap + 1)  # one more: is `cap` itself an event start?
        ts, barrier = _scan_target(self.options, first, scan_to)
        starts = first + self.options.starts(ts, barrier)
        if cap == available and ended:
            end = available
        else:
            closed = starts[(starts > first) & (starts <= cap)]
            if closed.size:
                end = int(closed[-1])
            elif scan_to < available:  # one event longer than the limit: take it whole
                longer = min(available, first + self.options.glom.largest_event + 1)
                ts, barrier = _scan_target(self.options, first, longer)
                starts = first + self.options.starts(ts, barrier)
                later = starts[starts > first]
                end = int(later[0]) if later.size else (available if ended else first)
            else:
                end = available if ended else first
        self._plans[(first, end)] = starts[starts < end]
        return end

    def partitions(self, first: int, until: int) -> list[tuple[int, int]]:
        starts = self._plans.pop((first, until), None)
        if starts is None:  # planned by an earlier driver (a restart): plan again
            if self.options.glom.builds:
                ts, barrier = _scan_target(self.options, first, until)
                starts = first + self.options.starts(ts, barrier)
            else:
                starts = np.arange(first, until, dtype=np.int64)
        self._plans = {k: v for k, v in self._plans.items() if k[0] >= until}
        return plan_partitions(starts, first, until, self.options.partitions)


class EvbStreamReader(DataSourceStreamReader):
    """Micro-batches of the live orderer's output, ending at event starts."""

    def __init__(self, options: _Options) -> None:
        if options.target is None:
            raise ConfigError("target", None, "a streaming read needs the option target")
        self.options = options
        self._planner = _Planner(options)
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
        available, ended = _stats(self.options)
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


def _read_segments(partition: OffsetRange) -> Iterator[pa.RecordBatch]:
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


def plan_log(
    chunks: Iterable[tuple[int, np.ndarray, np.ndarray]],
    first: int,
    until: int,
    parts: int,
    starts: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> list[tuple[int, int]]:
    """:func:`plan_partitions` of ``[first, until)`` from the log's chunks (``(offset of the
    first row, timestamps, barrier types)``, in offset order, covering the range), one chunk at a
    time: the driver holds one chunk and the still open event, never the whole run.

    Why it can: every event start found in a chunk (glommed with the open event carried in front
    of it) is final, as in :func:`~orderer.building.glom.glom_batches`, and the plan needs only the
    first event start at or after each of the ``parts - 1`` ideal cuts."""
    if until <= first:
        return []
    ideals = [first + (until - first) * k // parts for k in range(1, parts)]
    found: list[int | None] = [None] * len(ideals)
    carry_at = first
    carry_ts = np.zeros(0, np.uint64)
    carry_barrier = np.zeros(0, np.int64)
    pending = 0  # ideals before this one have their event start
    for at, ts, barrier in chunks:
        low, high = max(first, at), min(until, at + len(ts))
        if low >= high:
            continue
        ts = np.concatenate([carry_ts, ts[low - at : high - at].astype(np.uint64)])
        barrier = np.concatenate([carry_barrier, barrier[low - at : high - at].astype(np.int64)])
        found_here = carry_at + starts(ts, barrier)
        while pending < len(ideals):
            k = int(np.searchsorted(found_here, ideals[pending], "left"))
            if k == found_here.size:
                break
            found[pending] = int(found_here[k])
            pending += 1
        last = int(found_here[-1])
        carry_ts, carry_barrier = ts[last - carry_at :], barrier[last - carry_at :]
        carry_at = last
    cuts = [first]
    for start in found:
        if start is not None and cuts[-1] < start < until:
            cuts.append(start)
    cuts.append(until)
    return list(itertools.pairwise(cuts))


def _log_chunks(segments: Sequence[Path]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The ordered log's timestamps and barrier types, one record batch at a time."""
    for segment in segments:
        for batch in read_ordered(segment):
            yield batch.first_seq, batch.timestamp, batch.barrier


class EvbBatchReader(DataSourceReader):
    """A finished run's ordered log (``path``), or what a live orderer holds (``target``)."""

    def __init__(self, options: _Options) -> None:
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
        available, ended = _stats(options)
        if options.ending_offset is not None:
            available, ended = min(available, options.ending_offset), True
        planner = _Planner(options)
        end = planner.end(options.starting_offset, available, ended, None)
        return [
            OffsetRange(a, b, options.target, (), options.reconnect_timeout, options.security)
            for a, b in planner.partitions(options.starting_offset, end)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.segments:
            return self.options.rows(_read_segments(partition))
        return self.options.rows(_read_target(partition))


class EvbDataSource(DataSource):
    """``format("evb")``: the orderer's ordered output as fragment rows, or (``output`` =
    ``events``) as the events built of them."""

    @classmethod
    def name(cls) -> str:
        return "evb"

    def schema(self) -> str:
        return _Options.parse(self.options).schema

    def reader(self, schema: StructType) -> DataSourceReader:
        several = _several(self.options)
        if several is not None:  # a run over several orderers (orderer.spark.sliced_source)
            from orderer.spark.sliced_source import SlicedBatchReader

            return SlicedBatchReader(_Options.parse(self.options), *several)
        return EvbBatchReader(_Options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        several = _several(self.options)
        if several is not None:
            from orderer.spark.sliced_source import SlicedStreamReader

            return SlicedStreamReader(_Options.parse(self.options), *several)
        return EvbStreamReader(_Options.parse(self.options))


def _several(options: Any) -> tuple[str, list[str]] | None:
    """The option (``target`` or ``path``) and its parts where it names several orderers."""
    from orderer.spark.sliced_source import several_orderers

    return several_orderers(options)
