"""One step of a stage over Arrow data (:mod:`orderer.stages.steps`), without Spark: the result
cast to the stage's schema, an order-sensitive stage's events sorted by (key, stream order) and
handed over one key at a time with that key's state, and a user's failure named.

The property: an order-sensitive stage run piece by piece over the ordered stream (each piece
possibly shuffled, as a parallel engine hands it over), its states carried from piece to piece,
gives exactly what one call over the whole stream gives.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.errors import StageError
from orderer.stages import order_insensitive, order_sensitive, sequencer
from orderer.stages import steps as steps_module
from orderer.stages.api import Stage
from orderer.stages.plan import StagePlan, plan
from orderer.stages.steps import GLOBAL, apply, apply_sensitive

#: The events of these tests: the stream order (``event``), a time, a key (``pixel``).
EVENTS_SCHEMA = pa.schema([("event", pa.int64()), ("timestamp", pa.int64()), ("pixel", pa.int64())])
PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def step_of(stage: Stage) -> StagePlan:
    """The stage as planned, reading the events of :data:`EVENTS_SCHEMA`."""
    (step,) = plan([stage], EVENTS_SCHEMA).stages
    return step


def events(rows: list[tuple[int, int, int]]) -> pa.Table:
    """A table of (event, timestamp, pixel) rows."""
    columns = list(zip(*rows, strict=True)) if rows else [[], [], []]
    return pa.table([pa.array(c, pa.int64()) for c in columns], schema=EVENTS_SCHEMA)


def shuffled(table: pa.Table, seed: int) -> pa.Table:
    return table.take(np.random.default_rng(seed).permutation(table.num_rows))


# --- the result, cast to the declared schema -----------------------------------------------------


def test_the_result_is_cast_to_the_schema_and_its_columns() -> None:
    @order_insensitive(schema=[("event", pa.int64()), ("energy", pa.float64())])
    def calibrate(table: pa.Table) -> pa.Table:
        return pa.table(
            {
                "extra": pa.array(["dropped"] * table.num_rows),
                "energy": pc.cast(table["timestamp"], pa.int32()),  # cast to float64
                "event": pc.cast(table["event"], pa.int32()),  # cast back to int64
            }
        )

    out = apply(step_of(calibrate), events([(1, 10, 0), (2, 20, 0)]))
    assert out.schema == calibrate.schema
    assert out.to_pylist() == [{"event": 1, "energy": 10.0}, {"event": 2, "energy": 20.0}]


def test_a_record_batch_result_is_accepted() -> None:
    @order_insensitive(schema=[("event", pa.int64())])
    def batch(table: pa.Table) -> pa.RecordBatch:
        return pa.record_batch([pc.cast(table["event"], pa.int32()).combine_chunks()], ["event"])

    out = apply(step_of(batch), events([(1, 10, 0)]))
    assert isinstance(out, pa.Table)
    assert out.schema == batch.schema
    assert out.column("event").to_pylist() == [1]


def test_a_missing_column_names_the_stage() -> None:
    @order_insensitive(schema=[("event", pa.int64()), ("energy", pa.float64())])
    def forgetful(table: pa.Table) -> pa.Table:
        return table.select(["event"])

    with pytest.raises(StageError, match=r"stage forgetful failed: .*\['energy'\]") as error:
        apply(step_of(forgetful), events([(1, 10, 0)]))
    assert error.value.stage == "forgetful"


def test_a_column_that_does_not_cast_names_the_stage() -> None:
    @order_insensitive(schema=[("event", pa.int64())])
    def wordy(table: pa.Table) -> pa.Table:
        return pa.table({"event": pa.array(["one"] * table.num_rows)})

    with pytest.raises(StageError, match="stage wordy failed: its result does not fit its schema"):
        apply(step_of(wordy), events([(1, 10, 0)]))


@pytest.mark.parametrize("result", [None, {"event": [1]}, [1], "table"])
def test_a_result_that_is_no_table_is_refused(result: Any) -> None:
    @order_insensitive(schema=[("event", pa.int64())])
    def odd(table: pa.Table) -> Any:
        return result

    with pytest.raises(StageError, match=f"stage odd failed: returned {type(result).__name__},"):
        apply(step_of(odd), events([(1, 10, 0)]))


def test_an_empty_input_gives_an_empty_result_without_a_call() -> None:
    calls = []

    @order_insensitive(schema=[("event", pa.int64())])
    def counted(table: pa.Table) -> pa.Table:
        calls.append(table)
        return table

    @order_sensitive(schema=[("event", pa.int64())], key="pixel")
    def counted_too(table: pa.Table, state: Any) -> tuple[pa.Table, Any]:
        calls.append(table)
        return table, state

    assert apply(step_of(counted), events([])) == counted.schema.empty_table()
    assert apply_sensitive(step_of(counted_too), events([]), {1: "kept"}) == (
        counted_too.schema.empty_table(),
        {},
    )
    assert calls == []


def test_a_sequencer_runs_through_apply() -> None:
    @sequencer(schema=EVENTS_SCHEMA, order_by=["timestamp"])
    def by_time(table: pa.Table) -> pa.Table:
        return table.sort_by("timestamp")

    out = apply(step_of(by_time), events([(1, 30, 0), (2, 10, 0), (3, 20, 0)]))
    assert out.column("event").to_pylist() == [2, 3, 1]


# --- an order-sensitive step ---------------------------------------------------------------------


class Recorder:
    """An order-sensitive function that records each call and counts its key's events."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], list[int], Any]] = []

    def __call__(self, table: pa.Table, state: Any) -> tuple[pa.Table, Any]:
        pixels = table.column("pixel").to_pylist()
        self.calls.append((pixels, table.column("event").to_pylist(), state))
        return table.select(["event", "pixel"]), (state[0], state[1] + table.num_rows)


def recording_stage(key: str | None) -> tuple[Recorder, StagePlan]:
    recorder = Recorder()
    stage = order_sensitive(
        schema=[("event", pa.int64()), ("pixel", pa.int64())],
        key=key,
        initial=lambda: ("new", 0),
        name="recorded",
    )(recorder)
    return recorder, step_of(stage)


def test_each_key_is_called_once_with_its_events_in_stream_order() -> None:
    recorder, step = recording_stage("pixel")
    rows = [(event, 1000 - event, event % 3) for event in range(0, 60, 2)]
    out, _ = apply_sensitive(step, shuffled(events(rows), seed=1), {})
    assert [pixels for pixels, _, _ in recorder.calls] == [[0] * 10, [1] * 10, [2] * 10]
    for pixel, (_, seen, _) in enumerate(recorder.calls):
        assert seen == [event for event, _, p in rows if p == pixel]  # in order, not timestamp's
    assert out.column("event").to_pylist() == [e for _, seen, _ in recorder.calls for e in seen]


def test_given_states_are_used_else_initial_and_only_seen_keys_come_back() -> None:
    recorder, step = recording_stage("pixel")
    table = events([(1, 0, 7), (2, 0, 5), (3, 0, 7)])
    _, new = apply_sensitive(step, table, {7: ("old", 10), 9: ("unseen", 0)})
    assert [state for _, _, state in recorder.calls] == [("new", 0), ("old", 10)]  # 5, then 7
    assert new == {5: ("new", 1), 7: ("old", 12)}
    assert all(type(key) is int for key in new)  # plain Python keys: they pickle as such


def test_string_keys() -> None:
    @order_sensitive(schema=[("event", pa.int64())], key="name", initial=list)
    def names(table: pa.Table, state: list[int]) -> tuple[pa.Table, list[int]]:
        return table.select(["event"]), state + table.column("event").to_pylist()

    step = StagePlan(
        stage=names,
        input_schema=pa.schema([("event", pa.int64()), ("name", pa.string())]),
        input_order=("event",),
        output_order=("event",),
        carries_order=False,
    )
    table = pa.table({"event": [4, 3, 2, 1], "name": ["b", "a", "b", "a"]})
    out, new = apply_sensitive(step, table, {"a": [0]})
    assert new == {"a": [0, 1, 3], "b": [2, 4]}
    assert out.column("event").to_pylist() == [1, 3, 2, 4]


def test_a_global_stage_sees_all_events_in_order_under_the_global_key() -> None:
    recorder, step = recording_stage(None)
    rows = [(event, 0, event % 2) for event in range(20)]
    out, new = apply_sensitive(step, shuffled(events(rows), seed=2), {GLOBAL: ("old", 5)})
    assert len(recorder.calls) == 1
    assert recorder.calls[0][1:] == (list(range(20)), ("old", 5))
    assert new == {steps_module.GLOBAL: ("old", 25)}
    assert out.column("event").to_pylist() == list(range(20))


def test_a_global_stage_without_a_state_starts_from_initial() -> None:
    recorder, step = recording_stage(None)
    _, new = apply_sensitive(step, events([(1, 0, 0)]), {})
    assert recorder.calls[0][2] == ("new", 0)
    assert new == {GLOBAL: ("new", 1)}


def test_an_order_sensitive_stage_must_return_a_table_and_a_state() -> None:
    @order_sensitive(schema=[("event", pa.int64())])
    def stateless(table: pa.Table, state: Any) -> pa.Table:
        return table

    with pytest.raises(StageError, match=r"stage stateless failed on the events from offset 3:"):
        apply_sensitive(step_of(stateless), events([(4, 0, 0), (3, 0, 0)]), {})


def test_a_null_key_names_the_stage() -> None:
    _, step = recording_stage("pixel")
    table = pa.table({"event": [1, 2], "timestamp": [0, 0], "pixel": [1, None]})
    with pytest.raises(StageError, match="stage recorded failed: its key column pixel holds nulls"):
        apply_sensitive(step, table, {})


# --- the property: piece by piece equals all at once ---------------------------------------------


@order_sensitive(
    schema=[("event", pa.int64()), ("pixel", pa.int64()), ("gap", pa.int64())], key="pixel"
)
def gaps(table: pa.Table, last: int | None) -> tuple[pa.Table, int | None]:
    """Per pixel, the time since its previous event (None for its first): depends on order."""
    out = []
    for timestamp in table.column("timestamp").to_pylist():
        out.append(None if last is None else timestamp - last)
        last = timestamp
    return table.select(["event", "pixel"]).append_column("gap", pa.array(out)), last


@order_sensitive(schema=[("event", pa.int64()), ("total", pa.int64())], initial=lambda: 0)
def running(table: pa.Table, total: int) -> tuple[pa.Table, int]:
    """The running total of the timestamps over the whole stream."""
    sums = total + np.cumsum(table.column("timestamp").to_numpy())
    return table.select(["event"]).append_column("total", pa.array(sums)), int(sums[-1])


def gaps_oracle(rows: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """``gaps`` as a plain loop over the stream, ordered by (pixel, event)."""
    last: dict[int, int] = {}
    out = []
    for event, timestamp, pixel in rows:
        gap = timestamp - last[pixel] if pixel in last else None
        last[pixel] = timestamp
        out.append({"event": event, "pixel": pixel, "gap": gap})
    return sorted(out, key=lambda row: (row["pixel"], row["event"]))


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[tuple[int, int, int]], list[int]]:
    """An ordered stream of (event, timestamp, pixel), timestamps in any order (late events),
    and the cuts that split it into consecutive pieces (empty pieces included)."""
    increments = draw(st.lists(st.integers(1, 5), max_size=40))  # offsets grow, with gaps
    offsets = np.cumsum([7, *increments]).tolist()[1:]
    rows = [(event, draw(st.integers(0, 10_000)), draw(st.integers(0, 3))) for event in offsets]
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=6)))
    return rows, cuts


def piece_by_piece(
    step: StagePlan, table: pa.Table, cuts: list[int], shuffle: bool
) -> tuple[pa.Table, dict[Hashable, Any]]:
    bounds = [0, *cuts, table.num_rows]
    states: dict[Hashable, Any] = {}
    outputs = []
    for start, end in itertools.pairwise(bounds):
        piece = table.slice(start, end - start)
        if shuffle:
            piece = shuffled(piece, seed=start * 1000 + end)
        out, new = apply_sensitive(step, piece, states)
        outputs.append(out)
        states = {**states, **new}
    return pa.concat_tables(outputs), states


def by_pixel_event(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by([("pixel", "ascending"), ("event", "ascending")]).to_pylist()


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@PROPERTY
@given(stream=streams())
def test_keyed_state_carried_piece_by_piece_equals_one_call(
    shuffle: bool, stream: tuple[list[tuple[int, int, int]], list[int]]
) -> None:
    rows, cuts = stream
    step = step_of(gaps)
    whole, whole_states = apply_sensitive(step, events(rows), {})
    assert by_pixel_event(whole) == gaps_oracle(rows)
    pieces, states = piece_by_piece(step, events(rows), cuts, shuffle)
    assert pieces.schema == gaps.schema
    assert by_pixel_event(pieces) == by_pixel_event(whole)  # per piece, keys come in key order
    assert states == whole_states


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@PROPERTY
@given(stream=streams())
def test_global_state_carried_piece_by_piece_equals_one_call(
    shuffle: bool, stream: tuple[list[tuple[int, int, int]], list[int]]
) -> None:
    rows, cuts = stream
    step = step_of(running)
    whole, whole_states = apply_sensitive(step, events(rows), {})
    total = 0
    expected = []
    for event, timestamp, _ in rows:
        total += timestamp
        expected.append({"event": event, "total": total})
    assert whole.to_pylist() == expected
    pieces, states = piece_by_piece(step, events(rows), cuts, shuffle)
    assert pieces.to_pylist() == whole.to_pylist()  # global: in stream order, as one call
    assert states == whole_states == ({GLOBAL: total} if rows else {})


# --- a user's failure, named ---------------------------------------------------------------------


def explode(table: pa.Table, state: Any) -> tuple[pa.Table, Any]:
    if 5 in table.column("pixel").to_pylist():
        raise RuntimeError("no pixel 5 here")
    return table.select(["event"]), state


EXPLODE_LINE = explode.__code__.co_firstlineno + 2  # the ``raise``


def test_a_users_exception_names_the_stage_the_first_event_and_the_users_line() -> None:
    stage = order_sensitive(schema=[("event", pa.int64())], key="pixel", name="fragile")(explode)
    table = events([(40, 0, 5), (12, 0, 1), (31, 0, 5), (25, 0, 5), (3, 0, 1)])
    with pytest.raises(StageError) as error:
        apply_sensitive(step_of(stage), shuffled(table, seed=3), {})
    assert error.value.stage == "fragile"
    assert error.value.event == 25  # the first event of pixel 5's piece, in stream order
    assert error.value.where is not None
    assert error.value.where.startswith(f"{__file__}:{EXPLODE_LINE}:")
    message = str(error.value)
    assert message.startswith("stage fragile failed on the events from offset 25:")
    assert "RuntimeError: no pixel 5 here" in message
    assert f"{__file__}:{EXPLODE_LINE}" in message
    assert isinstance(error.value.__cause__, RuntimeError)


def _divide(table: pa.Table) -> pa.Table:
    return table.select(["event"]).append_column("ratio", pa.array([1 // 0]))


def test_a_users_exception_in_an_order_insensitive_stage_is_named_too() -> None:
    @order_insensitive(schema=[("event", pa.int64())])
    def ratio(table: pa.Table) -> pa.Table:
        return _divide(table)  # the deepest line of this file is _divide's

    with pytest.raises(StageError) as error:
        apply(step_of(ratio), events([(8, 0, 0), (2, 0, 0)]))
    assert error.value.event == 8  # as given: an order-insensitive stage is not sorted
    assert error.value.where is not None
    assert error.value.where.startswith(f"{__file__}:{_divide.__code__.co_firstlineno + 1}:")
    assert "ZeroDivisionError" in str(error.value)
