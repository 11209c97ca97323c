"""``Orderer.submit_batches``: the batches of one intake pass in one call, which the core takes
in without the GIL. It must be exactly ``submit`` of each batch in turn, refuse a bad batch
before anything is taken in, and let other Python threads run while it works."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from orderer import FragmentBatch, Orderer, OrdererConfig
from orderer.errors import InterfaceError

CONFIG = OrdererConfig(build_window=0.5, startup_delay=0.0, sources=(1, 2, 3))


def _batches(seed: int, count: int) -> list[FragmentBatch]:
    """Batches of three sources with jittered, sometimes out-of-order timestamps, a barrier now
    and then, and payloads of varied sizes."""
    rng = np.random.default_rng(seed)
    batches = []
    for k in range(count):
        source = int(rng.integers(1, 4))
        n = int(rng.integers(1, 40))
        ts = np.sort(rng.integers(0, 10_000, n)).astype(np.uint64) + np.uint64(100 * k)
        if rng.random() < 0.2:
            ts = rng.permutation(ts)
        barriers = (rng.random(n) < 0.02).astype(np.uint32)
        payloads = [bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))
                    for _ in range(n)]
        batches.append(FragmentBatch.from_arrays(source, ts, barrier=barriers, payloads=payloads))
    return batches


def _output(orderer: Orderer) -> list[tuple[int, int, int, bool, float, bytes]]:
    emitted = orderer.take_emitted()
    return [
        (int(emitted.source[i]), int(emitted.timestamp[i]), int(emitted.barrier[i]),
         bool(emitted.late[i]), float(emitted.t[i]), emitted.payload_of(i))
        for i in range(len(emitted))
    ]


@pytest.mark.parametrize("seed", range(5))
def test_submit_batches_is_submit_of_each_in_turn(seed: int) -> None:
    batches = _batches(seed, 120)
    one_by_one, together = Orderer(CONFIG), Orderer(CONFIG)
    now = 1.0
    for start in range(0, len(batches), 7):  # passes of 7 batches, each at its own time
        group = batches[start : start + 7]
        for batch in group:
            one_by_one.submit(batch, now=now)
        together.submit_batches(group, now=now)
        now += 0.3
    for orderer in (one_by_one, together):
        orderer.end_run(now=now)
    assert _output(together) == _output(one_by_one)
    assert together.counters() == one_by_one.counters()


def test_a_bad_batch_refuses_the_whole_call_and_changes_nothing() -> None:
    orderer = Orderer(CONFIG)
    good = FragmentBatch.from_arrays(1, [10, 20])
    bad = FragmentBatch.from_arrays(2, [2**64 - 1])  # the reserved timestamp
    with pytest.raises(InterfaceError, match="reserved"):
        orderer.submit_batches([good, bad], now=1.0)
    assert orderer.counters()["totals"]["received"] == 0
    orderer.submit_batches([good], now=1.0)
    assert orderer.counters()["totals"]["received"] == 2


def test_other_threads_run_while_the_core_takes_batches_in() -> None:
    """The longest pause of a Python thread counting while another thread's submit_batches
    runs for a few hundred milliseconds: with the GIL held all along it would be the whole
    call."""
    n = 400_000
    batches = [
        FragmentBatch.from_arrays(source, np.arange(n, dtype=np.uint64) * 3 + source)
        for source in (1, 2, 3)
    ] * 4
    orderer = Orderer(CONFIG)
    took: list[float] = []

    def take_in() -> None:
        began = time.perf_counter()
        orderer.submit_batches(batches, now=1.0)
        took.append(time.perf_counter() - began)

    worker = threading.Thread(target=take_in)
    last, longest = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert took and took[0] > 0.1, f"the call took {took}: too short to tell"
    assert longest < took[0] / 2, f"a pause of {longest:.3f} s in a call of {took[0]:.3f} s"
