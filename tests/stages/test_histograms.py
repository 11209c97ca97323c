"""Histograms a stage declares (``histograms=[Histogram(...)]``, issue 30 item 4): accepted by
all three decorators, and every mistake refused when the stage is made, naming the stage and
the histogram. (The job's filling of them is tests/spark/test_stages.py's.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from orderer.errors import ConfigError
from orderer.stages import Histogram, Stage, order_insensitive, order_sensitive, sequencer
from orderer.stages.api import MAX_HISTOGRAM_BINS

SCHEMA = [
    ("event", pa.int64()),
    ("energy", pa.float64()),
    ("adc", pa.int32()),
    ("weight", pa.float32()),
    ("name", pa.string()),
    ("hit", pa.bool_()),
    ("adcs", pa.list_(pa.int32())),
]
ENERGY = Histogram("energy", 4096, 0, 4096, unit="keV")


def _same(table: Any, state: Any = None) -> Any:
    return table


def insensitive(*histograms: Histogram) -> Stage:
    return order_insensitive(schema=SCHEMA, name="calibrated", histograms=histograms)(_same)


def test_every_decorator_takes_histograms_as_a_tuple() -> None:
    adc = Histogram("adc", 100, -0.5, 99.5, label="raw amplitude", log=True)
    made = [
        order_insensitive(schema=SCHEMA, histograms=[ENERGY, adc])(_same),
        order_sensitive(schema=SCHEMA, key="adc", histograms=[ENERGY, adc])(_same),
        sequencer(schema=SCHEMA, order_by=("event",), histograms=[ENERGY, adc])(_same),
    ]
    for stage in made:
        assert stage.histograms == (ENERGY, adc)
    assert order_insensitive(schema=SCHEMA)(_same).histograms == ()
    # a list given to Stage itself is kept as a tuple: the stage stays hashable and frozen
    stage = Stage(name="s", function=_same, order=made[0].order, schema=pa.schema(SCHEMA),
                  histograms=[ENERGY])  # type: ignore[arg-type]
    assert stage.histograms == (ENERGY,)


def test_a_histogram_is_small_frozen_and_labels_its_axis() -> None:
    assert ENERGY.axis_label == "energy (keV)"
    assert Histogram("adc", 10, 0, 10, label="raw").axis_label == "raw"
    assert Histogram("adc", 10, 0, 10, label="raw", unit="ch").axis_label == "raw (ch)"
    assert (ENERGY.label, ENERGY.log) == (None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ENERGY.bins = 10  # type: ignore[misc]
    # integer and float columns of every width, numpy numbers as bins and range
    for column in ("event", "energy", "adc", "weight"):
        insensitive(Histogram(column, np.int64(8), np.float32(-1), 7))  # type: ignore[arg-type]
    assert insensitive(Histogram("adc", MAX_HISTOGRAM_BINS, 0, 1)).histograms


@pytest.mark.parametrize(
    ("histogram", "message"),
    [
        (Histogram("missing", 10, 0, 1),
         r"stage calibrated: histogram of 'missing': must be a column of its schema"),
        (Histogram("name", 10, 0, 1),
         r"stage calibrated: histogram of 'name': the column must be numeric .*string"),
        (Histogram("hit", 10, 0, 1), r"histogram of 'hit': the column must be numeric .*bool"),
        (Histogram("adcs", 10, 0, 1), r"histogram of 'adcs': the column must be numeric .*list"),
        (Histogram("energy", 0, 0, 1),
         r"stage calibrated: histogram of 'energy': bins: must be an integer above 0 \(got 0\)"),
        (Histogram("energy", -3, 0, 1), r"bins: must be an integer above 0"),
        (Histogram("energy", 2.5, 0, 1), r"bins: must be an integer above 0"),  # type: ignore[arg-type]
        (Histogram("energy", True, 0, 1), r"bins: must be an integer above 0"),
        (Histogram("energy", MAX_HISTOGRAM_BINS + 1, 0, 1), r"bins: at most 65,536"),
        (Histogram("energy", 10, 5, 5),
         r"stage calibrated: histogram of 'energy': low, high: low must be below high"),
        (Histogram("energy", 10, 5, 1), r"low must be below high \(got \(5, 1\)\)"),
        (Histogram("energy", 10, 0, float("inf")), r"low, high: must be finite numbers"),
        (Histogram("energy", 10, float("nan"), 1), r"low, high: must be finite numbers"),
        (Histogram("energy", 10, "0", 1), r"low, high: must be finite numbers"),  # type: ignore[arg-type]
    ],
)
def test_a_wrong_histogram_is_refused_naming_the_stage_and_the_histogram(
    histogram: Histogram, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        insensitive(histogram)


def test_one_histogram_per_column_and_histograms_only() -> None:
    with pytest.raises(ConfigError, match=r"histogram of 'energy': one histogram per column"):
        insensitive(ENERGY, Histogram("energy", 10, 0, 10))
    with pytest.raises(ConfigError, match=r"stage calibrated: histograms: must be Histogram"):
        insensitive(("energy", 10, 0, 10))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"stage gaps: histogram of 'energy'"):
        order_sensitive(schema=SCHEMA, name="gaps", histograms=[Histogram("energy", 1, 1, 0)])(
            _same
        )
    with pytest.raises(ConfigError, match=r"stage sorted: histogram of 'energy'"):
        sequencer(schema=SCHEMA, name="sorted", order_by=("event",),
                  histograms=[Histogram("energy", 1, 1, 0)])(_same)
