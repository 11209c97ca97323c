"""The ``evb`` data source over a run spread over N orderers (docs/scale-out.md, "The Spark
source: N orderers in slice order"): ``option("target", "a:50051,b:50051,c:50051")`` (the
orderers in index order) reads them live, as a stream or in one batch;
``option("path", "d0,d1,d2")`` reads a finished run's data directories.
:class:`~orderer.spark.source.datasource.EvbDataSource` hands a comma list here; one target or one
path goes the one-orderer way (:mod:`~orderer.spark.source.readers`).

The driver plans units (:class:`~orderer.replay.unit_plan.UnitPlanner`) from the orderers' slice
indexes and the heads of their pieces, read without payloads; a micro-batch is a run of
consecutive units and a partition one or more whole units (:func:`~orderer.replay.unit_plan.
split_units`). Each partition reads its units' ranges (``Subscribe`` from and until offsets of
each orderer, or the ordered logs and their arrival logs' payloads), flags late by the contract
over the merged stream from the high-water mark the unit carries, and builds with glom
(:func:`~orderer.building.glom.glom_batches`): whole units are whole events, so the events are
glom's over the merged stream for any partitions and any micro-batches. The rows are the
one-orderer source's (``offset`` is the row's position in the merged stream), and so are the
options, but for ``startingOffset`` and ``endingOffset`` (refused here: a run over several
orderers is read whole). ``run`` (a streamed read, ``evb spark-job --follow-runs``) reads one
run of the orderers' run tables (:class:`~orderer.spark.source.sliced_reads.RunHeads`): the merge of
each orderer's output of that run, numbered on from the runs before it and flagged late against
their high-water mark, ending where the run ended at every orderer.

Offsets are :class:`~orderer.replay.unit_plan.UnitStart` as JSON: where the next unit begins,
with what a restarted query needs to plan on from there. ``commit`` sends each orderer the
lowest offset of its output a unit not yet built still reads, so that its retention keeps
exactly that; the consumer is registered at every orderer when the query starts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from orderer.errors import ConfigError, InterfaceError, ServiceUnavailable
from orderer.replay.unit_plan import (
    HeadReader,
    Unit,
    UnitPlanner,
    UnitStart,
    split_units,
    unit_rows,
)
from orderer.spark.source.access import retried
from orderer.spark.source.sliced_reads import (
    LiveHeads,
    LogHeads,
    OrderersAt,
    RunHeads,
    check_data_dirs,
    check_targets,
)

__all__ = ["SlicedBatchReader", "SlicedStreamReader", "UnitsPartition", "several_orderers"]

log = logging.getLogger("evb.spark")


def several_orderers(options: Any) -> tuple[str, list[str]] | None:
    """``("target", [...])`` or ``("path", [...])`` where the options name several orderers;
    None where they name one (the one-orderer source)."""
    from orderer.spark.source.sliced_reads import several

    lowered = {str(key).lower(): str(value) for key, value in dict(options).items()}
    for name in ("target", "path"):
        parts = several(lowered.get(name) or None, name)
        if parts is not None:
            return name, parts
    return None


@dataclass(frozen=True)
class UnitsPartition(InputPartition):
    """One partition: whole units, in merged order, and where to read them (pickled to an
    executor)."""

    units: tuple[Unit, ...]
    at: OrderersAt


def _check_options(options: Any, *, streamed: bool) -> None:
    """What the one-orderer source takes and a read of several orderers does not (``run``: a
    streamed read follows one run of the orderers' run tables)."""
    if options.starting_offset or options.ending_offset is not None:
        raise ConfigError(
            "startingOffset/endingOffset", None,
            "are offsets of one orderer's output: a run over several orderers is read whole",
        )  # fmt: skip
    if options.run is not None and not streamed:
        raise ConfigError("run", options.run, "is read as a stream over several orderers")


def _read(options: Any, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A partition's rows: its units' fragments of the merged stream, or their events."""
    assert isinstance(partition, UnitsPartition)
    at = partition.at
    with at.reading() as read:
        fragments = (
            batch
            for unit in partition.units
            for batch in unit_rows(unit, read, at.slicing, drop_late=at.drop_late)
        )
        yield from options.rows(fragments)


def _dt(options: Any) -> int | None:
    return options.glom.dt if options.glom.builds else None


class SlicedBatchReader(DataSourceReader):
    """Several orderers read at once: a finished run's data directories (``path``), or what the
    live orderers hold (``target``) as far as units can be planned."""

    def __init__(self, options: Any, kind: str, names: Sequence[str]) -> None:
        _check_options(options, streamed=False)
        self.options = options
        self._kind = kind
        self._names = tuple(names)

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        heads: HeadReader
        if self._kind == "path":
            run = check_data_dirs(self._names)
            logs = LogHeads(self._names, run.slicing)
            at = OrderersAt(run.slicing, logs=logs.spans, drop_late=run.drop_late)
            heads = logs
        else:
            at = _live(options, self._names)
            heads = LiveHeads(at)
        planned = UnitPlanner(at.slicing, _dt(options), heads, drop_late=at.drop_late).plan(
            UnitStart.initial(at.slicing.orderers)
        )
        groups = split_units(planned.units, options.partitions)
        return [UnitsPartition(group, at) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


def _live(options: Any, targets: Sequence[str]) -> OrderersAt:
    """The live orderers, their roles checked (the run's slicing and late policy from them)."""
    from orderer.spark.source.access import channel_security

    run = retried(  # a query (re)started while an orderer restarts waits for it
        lambda: check_targets(
            targets, channel_security(options.security), options.reconnect_timeout
        ),
        ",".join(targets), options.reconnect_timeout,
    )  # fmt: skip
    return OrderersAt(
        run.slicing, targets=tuple(targets), security=options.security,
        reconnect_timeout=options.reconnect_timeout, drop_late=run.drop_late,
    )  # fmt: skip


def _key(offset: dict) -> str:
    return json.dumps(offset, sort_keys=True)


class SlicedStreamReader(DataSourceStreamReader):
    """Micro-batches of whole units of the live orderers' merged stream."""

    def __init__(self, options: Any, kind: str, names: Sequence[str]) -> None:
        if kind != "target":
            raise ConfigError("target", None, "a streaming read needs the option target")
        _check_options(options, streamed=True)
        self.options = options
        self._targets = tuple(names)
        self._at: OrderersAt | None = None
        self._planner: UnitPlanner | None = None
        self._start: UnitStart | None = None
        self._plans: dict[tuple[str, str], tuple[Unit, ...]] = {}
        self._last_look = 0.0
        self._idle_at: str | None = None

    def __getstate__(self) -> dict[str, Any]:  # the executors need the options alone
        return {**self.__dict__, "_planner": None, "_plans": {}, "_start": None}

    def _planning(self) -> UnitPlanner:
        if self._planner is None:
            self._at = _live(self.options, self._targets)
            heads: HeadReader
            if self.options.run is None:
                heads, self._start = LiveHeads(self._at), UnitStart.initial(len(self._targets))
            else:  # one run of the run tables: from its start, its pieces cut here
                heads = RunHeads(self._at, self.options.run)
                self._start = UnitStart.run_start(heads.start)
            self._planner = UnitPlanner(
                self._at.slicing, _dt(self.options), heads, drop_late=self._at.drop_late
            )
        return self._planner

    def initialOffset(self) -> dict:
        from orderer.client import commit
        from orderer.spark.source.access import channel_security

        self._planning()
        assert self._start is not None
        for target, offset in zip(self._targets, self._start.needed, strict=True):
            try:  # register: retention keeps this consumer's output from there
                commit(
                    target, self.options.consumer, offset,
                    connect_timeout=self.options.reconnect_timeout,
                    security=channel_security(self.options.security),
                )  # fmt: skip
            except (ServiceUnavailable, InterfaceError) as error:  # the first commit does
                log.warning("could not register consumer %s at %s: %s",
                            self.options.consumer, target, error)
        return self._start.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_per_trigger)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        key = _key(start)
        now = time.monotonic()
        if self._idle_at == key and now - self._last_look < self.options.poll_interval:
            return start
        self._last_look = now
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        planned = self._planning().plan(UnitStart.from_json(start), max_rows=rows)
        end = planned.end.to_json()
        if _key(end) == key:
            self._idle_at = key
            return start
        self._idle_at = None
        self._plans[(key, _key(end))] = planned.units
        return end

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if _key(start) == _key(end):  # Spark asks for an empty micro-batch at times
            return []
        units = self._plans.pop((_key(start), _key(end)), None)
        planner = self._planning()
        if units is None:  # planned by an earlier driver (a restart): plan the same again
            first, last = UnitStart.from_json(start), UnitStart.from_json(end)
            planned = planner.plan(first, until=last)
            if planned.end != last:
                raise InterfaceError(
                    f"the micro-batch from {start} to {end} of the checkpoint cannot be planned "
                    f"again (it ends at {planned.end.to_json()}): the orderers' output is not "
                    "the one the query read"
                )
            units = planned.units
        self._plans = {k: v for k, v in self._plans.items() if k[0] != _key(start)}
        assert self._at is not None
        groups = split_units(units, self.options.partitions)
        return [UnitsPartition(group, self._at) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        from orderer.client import commit
        from orderer.spark.source.access import channel_security

        needed = UnitStart.from_json(end).needed
        for target, offset in zip(self._targets, needed, strict=True):
            try:
                commit(
                    target, self.options.consumer, offset,
                    connect_timeout=self.options.reconnect_timeout,
                    security=channel_security(self.options.security),
                )  # fmt: skip
            except (ServiceUnavailable, InterfaceError) as error:
                # only delays retention: the next commit covers this one
                log.warning("commit of offset %s at %s failed: %s", offset, target, error)

