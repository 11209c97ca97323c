"""``evb spark-job --check-order``: a stage declared order-insensitive that is not, found before
it spoils a run.

The declaration is the user's, and a wrong one is silent: a stage that keeps a running value in
a global, or takes the first row of what it is given, gives different results when the events
are split or ordered otherwise, and the planner, trusting it, splits and reorders its input. The
check runs every stage twice over the run's first fragments (``--max-fragments-per-trigger``,
else :data:`CHECK_FRAGMENTS`): once on the events in stream order in one partition, once on the
same events dealt round-robin into several partitions (other splits, other order), and compares
each stage's results as multisets. The first stage (in the plan's order) whose results differ is
named; the stages that read it differ because of it. An order-sensitive stage or a sequencer is
given the same rows in the same order either way, so a difference there means it is not
deterministic. An aggregation's results are its finished table (the partial accumulators of the
partitions combined), so what is compared is what it declares: that its accumulate and combine
give the same result however the rows are split and in whatever order the pieces come.

The stages run as the job runs them (:func:`orderer.spark.stages.runner.run_plan`, which also sends
the stages' own module to the executors by value).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orderer.spark.stages.runner import run_plan
from orderer.stages.api import Order
from orderer.stages.plan import Plan

__all__ = ["CHECK_FRAGMENTS", "StageCheck", "check_order", "report"]

CHECK_FRAGMENTS = 100_000
"""Fragments checked without ``--max-fragments-per-trigger``: the size of a first micro-batch."""


@dataclass(frozen=True, slots=True)
class StageCheck:
    """One stage's results, compared."""

    name: str
    order: Order
    rows: int
    """Its rows in stream order, in one partition."""
    differing: int
    """Rows found in one run and not the other (0: the same)."""
    blamed: str | None
    """The earlier stage that differs and that this one reads through (None: its own)."""


def check_order(
    spark: Any, plan: Plan, read: Callable[[int], Any], partitions: int
) -> tuple[int, list[StageCheck]]:
    """The events of the run's first fragments (``read(partitions)`` gives them as a
    DataFrame), then every stage twice: in one partition, and at ``partitions`` (at least 4)
    dealt round-robin; returns (the events checked, each stage's check)."""
    wide = max(4, partitions)
    ordered_events = read(1).coalesce(1).persist()
    dealt_events = ordered_events.repartition(wide).persist()  # round-robin: split, reordered
    kept: list[Any] = [ordered_events, dealt_events]
    try:
        events = ordered_events.count()
        one = run_plan(spark, plan, ordered_events, 1, {}, kept)
        many = run_plan(spark, plan, dealt_events, wide, {}, kept)
        checks: list[StageCheck] = []
        differs: dict[str, str] = {}  # stage -> the first differing stage it comes from
        for step in plan.stages:
            stage = step.stage
            first = Counter(_rows(one[stage.name]))
            second = Counter(_rows(many[stage.name]))
            differing = (first - second).total() + (second - first).total()
            upstream = differs.get(stage.reads)
            if differing or upstream:
                differs[stage.name] = upstream or stage.name
            checks.append(StageCheck(stage.name, stage.order, first.total(), differing, upstream))
        return events, checks
    finally:
        for frame in kept:
            frame.unpersist()


def _rows(frame: Any) -> list[str]:
    """A stage's results as sorted printable rows (a multiset that any column type compares
    in)."""
    return sorted(repr(tuple(row)) for row in frame.collect())


def report(events: int, checks: list[StageCheck]) -> tuple[str, bool]:
    """The check in words, and whether every declaration held."""
    lines = [
        f"evb spark-job --check-order: {len(checks)} stage(s) run twice over the first"
        f" {events:,} events: in stream order in one partition, and dealt into several"
    ]
    width = max(len(c.name) for c in checks) if checks else 0
    good = True
    for check in checks:
        if not check.differing and check.blamed is None:
            verdict = f"same ({check.rows:,} rows)"
        elif check.blamed is not None and check.blamed != check.name:
            verdict = f"differs, reading {check.blamed}"
        elif check.order is Order.INSENSITIVE:
            good = False
            verdict = (
                f"DIFFERS ({check.differing:,} rows): declared order-insensitive, its results"
                " depend on how its input is split or ordered; declare it order_sensitive, or,"
                " if its rows are partial results that add up, an aggregation"
            )
        elif check.order is Order.AGGREGATION:
            good = False
            verdict = (
                f"DIFFERS ({check.differing:,} rows): its finished result depends on how its"
                " input is split or ordered; accumulate and combine must give the same result"
                " for any split and order (floating-point sums differ in their last digits:"
                " round them in finish)"
            )
        else:
            good = False
            verdict = (
                f"DIFFERS ({check.differing:,} rows): given the same rows in the same order, it"
                " is not deterministic"
            )
        lines.append(f"  {check.name.ljust(width)}  {check.order.value:<17}  {verdict}")
    return "\n".join(lines), good
