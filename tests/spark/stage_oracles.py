"""Small readable oracles of the ``--stages`` tests: every stage over its whole input at once, in
stream order, with no Spark; and the stages' results as the job wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orderer.spark.stages.sink import stage_directory
from orderer.stages.api import EVENTS, Order, Stage


def sequential(events: pa.Table, stages: tuple[Stage, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Each stage (no aggregation) over its whole input at once, in stream order; an
    order-sensitive one called per key, over that key's rows in their order, from its initial
    state."""
    tables: dict[str, pa.Table] = {EVENTS: events}
    order = {EVENTS: "event"}
    pending = list(stages)
    while pending:
        stage = next(s for s in pending if s.reads in tables)
        pending.remove(stage)
        source = tables[stage.reads]
        sequenced = stage.order is Order.SEQUENCER
        order[stage.name] = stage.order_by[0] if sequenced else order[stage.reads]
        if stage.order is not Order.SENSITIVE:
            tables[stage.name] = stage.function(source)
            continue
        source = source.sort_by(order[stage.reads])
        keys = [None] if stage.key is None else sorted(set(source.column(stage.key).to_pylist()))
        parts = []
        for key in keys:
            rows = source if key is None else source.filter(pc.equal(source.column(stage.key), key))
            out, _ = stage.function(rows, stage.initial())
            parts.append(out)
        tables[stage.name] = pa.concat_tables(parts)
    return {s.name: rows_of(tables[s.name], s) for s in stages}


def rows_of(table: pa.Table, stage: Stage) -> list[tuple[Any, ...]]:
    """A stage's results as sorted rows of its schema's columns."""
    columns = [table.column(name).to_pylist() for name in stage.schema.names]
    return sorted(zip(*columns, strict=True))


def written(output: Path, run: str, stages: tuple[Stage, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Each stage's results of ``run`` as the job wrote them, as :func:`rows_of`."""
    return {
        s.name: rows_of(pq.read_table(stage_directory(str(output), s.name, run)), s)
        for s in stages
    }


def aggregations(events: pa.Table, stages: dict[str, Stage]) -> dict[str, pa.Table]:
    """The finished tables of :mod:`tests.spark.aggregation_stages` (``stages`` by name): the
    dead-time chain (a sequencer, a per-source order-sensitive stage, the aggregation over it)
    and the events' multiplicities, each aggregation one accumulation over its whole input."""
    hits = stages["source_hits"].function(events).sort_by("offset")
    conversions = []
    for source in sorted(set(hits["source"].to_pylist())):
        mine = hits.filter(pc.equal(hits["source"], source))
        conversions.append(stages["conversions"].function(mine, None)[0])
    converted = pa.concat_tables(conversions)
    return {
        "conversions": converted.sort_by("offset"),
        "dead_time": finished(stages["dead_time"], converted),
        "multiplicities": finished(stages["multiplicities"], events),
    }


def finished(stage: Stage, table: pa.Table) -> pa.Table:
    """An aggregation's finished table of one accumulation over all of ``table``."""
    assert stage.finish is not None
    return stage.finish(stage.function(table, stage.initial())).cast(stage.schema)
