"""The planner: Jet's "smart job planning" (design 015) over the declared stages.

Walking the stages in reverse topological order, order is preserved from each order-sensitive
stage back to the nearest sequencer (the built events are the first sequencer: the orderer made
their order), and nowhere else. How evb preserves it differs from Jet's: Jet keeps order along
such a path by never reordering on it (the path runs at a lower parallelism), because an
unbounded stream cannot be sorted. evb's micro-batches come one after another in stream order,
so order only has to be kept within a micro-batch, and it can be re-established there: every
stage on the path carries the sequencer's order columns (the planner checks their schemas), and
the order-sensitive stage sorts its partition by them (by its key first). The whole path keeps
the job's full parallelism; an order-sensitive stage runs one partition per key hash, or one
partition when its order is global.

An aggregation keeps no order and needs none: its input's partitions are accumulated where they
are and combined on the driver. Nothing may read it: its results are the finished table of the
run so far, rewritten each micro-batch, and a stage over them would see every micro-batch's
rows again in the next (its own results, micro-batch after micro-batch, would count them over
and over). What a later step would compute from them belongs in the aggregation's ``finish``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from orderer.errors import ConfigError
from orderer.stages.api import EVENTS, EVENTS_ORDER, Order, Stage

__all__ = ["Plan", "StagePlan", "plan"]


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One stage as it will run."""

    stage: Stage
    input_schema: pa.Schema
    """What it reads: the built events' schema, or the stage it reads's."""
    input_order: tuple[str, ...]
    """The order columns of its input (the stream order of the nearest sequencer above)."""
    output_order: tuple[str, ...]
    """The order columns of its output: a sequencer's own, else its input's."""
    carries_order: bool
    """It lies on a path from a sequencer to an order-sensitive stage: its output keeps the
    order columns (checked), and nothing else is asked of it."""

    @property
    def sort_by(self) -> tuple[str, ...]:
        """An order-sensitive stage's sort within its partitions: key, then the input order."""
        if self.stage.order is not Order.SENSITIVE:
            return ()
        key = (self.stage.key,) if self.stage.key is not None else ()
        return (*key, *self.input_order)

    def parallelism(self, partitions: int) -> str:
        """How many tasks run it in a step, in words."""
        if self.stage.order is Order.AGGREGATION:
            return f"full: {partitions} partitions, combined on the driver"
        if self.stage.order is not Order.SENSITIVE:
            return f"full: {partitions} partitions"
        if self.stage.key is None:
            return "one partition (global order)"
        return f"{partitions} partitions by hash of {self.stage.key}"


@dataclass(frozen=True, slots=True)
class Plan:
    """Every stage, in topological order (an input before its readers, else as declared)."""

    stages: tuple[StagePlan, ...]

    @property
    def aggregations(self) -> tuple[StagePlan, ...]:
        """The aggregations, whose results are one finished table of the run so far."""
        return tuple(s for s in self.stages if s.stage.order is Order.AGGREGATION)

    def shape(self) -> str:
        """The stages as a graph, in one line (names, classes, what each reads, keys, orders):
        what a resumed run must run again, whatever the functions' code now is."""
        return "; ".join(
            f"{s.stage.name} {s.stage.order.value} reads {s.stage.reads}"
            + (f" by {s.stage.key}" if s.stage.key else "")
            + (f" ordered by {','.join(s.stage.order_by)}" if s.stage.order_by else "")
            for s in self.stages
        )

    def explain(self, partitions: int) -> str:
        """``evb spark-job --explain``: every stage, its class, what it reads, where order is
        preserved (and by which key), and how many tasks run it."""
        header = ("stage", "class", "reads", "order", "runs on")
        rows = [header]
        for step in self.stages:
            stage = step.stage
            if stage.order is Order.SENSITIVE:
                order = "sorted by " + ", ".join(step.sort_by)
            elif stage.order is Order.SEQUENCER:
                order = "gives its own: " + ", ".join(stage.order_by)
            elif stage.order is Order.AGGREGATION:
                order = "any: its combine"
            elif step.carries_order:
                order = "carries " + ", ".join(step.output_order)
            else:
                order = "-"
            runs = step.parallelism(partitions)
            rows.append((stage.name, stage.order.value, stage.reads, order, runs))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        kept = sum(1 for s in self.stages if s.stage.order is Order.SENSITIVE)
        combined = len(self.aggregations)
        lines.insert(
            0,
            f"evb stages: {len(self.stages)} stage(s), {kept} order-sensitive"
            + (f", {combined} aggregation(s)" if combined else "")
            + "; order preserved only from each order-sensitive stage back to the nearest"
            " sequencer",
        )
        return "\n".join(lines)


def plan(stages: Sequence[Stage], events_schema: pa.Schema) -> Plan:
    """Check the stages as a graph and plan them; a problem raises ``ConfigError`` naming the
    stage."""
    by_name: dict[str, Stage] = {}
    for stage in stages:
        if stage.name in by_name:
            raise ConfigError("stages", stage.name, "two stages have this name")
        by_name[stage.name] = stage
    for stage in stages:
        if stage.reads != EVENTS and stage.reads not in by_name:
            raise ConfigError(
                f"stage {stage.name}: reads",
                stage.reads,
                f"no such stage (known: {EVENTS}, {', '.join(sorted(by_name))})",
            )
        if stage.reads in by_name and by_name[stage.reads].order is Order.AGGREGATION:
            raise ConfigError(
                f"stage {stage.name}: reads",
                stage.reads,
                "is an aggregation, whose results are the run's finished table so far, rewritten"
                " every micro-batch: no stage reads it (compute it in its finish, or read what it"
                f" reads: {by_name[stage.reads].reads})",
            )
    ordered = _topological(stages)

    def schema_of(name: str) -> pa.Schema:
        return events_schema if name == EVENTS else by_name[name].schema

    output_order: dict[str, tuple[str, ...]] = {EVENTS: EVENTS_ORDER}
    for stage in ordered:
        if stage.order is Order.SEQUENCER:
            output_order[stage.name] = stage.order_by
        else:
            output_order[stage.name] = output_order[stage.reads]

    carries: dict[str, set[str]] = {}  # stage -> the order-sensitive stages reading through it
    for stage in reversed(ordered):  # the design's reverse topological walk
        if stage.order is not Order.SENSITIVE:
            continue
        upstream = stage.reads
        while upstream != EVENTS:
            carries.setdefault(upstream, set()).add(stage.name)
            above = by_name[upstream]
            if above.order is Order.SEQUENCER:
                break  # the nearest sequencer: order is its own from here
            upstream = above.reads

    steps = []
    for stage in ordered:
        input_schema = schema_of(stage.reads)
        if stage.key is not None and stage.key not in input_schema.names:
            raise ConfigError(
                f"stage {stage.name}: key",
                stage.key,
                f"is not a column of what it reads"
                f" ({stage.reads}: {', '.join(input_schema.names)})",
            )
        if stage.name in carries:
            missing = [c for c in output_order[stage.name] if c not in stage.schema.names]
            if missing:
                raise ConfigError(
                    f"stage {stage.name}: schema",
                    missing,
                    "must keep the stream order's columns: order-sensitive stages read through"
                    f" it ({', '.join(sorted(carries[stage.name]))})",
                )
        steps.append(
            StagePlan(
                stage=stage,
                input_schema=input_schema,
                input_order=output_order[stage.reads],
                output_order=output_order[stage.name],
                carries_order=stage.name in carries,
            )
        )
    return Plan(tuple(steps))


def _topological(stages: Sequence[Stage]) -> list[Stage]:
    """Inputs before their readers, else as declared (each time, the first declared stage whose
    input is placed); a cycle is an error naming its stages."""
    placed: set[str] = {EVENTS}
    ordered: list[Stage] = []
    pending = list(stages)
    while pending:
        ready = next((stage for stage in pending if stage.reads in placed), None)
        if ready is None:
            raise ConfigError(
                "stages", ", ".join(_cycle(pending)), "these stages read each other in a cycle"
            )
        ordered.append(ready)
        placed.add(ready.name)
        pending.remove(ready)
    return ordered


def _cycle(pending: Sequence[Stage]) -> list[str]:
    """The names on one cycle among stages none of which can be placed (each reads a pending
    stage, so following what they read from any of them ends in a cycle)."""
    by_name = {stage.name: stage for stage in pending}
    seen: list[str] = []
    name = pending[0].name
    while name not in seen:
        seen.append(name)
        name = by_name[name].reads
    return seen[seen.index(name) :]
