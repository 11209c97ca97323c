"""2D histograms a stage declares (:class:`orderer.stages.Histogram2D`, issue 40): its axes
checked as a 1D one's, its cells bounded, one histogram per column or pair; each mistake one
line naming the stage."""

from __future__ import annotations

import pyarrow as pa
import pytest

from orderer.errors import ConfigError
from orderer.stages import Histogram, Histogram2D, order_insensitive

SCHEMA = [("x", pa.int32()), ("y", pa.float64()), ("name", pa.string())]


def _stage(*histograms: object) -> object:
    return order_insensitive(schema=SCHEMA, name="maps", histograms=histograms)(  # type: ignore[arg-type]
        lambda table: table
    )


def test_a_2d_histogram_is_declared_with_two_axes() -> None:
    xy = Histogram2D(Histogram("x", 32, 0, 32), Histogram("y", 10, -1.0, 1.0), log=True)
    stage = _stage(xy, Histogram("x", 8, 0, 8))
    assert stage.histograms == (xy, Histogram("x", 8, 0, 8))  # type: ignore[attr-defined]
    assert (xy.key, xy.columns) == ("x,y", ("x", "y"))


@pytest.mark.parametrize(
    ("histograms", "message"),
    [
        ((Histogram2D(Histogram("x", 4, 0, 4), Histogram("name", 4, 0, 4)),), "must be numeric"),
        ((Histogram2D(Histogram("x", 4, 0, 4), Histogram("z", 4, 0, 4)),), "column of its schema"),
        ((Histogram2D(Histogram("x", 4, 0, 4), Histogram("y", 0, 0, 1)),), "integer above 0"),
        ((Histogram2D(Histogram("x", 4, 1, 1), Histogram("y", 4, 0, 1)),), "low must be below"),
        ((Histogram2D(Histogram("x", 1024, 0, 1), Histogram("y", 128, 0, 1)),), "at most 65,536"),
        ((Histogram2D(Histogram("x", 4, 0, 4), "y"),), "axes are Histograms"),  # type: ignore[arg-type]
        ((Histogram2D(Histogram("x", 4, 0, 4), Histogram("y", 4, 0, 1)),) * 2, "one histogram"),
        (("x",), "must be Histogram or Histogram2D"),
    ],
)
def test_a_wrong_declaration_is_one_line_naming_the_stage(
    histograms: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        _stage(*histograms)
    assert str(refused.value).startswith("stage maps: histogram")
