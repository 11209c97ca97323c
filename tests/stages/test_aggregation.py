"""Aggregations (:func:`orderer.stages.aggregation`), without Spark: the declaration and its
refusals (one line naming the stage and what is wrong), the planner's place for them (nothing
reads one; ``--explain`` names the kind), and their three steps over Arrow data
(:func:`orderer.stages.steps.accumulate`, ``combine``, ``finish``).

The property: an aggregation's rows accumulated piece by piece, the pieces split and ordered
anyhow and their accumulators combined in any grouping, finish as the same table as one
accumulation of every row; so the job's results do not depend on ``--partitions``, the
micro-batches or a restart.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.building.glom import EVENT_SCHEMA
from orderer.errors import ConfigError, StageError
from orderer.spark.driver.job import main
from orderer.stages import (
    Histogram,
    Order,
    Stage,
    aggregation,
    order_insensitive,
    order_sensitive,
)
from orderer.stages.load import load_stages
from orderer.stages.plan import StagePlan, plan
from orderer.stages.steps import accumulate, combine, finish, initial

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None)
COUNTS = pa.schema([("multiplicity", pa.int64()), ("count", pa.int64())])
"""A histogram's rows: one per multiplicity seen, with its count."""
EVENTS_SCHEMA = pa.schema([("event", pa.int64()), ("multiplicity", pa.int64())])


def _no_counts() -> dict[int, int]:
    return {}


def _add(first: dict[int, int], second: dict[int, int]) -> dict[int, int]:
    return {k: first.get(k, 0) + second.get(k, 0) for k in first.keys() | second.keys()}


def _rows(counts: dict[int, int]) -> pa.Table:
    keys = sorted(counts)
    return pa.table({"multiplicity": keys, "count": [counts[k] for k in keys]})


@aggregation(
    schema=COUNTS, initial=_no_counts, combine=_add, finish=_rows,
    histograms=[Histogram("multiplicity", 8, 0, 8)],
)  # fmt: skip
def multiplicities(events: pa.Table, counts: dict[int, int]) -> dict[int, int]:
    values, seen = np.unique(events["multiplicity"].to_numpy(), return_counts=True)
    return _add(counts, dict(zip(values.tolist(), seen.tolist(), strict=True)))


def _same(table: pa.Table, state: Any) -> tuple[pa.Table, Any]:
    return table, state


def step_of(stage: Stage, schema: pa.Schema = EVENTS_SCHEMA) -> StagePlan:
    (step,) = plan([stage], schema).stages
    return step


def events(multiplicity: list[int]) -> pa.Table:
    return pa.table(
        {"event": np.arange(len(multiplicity)), "multiplicity": multiplicity},
        schema=EVENTS_SCHEMA,
    )


# --- the declaration ------------------------------------------------------------------------


def test_the_decorator_makes_an_aggregation_with_its_combination() -> None:
    assert multiplicities.order is Order.AGGREGATION
    assert multiplicities.name == "multiplicities"
    assert multiplicities.initial is _no_counts
    assert multiplicities.combine is _add and multiplicities.finish is _rows
    assert multiplicities.key is None and multiplicities.order_by == ()
    assert multiplicities.histograms == (Histogram("multiplicity", 8, 0, 8),)
    assert Order.AGGREGATION.value == "aggregation"


def _declare(**given: Any) -> Stage:
    declared = {"schema": COUNTS, "initial": _no_counts, "combine": _add, "finish": _rows}
    declared.update(given)
    return aggregation(**declared)(multiplicities.function)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"initial": None}, "stage multiplicities: initial: an aggregation's empty accumulator"),
        ({"initial": 0}, "stage multiplicities: initial: must be callable (got 0)"),
        ({"combine": None}, "stage multiplicities: combine: must be callable: combine(a, b)"),
        ({"combine": "sum"}, "stage multiplicities: combine: must be callable"),
        ({"finish": None}, "stage multiplicities: finish: must be callable: finish(acc) -> table"),
        ({"finish": 3}, "stage multiplicities: finish: must be callable"),
        ({"schema": {"a": 1}}, "stage multiplicities: schema: must be a pyarrow.Schema or"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_stage_and_the_field(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _declare(**given)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_an_aggregation_has_no_key_nor_order_and_no_other_stage_a_combination() -> None:
    base = {"function": _rows, "schema": COUNTS, "initial": _no_counts}
    with pytest.raises(ConfigError, match="stage a: key: only an order-sensitive stage"):
        Stage(name="a", order=Order.AGGREGATION, combine=_add, finish=_rows, key="m", **base)
    with pytest.raises(ConfigError, match="stage a: order_by: only a sequencer has order_by"):
        Stage(
            name="a", order=Order.AGGREGATION, combine=_add, finish=_rows,
            order_by=("multiplicity",), **base,
        )  # fmt: skip
    for order in (Order.INSENSITIVE, Order.SENSITIVE):
        with pytest.raises(ConfigError, match="stage s: combine: only an aggregation has combine"):
            Stage(name="s", order=order, combine=_add, **base)
        with pytest.raises(ConfigError, match="stage s: finish: only an aggregation has finish"):
            Stage(name="s", order=order, finish=_rows, **base)


def test_a_module_with_a_bad_aggregation_is_refused_in_one_line_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``evb spark-job`` says of it: exit status 2, one line naming the file, the line, the
    stage and the missing field."""
    module = tmp_path / "no_combine_stages.py"
    module.write_text(
        textwrap.dedent("""\
        import pyarrow as pa
        from orderer.stages import aggregation

        @aggregation(schema=[("n", pa.int64())], initial=int, finish=lambda n: n)
        def counted(events, n):
            return n + events.num_rows
        """)
    )
    job = ["--target", "localhost:1", "--output", str(tmp_path), "--dt", "100"]
    assert main([*job, "--stages", str(module), "--explain"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(module) in err and "(line 4)" in err
    assert "stage counted: combine: must be callable" in err


# --- the plan ---------------------------------------------------------------------------------


def test_no_stage_reads_an_aggregation() -> None:
    reader = order_insensitive(schema=COUNTS, reads="multiplicities", name="reader")(_rows)
    with pytest.raises(ConfigError) as refused:
        plan([multiplicities, reader], EVENT_SCHEMA)
    message = str(refused.value)
    assert message.startswith("stage reader: reads: is an aggregation")
    assert "compute it in its finish, or read what it reads: events" in message
    keyed = order_sensitive(schema=COUNTS, reads="multiplicities", key="count", name="k")(_same)
    with pytest.raises(ConfigError, match="stage k: reads: is an aggregation"):
        plan([multiplicities, keyed], EVENT_SCHEMA)


def test_an_aggregation_reads_any_stage_and_carries_no_order() -> None:
    reads = order_insensitive(schema=EVENTS_SCHEMA, name="gated")(_rows)
    over = aggregation(
        schema=COUNTS, reads="gated", initial=_no_counts, combine=_add, finish=_rows, name="over"
    )(multiplicities.function)
    planned = plan([over, reads], EVENT_SCHEMA)
    assert [s.stage.name for s in planned.stages] == ["gated", "over"]
    assert [s.stage.name for s in planned.aggregations] == ["over"]
    assert not any(s.carries_order for s in planned.stages)
    assert planned.stages[1].sort_by == ()
    assert planned.stages[1].parallelism(5) == "full: 5 partitions, combined on the driver"


def test_explain_names_the_kind() -> None:
    reads = order_insensitive(schema=EVENTS_SCHEMA, name="gated")(_rows)
    text = plan([reads, multiplicities], EVENT_SCHEMA).explain(3)
    lines = text.splitlines()
    assert lines[0].startswith("evb stages: 2 stage(s), 0 order-sensitive, 1 aggregation(s);")
    row = next(line for line in lines if line.startswith("multiplicities"))
    assert row.split()[1] == "aggregation"
    assert row.endswith("full: 3 partitions, combined on the driver")
    header = plan([reads], EVENT_SCHEMA).explain(3).splitlines()[0]
    assert "aggregation" not in header  # the line as it was, without any


# --- the steps ------------------------------------------------------------------------------


def test_accumulate_combine_finish() -> None:
    step = step_of(multiplicities)
    empty = initial(step)
    assert accumulate(step, events([]), empty) is empty  # no rows: no call
    first = accumulate(step, events([1, 2, 2]), empty)
    second = accumulate(step, events([2, 5]), initial(step))
    result = finish(step, combine(step, first, second))
    assert result.schema == COUNTS
    assert result.to_pylist() == [
        {"multiplicity": 1, "count": 1},
        {"multiplicity": 2, "count": 3},
        {"multiplicity": 5, "count": 1},
    ]
    assert finish(step, empty).num_rows == 0 and finish(step, empty).schema == COUNTS


@PROPERTY
@given(
    multiplicity=st.lists(st.integers(1, 6), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_split_and_grouping_finishes_as_one_accumulation(
    multiplicity: list[int], cuts: list[int], seed: int
) -> None:
    """Pieces cut anywhere, each shuffled, accumulated apart and combined in a random order
    and grouping (a running accumulator as the micro-batches make it, partials as partitions
    make them) finish as one accumulation of every row in stream order."""
    step = step_of(multiplicities)
    table = events(multiplicity)
    whole = finish(step, accumulate(step, table, initial(step)))
    rng = np.random.default_rng(seed)
    bounds = sorted({0, table.num_rows, *(c for c in cuts if c <= table.num_rows)})
    pieces = [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    partials = [
        accumulate(step, piece.take(rng.permutation(piece.num_rows)), initial(step))
        for piece in pieces
    ]
    rng.shuffle(partials)
    while len(partials) > 1:  # combined pairwise in a random grouping
        i = int(rng.integers(0, len(partials) - 1))
        partials[i : i + 2] = [combine(step, partials[i], partials[i + 1])]
    total = partials[0] if partials else initial(step)
    assert finish(step, total).equals(whole)


def _counted(events: pa.Table, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return counts + np.bincount(events["multiplicity"].to_numpy(), minlength=counts.size)


def test_a_numpy_accumulator_with_numpy_add_as_its_combine() -> None:
    """As examples/calibration.py declares its histogram: ``combine=np.add``."""
    stage = aggregation(
        schema=COUNTS,
        initial=lambda: np.zeros(8, np.int64),
        combine=np.add,
        finish=lambda c: pa.table({"multiplicity": np.nonzero(c)[0], "count": c[c > 0]}),
        name="by_multiplicity",
    )(_counted)
    step = step_of(stage)
    total = combine(
        step,
        accumulate(step, events([1, 1, 3]), initial(step)),
        accumulate(step, events([3, 7]), initial(step)),
    )
    assert finish(step, total).to_pylist() == [
        {"multiplicity": 1, "count": 2},
        {"multiplicity": 3, "count": 2},
        {"multiplicity": 7, "count": 1},
    ]


def test_a_failure_names_the_stage_and_the_users_line() -> None:
    def broken_combine(a: Any, b: Any) -> Any:
        raise ValueError("no way to add these")

    stage = aggregation(
        schema=COUNTS, initial=_no_counts, combine=broken_combine, finish=_rows, name="broken"
    )(multiplicities.function)
    step = step_of(stage)
    with pytest.raises(StageError) as failed:
        combine(step, {}, {})
    message = str(failed.value)
    assert message.startswith("stage broken failed: ValueError: no way to add these")
    assert "test_aggregation.py" in message and "raise ValueError" in message
    from orderer.spark.stages.runner import stage_failure

    assert stage_failure(message) == message  # one line for the job, raised on the driver

    def counts_nothing(events: pa.Table, counts: Any) -> Any:
        return counts["missing"]

    stage = aggregation(
        schema=COUNTS, initial=_no_counts, combine=_add, finish=_rows, name="lookup"
    )(counts_nothing)
    with pytest.raises(StageError, match="stage lookup failed on the events from offset 0: "):
        accumulate(step_of(stage), events([1]), {})


def test_what_finish_returns_is_cast_to_the_schema_or_refused_naming_the_stage() -> None:
    step = step_of(multiplicities)
    out = finish(step, {2: 4})
    assert out.schema == COUNTS
    stage = aggregation(
        schema=COUNTS, initial=_no_counts, combine=_add, finish=lambda c: c, name="raw"
    )(multiplicities.function)
    with pytest.raises(StageError, match="stage raw failed: returned dict, not a pyarrow Table"):
        finish(step_of(stage), {2: 4})


def test_the_examples_aggregations_load_and_plan() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    for name, aggregations in (
        ("calibration", ["energy_histogram"]),
        ("dead_time", ["dead_time"]),
        ("physics", ["dead_time", "energy_histogram"]),
    ):
        planned = plan(load_stages(examples / f"{name}.py"), EVENT_SCHEMA)
        assert [s.stage.name for s in planned.aggregations] == aggregations, name
