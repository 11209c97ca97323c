"""Large outputs are handed over without a copy (the core gives its buffers to numpy): what
comes out must be the same as through the copying path, and the core must go on emitting into
fresh buffers afterwards."""

from __future__ import annotations

import numpy as np

from orderer import FragmentBatch, Orderer, OrdererConfig

N = 100_000  # above the hand-over threshold (65,536)


def _batch(source: int, first: int, n: int) -> FragmentBatch:
    ts = np.arange(first, first + n, dtype=np.uint64) * 2 + source
    payloads = [b"%d:%d" % (source, t) for t in ts.tolist()]
    return FragmentBatch.from_arrays(source, ts, payloads=payloads)


def _drain(sizes: list[int]) -> list[tuple[int, int, bytes]]:
    """Sources 1 and 2, one backlog per size, each released by a flush at end of run."""
    config = OrdererConfig(build_window=100.0, startup_delay=0.0, sources=(1, 2))
    orderer = Orderer(config)
    rows: list[tuple[int, int, bytes]] = []
    first, now = 0, 1.0
    for size in sizes:
        for source in (1, 2):
            orderer.submit(_batch(source, first, size), now=now)
        orderer.end_run(now=now + 0.5)
        emitted = orderer.take_emitted()
        assert emitted.first_seq == len(rows)
        rows += [
            (int(emitted.source[i]), int(emitted.timestamp[i]), emitted.payload_of(i))
            for i in range(len(emitted))
        ]
        first, now = first + size, now + 1.0
    return rows


def test_handed_over_output_equals_copied_output_and_emission_goes_on() -> None:
    big = _drain([N, 10, N])  # hand-over, copy (into fresh buffers), hand-over again
    small = _drain([N // 4] * 4 + [10] + [N // 4] * 4)  # copies only
    assert len(big) == len(small) == 2 * (2 * N + 10)
    assert sorted(big) == sorted(small)
    timestamps = [ts for _, ts, _ in big]
    assert timestamps == sorted(timestamps)
    assert all(payload == b"%d:%d" % (s, ts) for s, ts, payload in big)


def test_handed_over_arrays_outlive_the_orderer() -> None:
    orderer = Orderer(OrdererConfig(build_window=100.0, startup_delay=0.0, sources=(1,)))
    orderer.submit(_batch(1, 0, N), now=1.0)
    orderer.end_run(now=2.0)
    emitted = orderer.take_emitted()
    # handed over, not copied: the arrays are views of blocks the core allocated
    assert type(emitted.payload.base).__name__ == "_OwnedBlock"
    assert type(emitted.timestamp.base).__name__ == "_OwnedBlock"
    del orderer
    assert len(emitted) == N
    assert emitted.timestamp[-1] == (N - 1) * 2 + 1
    assert emitted.payload_of(N - 1) == b"1:%d" % ((N - 1) * 2 + 1)
    assert not emitted.late.any()
