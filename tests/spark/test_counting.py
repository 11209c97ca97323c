"""The counting under the spectrum, the coincidence matrix and the live totals
(:func:`orderer.spark.output.coincidence.counted` and the coincidences of
:func:`~orderer.spark.output.coincidence.pair_rows`) against a plain Python count, on both of their
paths: narrow key ranges (counted by ``bincount``) and wide ones (numbered by sorting), few sources
(events counted by source sets) and more than 62 (the incidence matrix)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.spark.output.coincidence import COINCIDENCE, counted, pair_rows, spectrum_axis


def _rows(parts: tuple[np.ndarray, ...]) -> Counter[tuple[int, ...]]:
    kind, a, b, c, value = (p.tolist() for p in parts)
    return Counter({(k, x, y, z): v for k, x, y, z, v in zip(kind, a, b, c, value, strict=True)})


@settings(max_examples=60)
@given(
    rows=st.integers(1, 3000),
    width=st.sampled_from([1, 2, 7, 300, 10**6, 2**40]),
    negative=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_counted_equals_a_plain_count(rows: int, width: int, negative: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    low = -(width // 2) if negative else 0
    keys = [rng.integers(low, low + width, rows) for _ in range(3)]
    expected = Counter((5, int(a), int(b), int(c)) for a, b, c in zip(*keys, strict=True))
    assert _rows(counted(5, *keys)) == expected


@pytest.mark.parametrize("sources", [1, 3, 62, 63, 150])
@pytest.mark.parametrize("span", [1, 10**6])
def test_coincidences_equal_a_plain_count_of_source_sets(sources: int, span: int) -> None:
    rng = np.random.default_rng(sources)
    ids = rng.choice(max(span, sources), sources, replace=False)  # narrow ids, or far apart
    events = [
        [int(s) for s in ids[rng.integers(0, sources, rng.integers(1, 6))]] for _ in range(2000)
    ]
    lists = pa.array(
        [[{"source": s, "timestamp": 10 * k} for k, s in enumerate(e)] for e in events],
        pa.list_(pa.struct([("source", pa.int64()), ("timestamp", pa.int64())])),
    )
    expected: Counter[tuple[int, ...]] = Counter()
    for event in events:
        for i in set(event):
            for j in set(event):
                expected[(COINCIDENCE, i, j, 0)] += 1
    _, coincidences = pair_rows(lists, spectrum_axis(100))
    assert _rows(coincidences) == expected
