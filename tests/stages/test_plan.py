"""The planner of analysis stages (Jet's design 015, "smart job planning"): the stages in
topological order, order preserved only from each order-sensitive stage back to the nearest
sequencer (the built events, or a ``sequencer`` stage), and every configuration error named.

The stages' functions are never called here: planning needs only their declarations.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from orderer.building.glom import EVENT_SCHEMA
from orderer.errors import ConfigError
from orderer.stages import EVENTS, Order, Stage, order_insensitive, order_sensitive, sequencer
from orderer.stages.plan import Plan, StagePlan, plan

#: What most test stages output: the stream order's column, a time, a key.
KEPT = pa.schema([("event", pa.int64()), ("timestamp", pa.int64()), ("source", pa.int64())])
#: An output without the stream order's column ``event``.
NO_EVENT = pa.schema([("timestamp", pa.int64()), ("source", pa.int64())])


def _same(table: Any, state: Any = None) -> Any:
    return table


def insensitive(name: str, reads: str = EVENTS, schema: pa.Schema = KEPT) -> Stage:
    return order_insensitive(schema=schema, reads=reads, name=name)(_same)


def sensitive(
    name: str, reads: str = EVENTS, key: str | None = None, schema: pa.Schema = KEPT
) -> Stage:
    return order_sensitive(schema=schema, reads=reads, key=key, name=name)(_same)


def sequence(name: str, reads: str = EVENTS, order_by: tuple[str, ...] = ("timestamp",)) -> Stage:
    return sequencer(schema=KEPT, reads=reads, order_by=order_by, name=name)(_same)


def steps(result: Plan) -> dict[str, StagePlan]:
    return {step.stage.name: step for step in result.stages}


def names(result: Plan) -> list[str]:
    return [step.stage.name for step in result.stages]


def analysis() -> list[Stage]:
    """A graph with every case of the reverse walk::

    events -> calib -> gate -> decay (order-sensitive, by source) -> dead (order-sensitive)
              calib -> hist -> summed             (order-insensitive readers only)
    events -> prep -> by_time (sequencer: timestamp) -> after -> total (order-sensitive)
                      by_time -> other (sequencer, read by nothing order-sensitive)
    """
    return [
        insensitive("calib"),
        insensitive("gate", reads="calib"),
        sensitive("decay", reads="gate", key="source"),
        sensitive("dead", reads="decay"),
        insensitive("hist", reads="calib", schema=NO_EVENT),
        insensitive("summed", reads="hist", schema=NO_EVENT),
        insensitive("prep", schema=NO_EVENT),
        sequence("by_time", reads="prep"),
        insensitive("after", reads="by_time"),
        sensitive("total", reads="after"),
        sequence("other", reads="by_time", order_by=("source",)),
    ]


# --- topological order -------------------------------------------------------------------------


def test_a_declaration_already_in_topological_order_is_kept() -> None:
    stages = analysis()
    assert names(plan(stages, EVENT_SCHEMA)) == [stage.name for stage in stages]


def test_inputs_come_before_their_readers_and_ties_stay_as_declared() -> None:
    stages = [
        insensitive("late_reader", reads="middle"),
        insensitive("first"),
        insensitive("middle", reads="first"),
        insensitive("independent"),
    ]
    assert names(plan(stages, EVENT_SCHEMA)) == ["first", "middle", "late_reader", "independent"]


def test_readers_of_one_input_keep_their_declared_order() -> None:
    stages = [insensitive("root"), insensitive("z", reads="root"), insensitive("a", reads="root")]
    assert names(plan(stages, EVENT_SCHEMA)) == ["root", "z", "a"]


def test_no_stages_make_an_empty_plan() -> None:
    assert plan([], EVENT_SCHEMA).stages == ()


# --- the reverse walk: where order is preserved --------------------------------------------------


def test_order_is_carried_from_each_order_sensitive_stage_back_to_the_nearest_sequencer() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    carried = {name for name, step in result.items() if step.carries_order}
    # calib, gate: the path from the built events to decay; decay: dead reads it;
    # by_time (the nearest sequencer) and after: the path to total.
    assert carried == {"calib", "gate", "decay", "by_time", "after"}


def test_a_stage_read_only_by_order_insensitive_stages_does_not_carry_order() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert not result["hist"].carries_order
    assert not result["summed"].carries_order


def test_a_stage_above_a_sequencer_does_not_carry_order() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert not result["prep"].carries_order  # by_time gives the order below it


def test_an_order_sensitive_stage_read_by_nothing_order_sensitive_does_not_carry_order() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert not result["dead"].carries_order
    assert not result["total"].carries_order


def test_a_sequencer_read_by_nothing_order_sensitive_does_not_carry_order() -> None:
    assert not steps(plan(analysis(), EVENT_SCHEMA))["other"].carries_order


def test_without_order_sensitive_stages_nothing_carries_order() -> None:
    stages = [insensitive("a"), insensitive("b", reads="a"), sequence("c", reads="b")]
    assert not any(step.carries_order for step in plan(stages, EVENT_SCHEMA).stages)


def test_an_order_sensitive_stage_on_the_events_makes_no_stage_carry_order() -> None:
    stages = [insensitive("a"), sensitive("s", key="barrier")]
    assert not any(step.carries_order for step in plan(stages, EVENT_SCHEMA).stages)


# --- orders --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "input_order", "output_order"),
    [
        ("calib", ("event",), ("event",)),  # the built events' stream order
        ("gate", ("event",), ("event",)),  # inherited
        ("decay", ("event",), ("event",)),  # an order-sensitive stage inherits too
        ("dead", ("event",), ("event",)),
        ("hist", ("event",), ("event",)),
        ("prep", ("event",), ("event",)),
        ("by_time", ("event",), ("timestamp",)),  # a sequencer's own order
        ("after", ("timestamp",), ("timestamp",)),
        ("total", ("timestamp",), ("timestamp",)),
        ("other", ("timestamp",), ("source",)),
    ],
)
def test_input_and_output_order(
    name: str, input_order: tuple[str, ...], output_order: tuple[str, ...]
) -> None:
    step = steps(plan(analysis(), EVENT_SCHEMA))[name]
    assert (step.input_order, step.output_order) == (input_order, output_order)


def test_input_schema_is_the_events_or_the_read_stages_schema() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert result["calib"].input_schema == EVENT_SCHEMA
    assert result["summed"].input_schema == NO_EVENT
    assert result["gate"].input_schema == KEPT


def test_sort_by_is_the_key_then_the_input_order() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert result["decay"].sort_by == ("source", "event")  # keyed
    assert result["dead"].sort_by == ("event",)  # global
    assert result["total"].sort_by == ("timestamp",)  # global, below a sequencer
    assert result["calib"].sort_by == ()  # only order-sensitive stages sort
    assert result["by_time"].sort_by == ()


def test_parallelism() -> None:
    result = steps(plan(analysis(), EVENT_SCHEMA))
    assert result["calib"].parallelism(8) == "full: 8 partitions"
    assert result["by_time"].parallelism(8) == "full: 8 partitions"
    assert result["decay"].parallelism(8) == "8 partitions by hash of source"
    assert result["total"].parallelism(8) == "one partition (global order)"


# --- configuration errors ------------------------------------------------------------------------


def test_two_stages_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="two stages have this name") as error:
        plan([insensitive("a"), insensitive("b"), insensitive("a", reads="b")], EVENT_SCHEMA)
    assert error.value.value == "a"


def test_reading_no_stage_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"stage b: reads: no such stage \(known: events, a, b\)"):
        plan([insensitive("a"), insensitive("b", reads="nowhere")], EVENT_SCHEMA)


def test_two_stages_reading_each_other_are_refused_naming_the_cycle() -> None:
    stages = [
        insensitive("fine"),
        insensitive("a", reads="b"),
        insensitive("b", reads="a"),
        insensitive("below", reads="a"),  # cannot be placed, but is on no cycle
    ]
    with pytest.raises(ConfigError, match="read each other in a cycle") as error:
        plan(stages, EVENT_SCHEMA)
    assert error.value.value == "a, b"


def test_a_stage_reading_itself_is_a_cycle() -> None:
    with pytest.raises(ConfigError, match="cycle") as error:
        plan([insensitive("loop", reads="loop")], EVENT_SCHEMA)
    assert error.value.value == "loop"


def test_a_key_not_in_the_input_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"stage s: key: is not a column of what it reads") as e:
        plan([sensitive("s", key="pixel")], EVENT_SCHEMA)
    assert "events: event, timestamp, multiplicity" in str(e.value)
    assert e.value.value == "pixel"


def test_a_key_of_the_read_stage_not_of_the_events_is_accepted() -> None:
    stages = [insensitive("a"), sensitive("s", reads="a", key="source")]
    assert steps(plan(stages, EVENT_SCHEMA))["s"].sort_by == ("source", "event")


def test_a_stage_on_a_preserved_path_must_keep_the_order_columns() -> None:
    stages = [insensitive("lossy", schema=NO_EVENT), sensitive("s", reads="lossy", key="source")]
    with pytest.raises(ConfigError, match=r"stage lossy: schema: must keep") as error:
        plan(stages, EVENT_SCHEMA)
    assert error.value.value == ["event"]
    assert "(s)" in str(error.value)


def test_the_missing_order_columns_error_names_the_order_sensitive_reader_not_the_next() -> None:
    stages = [
        insensitive("lossy", schema=NO_EVENT),
        insensitive("between", reads="lossy"),
        sensitive("s1", reads="between"),
        insensitive("bystander", reads="lossy", schema=NO_EVENT),
        sensitive("s2", reads="between", key="source"),
    ]
    with pytest.raises(ConfigError, match=r"stage lossy: schema") as error:
        plan(stages, EVENT_SCHEMA)
    assert "read through it (s1, s2)" in str(error.value)


def test_a_stage_below_a_sequencer_must_keep_the_sequencers_columns() -> None:
    stages = [
        sequence("by_time"),
        insensitive("lossy", reads="by_time", schema=pa.schema([("event", pa.int64())])),
        sensitive("s", reads="lossy"),
    ]
    with pytest.raises(ConfigError, match=r"stage lossy: schema") as error:
        plan(stages, EVENT_SCHEMA)
    assert error.value.value == ["timestamp"]


def test_a_stage_on_no_preserved_path_may_drop_the_order_columns() -> None:
    stages = [
        insensitive("lossy", schema=NO_EVENT),
        insensitive("more", reads="lossy", schema=NO_EVENT),
        sequence("by_time", reads="more"),  # above a sequencer: its own order from here
        sensitive("s", reads="by_time"),
    ]
    assert len(plan(stages, EVENT_SCHEMA).stages) == 4


# --- Stage's own checks --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["not-a-name", "", "2nd", "__evb_stage"])
def test_a_stage_name_must_be_an_identifier_not_reserved(name: str) -> None:
    with pytest.raises(ConfigError, match="must be a Python identifier"):
        Stage(name=name, function=_same, order=Order.INSENSITIVE, schema=KEPT)


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ConfigError, match="'<lambda>'"):
        order_insensitive(schema=KEPT)(lambda table: table)


def test_the_name_defaults_to_the_functions() -> None:
    @order_insensitive(schema=[("event", pa.int64())])
    def calibrate(table: pa.Table) -> pa.Table:
        return table

    assert calibrate.name == "calibrate"
    assert calibrate.schema == pa.schema([("event", pa.int64())])  # from a list of fields
    assert calibrate.order is Order.INSENSITIVE


def test_events_is_not_a_stage_name() -> None:
    with pytest.raises(ConfigError, match="'events' names the built events"):
        insensitive(EVENTS)


@pytest.mark.parametrize("order", [Order.INSENSITIVE, Order.SEQUENCER])
def test_only_an_order_sensitive_stage_has_a_key(order: Order) -> None:
    order_by = ("event",) if order is Order.SEQUENCER else ()
    with pytest.raises(ConfigError, match="stage s: key: only an order-sensitive stage has a key"):
        Stage(name="s", function=_same, order=order, schema=KEPT, key="source", order_by=order_by)


def test_a_sequencer_names_its_order() -> None:
    with pytest.raises(ConfigError, match="a sequencer names its order"):
        sequence("s", order_by=())


def test_a_sequencers_order_must_be_columns_of_its_schema() -> None:
    with pytest.raises(ConfigError, match="must be columns of its schema") as error:
        sequence("s", order_by=("timestamp", "pixel"))
    assert error.value.value == ["pixel"]


def test_only_a_sequencer_has_order_by() -> None:
    with pytest.raises(ConfigError, match="only a sequencer has order_by"):
        Stage(name="s", function=_same, order=Order.INSENSITIVE, schema=KEPT, order_by=("event",))


def test_columns_starting_evb_are_reserved() -> None:
    with pytest.raises(ConfigError, match="names starting __evb are evb's"):
        insensitive("s", schema=pa.schema([("event", pa.int64()), ("__evb_state", pa.binary())]))


def test_the_schema_must_be_a_pyarrow_schema() -> None:
    with pytest.raises(ConfigError, match=r"stage s: schema: must be a pyarrow.Schema"):
        Stage(name="s", function=_same, order=Order.INSENSITIVE, schema={"event": "int64"})  # type: ignore[arg-type]


def test_initial_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="stage s: initial: must be callable"):
        Stage(name="s", function=_same, order=Order.SENSITIVE, schema=KEPT, initial=0)  # type: ignore[arg-type]


# --- explain -------------------------------------------------------------------------------------


def test_explain_has_one_line_per_stage_with_class_reads_order_and_parallelism() -> None:
    text = plan(analysis(), EVENT_SCHEMA).explain(4)
    lines = text.splitlines()
    assert lines[0].startswith("evb stages: 11 stage(s), 3 order-sensitive")
    assert lines[1].split() == ["stage", "class", "reads", "order", "runs", "on"]
    rows = {line.split()[0]: line for line in lines[2:]}
    assert list(rows) == [stage.name for stage in analysis()]  # one line each, in plan order
    expected = {
        "calib": ("order-insensitive", "events", "carries event", "full: 4 partitions"),
        "gate": ("order-insensitive", "calib", "carries event", "full: 4 partitions"),
        "decay": (
            "order-sensitive",
            "gate",
            "sorted by source, event",
            "4 partitions by hash of source",
        ),
        "dead": ("order-sensitive", "decay", "sorted by event", "one partition (global order)"),
        "hist": ("order-insensitive", "calib", "-", "full: 4 partitions"),
        "by_time": ("sequencer", "prep", "gives its own: timestamp", "full: 4 partitions"),
        "total": ("order-sensitive", "after", "sorted by timestamp", "one partition"),
        "other": ("sequencer", "by_time", "gives its own: source", "full: 4 partitions"),
    }
    for name, cells in expected.items():
        row = rows[name]
        position = 0
        for cell in cells:  # each cell, left to right
            found = row.find(cell, position)
            assert found > position, (name, cell, row)
            position = found + len(cell)


def test_explain_aligns_its_columns() -> None:
    header, *rows = plan(analysis(), EVENT_SCHEMA).explain(4).splitlines()[1:]
    classes = {row.index(next(o.value for o in Order if o.value in row)) for row in rows}
    assert classes == {header.index("class")}


@pytest.mark.parametrize("kind", [pa.uint8(), pa.uint32(), pa.list_(pa.uint16())])
def test_an_unsigned_column_is_refused_naming_the_stage(kind: pa.DataType) -> None:
    """Spark has no unsigned integers: a schema with one would fail only once Spark runs."""
    with pytest.raises(ConfigError, match="stage raw: schema: Spark has no unsigned integers"):
        Stage(name="raw", function=lambda t: t, order=Order.INSENSITIVE,
              schema=pa.schema([("adc", kind)]))
