"""Payload arenas of the core's queues: whatever path makes room (growth in place, repack in
place when payloads lie in queue order, repack into a fresh block after an out-of-order
insertion), every payload comes out intact and attached to its fragment."""

from __future__ import annotations

import numpy as np
import pytest

from orderer import FragmentBatch, Orderer, SimulatedClock


def _payload(source: int, timestamp: int) -> bytes:
    """Distinct per fragment, of varied length (some empty)."""
    size = (timestamp * 7 + source) % 41
    return (f"{source}:{timestamp};".encode() * 8)[:size]


def _batch(source: int, timestamps: list[int]) -> FragmentBatch:
    return FragmentBatch.from_arrays(
        source=source,
        timestamp=timestamps,
        payloads=[_payload(source, t) for t in timestamps],
    )


@pytest.mark.parametrize("out_of_order", [False, True])
def test_payloads_survive_growth_and_repacks(out_of_order: bool) -> None:
    orderer = Orderer(
        {"startup_delay": 0, "build_window": 1000, "sources": [1, 2]}, clock=SimulatedClock()
    )
    rng = np.random.default_rng(7)
    sent: dict[tuple[int, int], bytes] = {}
    now = 0.0
    slow = 0  # source 2's timestamps: it holds source 1 back, then lets it go step by step
    fast = 0
    emitted: list[tuple[int, int, bytes]] = []
    for step in range(400):
        now += 0.001
        # source 1 runs ahead: its queue (and arena) grows, then is popped from the head
        run = [t for t in range(fast, fast + int(rng.integers(50, 400))) if t % 7]  # gaps
        if out_of_order and step % 2 and fast > 100:
            # stragglers behind queued fragments (still above source 2): inserted in the
            # middle of the queue, so the arena no longer holds payloads in queue order
            gaps = {7 * ((fast - 1 - int(g)) // 7) for g in rng.integers(1, 60, size=3)}
            run = sorted(gaps - {t for s, t in sent if s == 1 and t >= fast - 70}) + run
        fast = max(fast, run[-1] + 1)
        orderer.submit(_batch(1, run), now=now)
        sent.update({(1, t): _payload(1, t) for t in run})
        if step % 3 == 0:
            slow = max(slow, fast - int(rng.integers(100, 3000)))
            orderer.submit(_batch(2, [slow]), now=now)
            sent[(2, slow)] = _payload(2, slow)
            slow += 1
        out = orderer.take_emitted()
        emitted += [
            (int(out.source[i]), int(out.timestamp[i]), out.payload_of(i)) for i in range(len(out))
        ]
        assert orderer.queued > 0 or step == 0
    orderer.end_run(now=now + 1)
    out = orderer.take_emitted()
    emitted += [
        (int(out.source[i]), int(out.timestamp[i]), out.payload_of(i)) for i in range(len(out))
    ]
    assert len(emitted) == len(sent)
    assert {(s, t): p for s, t, p in emitted} == sent
