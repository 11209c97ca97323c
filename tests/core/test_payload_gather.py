"""The compiled parts of the readers' gather (``orderer/_core/payload_gather.pyx``) against
numpy: ``locate_rows`` finds each row's record batch as a binary search would, whatever the
order of the rows; ``gather_payloads`` copies exactly the bytes each row's offsets span."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer._core.core import gather_payloads, locate_rows


@st.composite
def batches_and_rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    sizes = draw(st.lists(st.integers(1, 50), min_size=1, max_size=40))
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    end = int(np.sum(sizes))
    rows = draw(st.lists(st.integers(0, end - 1), max_size=200))
    if draw(st.booleans()):
        rows.sort()
    return firsts, np.asarray(rows, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(case=batches_and_rows())
def test_locate_rows_is_a_binary_search(case: tuple[np.ndarray, np.ndarray]) -> None:
    firsts, rows = case
    part, in_batch, batches = locate_rows(rows, firsts)
    want = np.searchsorted(firsts, rows, "right") - 1
    assert len(set(batches.tolist())) == batches.shape[0]  # each batch numbered once
    np.testing.assert_array_equal(batches[part], want)
    np.testing.assert_array_equal(in_batch, rows - firsts[want])
    # numbered in the order first met
    assert batches.tolist() == list(dict.fromkeys(want.tolist()))


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=20), min_size=1,
                      max_size=5),
    data=st.data(),
)
def test_gather_payloads_copies_what_each_row_spans(
    payloads: list[list[bytes]], data: st.DataObject
) -> None:
    parts = []
    for rows in payloads:
        skip = data.draw(st.integers(0, 3))  # offsets need not start at 0
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in rows])]).astype(np.int64) + skip
        parts.append((offsets, np.frombuffer(bytes(skip) + b"".join(rows), np.uint8)))
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(payloads) - 1), st.integers(0, 19)),
                               max_size=60))
    picks = [(p, r % len(payloads[p])) for p, r in picks]
    which = np.asarray([p for p, _ in picks], dtype=np.int64)
    row = np.asarray([r for _, r in picks], dtype=np.int64)
    offsets, blob = gather_payloads(parts, which, row)
    assert blob is not None
    got = [blob[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(picks))]
    assert got == [payloads[p][r] for p, r in picks]
    sizes, nothing = gather_payloads(parts, which, row, False)
    assert nothing is None
    np.testing.assert_array_equal(sizes, offsets)


def test_a_row_that_is_not_there_is_an_error_not_a_read_out_of_bounds() -> None:
    parts = [(np.array([0, 2], np.int64), np.frombuffer(b"ab", np.uint8))]
    with pytest.raises(IndexError, match="row 1 of part 0"):
        gather_payloads(parts, np.array([0], np.int64), np.array([1], np.int64))
    with pytest.raises(IndexError, match="part 1"):
        gather_payloads(parts, np.array([1], np.int64), np.array([0], np.int64))
