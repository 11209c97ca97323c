"""The replay reader: its fast column-wise path reads exactly what the record-by-record path
reads, and anything doubtful still ends in the exact `line N:` error."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.errors import RecordError
from orderer.formats.json_lines import _read_checked, read_records

_fragment = st.fixed_dictionaries(
    {"source": st.integers(0, 2**32 - 1), "ts": st.integers(0, 2**64 - 2)},
    optional={
        "barrier": st.integers(0, 2**32 - 1),
        "payload": st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()),
    },
)
_watermark = st.fixed_dictionaries(
    {"source": st.integers(0, 2**32 - 1), "watermark": st.integers(0, 2**64 - 1)}
)
_end = st.fixed_dictionaries({"source": st.integers(0, 2**32 - 1), "end": st.just(True)})


@st.composite
def _runs(draw: st.DrawFn) -> list[str]:
    bodies = draw(st.lists(st.one_of(_fragment, _watermark, _end), max_size=30))
    gaps = draw(
        st.lists(st.sampled_from([0, 0.5, 1, 0.1]), min_size=len(bodies), max_size=len(bodies))
    )
    t, lines = 0.0, []
    for body, gap in zip(bodies, gaps, strict=True):
        t += gap
        lines.append(json.dumps({"t": t, **body}))
    return lines


def _columns_equal(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_runs())
def test_fast_path_reads_what_the_checked_path_reads(lines: list[str]) -> None:
    assert _columns_equal(read_records(lines), _read_checked(lines))


_corruptions = st.sampled_from(
    [
        '{"t": 0, "source": 1, "ts": -1}',
        '{"t": 0, "source": 1, "ts": true}',
        '{"t": true, "source": 1, "ts": 1}',
        '{"t": 0, "source": 4294967296, "ts": 1}',
        '{"t": 0, "source": 1, "ts": 18446744073709551615}',
        '{"t": 0, "source": 1, "watermark": 18446744073709551616}',
        '{"t": 0, "source": 1, "end": 1}',
        '{"t": 0, "source": 1, "ts": 1, "extra": 2}',
        '{"t": 0, "source": 1, "ts": 1, "payload": 5}',
        '{"t": 0, "source": 1, "ts": 1, "payload": "@@"}',
        '{"t": 0, "source": 1, "ts": 1, "barrier": 2.0}',
        '{"t": NaN, "source": 1, "ts": 1}',
        '"just a string"',
        '{"t": 0, "source": 1, "ts": 1',
    ]
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_runs(), _corruptions, st.data())
def test_a_bad_record_anywhere_is_named_by_its_line(
    lines: list[str], bad: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(lines)))
    lines = [*lines[:at], bad, *lines[at:]]
    with pytest.raises(RecordError) as error:
        read_records(lines)
    assert error.value.line == at + 1
    assert str(error.value).startswith(f"line {at + 1}: ")


def test_time_going_backwards_is_named() -> None:
    lines = ['{"t": 1, "source": 1, "ts": 1}', '{"t": 0.5, "source": 1, "ts": 2}']
    with pytest.raises(RecordError, match=r"line 2: t=0\.5 is before"):
        read_records(lines)
