"""The source client's routing over several orderers (orderer.client.routing), against a small
readable oracle of docs/scale-out.md's table, whatever the chunking of a source's batches."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.batch import FragmentBatch
from orderer.client.routing import SourceRouting
from orderer.replay.slicing import Slicing


def oracle(
    slicing: Slicing, timestamps: list[int], barriers: list[int]
) -> tuple[dict[int, list[int]], dict[int, int | None]]:
    """Fragment by fragment: which rows each orderer gets, and the highest crossing watermark
    each is owed in the end."""
    n, t = slicing.orderers, slicing.slice_ticks
    rows: dict[int, list[int]] = {k: [] for k in range(n)}
    owed: dict[int, int | None] = {k: None for k in range(n)}
    top = None
    for i, (ts, barrier) in enumerate(zip(timestamps, barriers, strict=True)):
        s = ts // t
        if barrier:
            for k in range(n):
                rows[k].append(i)
            continue
        rows[s % n].append(i)
        if top is None or s > top:
            top = s
            for k in range(n):
                if k != s % n:
                    owed[k] = max(owed[k] or 0, s * t)
    return rows, owed


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 5),
    t=st.integers(1, 50),
    steps=st.lists(
        st.tuples(st.integers(-20, 60), st.sampled_from([0, 0, 0, 0, 7])), min_size=1, max_size=200
    ),
    cuts=st.lists(st.integers(1, 40), min_size=1, max_size=20),
)
def test_each_fragment_goes_to_its_owner_once_whatever_the_chunking(
    n: int, t: int, steps: list[tuple[int, int]], cuts: list[int]
) -> None:
    slicing = Slicing(n, t)
    timestamps = np.maximum(np.cumsum([d for d, _ in steps]), 0).tolist()  # mostly rising
    barriers = [b for _, b in steps]
    payloads = [i.to_bytes(4, "little") for i in range(len(steps))]  # the row, to find it
    routing = SourceRouting(slicing)
    got: dict[int, list[int]] = {k: [] for k in range(n)}
    owed: dict[int, int | None] = {k: None for k in range(n)}
    start, c = 0, 0
    while start < len(steps):
        stop = min(len(steps), start + cuts[c % len(cuts)])
        c += 1
        batch = FragmentBatch.from_arrays(
            source=3,
            timestamp=timestamps[start:stop],
            barrier=barriers[start:stop],
            payloads=payloads[start:stop],
        )
        for routed in routing.route(3, batch):
            if routed.part is not None:
                part = routed.part
                got[routed.orderer] += [
                    int.from_bytes(part.payload[4 * i : 4 * i + 4].tobytes(), "little")
                    for i in range(len(part))
                ]
                # an ordinary fragment's owner is the orderer it went to
                ordinary = part.barrier == 0
                assert (slicing.owner(part.timestamp[ordinary]) == routed.orderer).all()
            if routed.watermark is not None:
                assert n > 1
                owed[routed.orderer] = max(owed[routed.orderer] or 0, routed.watermark)
        start = stop
    rows, expected_owed = oracle(slicing, timestamps, barriers)
    assert got == rows
    if n > 1:
        assert owed == expected_owed
    ordinary_rows = [i for i, b in enumerate(barriers) if not b]
    every = sorted(i for k in range(n) for i in got[k] if not barriers[i])
    assert every == ordinary_rows  # each ordinary fragment exactly once


def test_one_orderer_gets_every_batch_unchanged() -> None:
    batch = FragmentBatch.from_arrays(source=1, timestamp=[5, 3, 9], barrier=[0, 2, 0])
    (routed,) = SourceRouting(Slicing(1, 10)).route(1, batch)
    assert routed.part is batch and routed.orderer == 0 and routed.watermark is None
