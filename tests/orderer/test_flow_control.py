"""Flow control: XOFF/XON per queue and globally, as pause/resume signals per source."""

from __future__ import annotations

import numpy as np

from orderer import FlowSignal, FragmentBatch, Orderer, SimulatedClock


def _orderer(**flow: int) -> Orderer:
    return Orderer(
        {"build_window": 10, "startup_delay": 0, "sources": [1, 2, 3, 4], "flow_control": flow},
        clock=SimulatedClock(),
    )


def _send(orderer: Orderer, source: int, first: int, count: int, now: float) -> None:
    orderer.submit(
        FragmentBatch.from_arrays(source=source, timestamp=np.arange(first, first + count)), now=now
    )


def test_queue_xoff_above_threshold_and_xon_below_the_low_one() -> None:
    orderer = _orderer(queue_xoff=10, queue_xon=3, global_xoff=1000, global_xon=500)
    _send(orderer, 1, 0, 10, now=0.0)  # 10 queued: not above 10 yet
    assert orderer.take_flow_signals() == []
    _send(orderer, 1, 10, 1, now=0.1)  # 11 > 10: XOFF
    assert orderer.take_flow_signals() == [FlowSignal(1, True)]
    # source 4 is declared and silent: only the window drains source 1, one arrival at a time
    orderer.advance(now=10.0)  # the first batch (10 fragments) has waited the window
    assert orderer.queued == 1
    assert orderer.take_flow_signals() == [FlowSignal(1, False)]
    assert orderer.source_states()[1]["paused"] is False


def test_hysteresis_keeps_the_pause_between_the_thresholds() -> None:
    orderer = _orderer(queue_xoff=10, queue_xon=3, global_xoff=1000, global_xon=500)
    _send(orderer, 1, 0, 5, now=0.0)
    _send(orderer, 1, 5, 6, now=1.0)  # 11 queued: XOFF
    assert orderer.take_flow_signals() == [FlowSignal(1, True)]
    orderer.advance(now=10.0)  # first 5 drain, 6 remain: still above XON (3)
    assert orderer.queued == 6
    assert orderer.take_flow_signals() == []
    orderer.advance(now=11.0)
    assert orderer.queued == 0
    assert orderer.take_flow_signals() == [FlowSignal(1, False)]


def test_global_xoff_spares_the_sources_that_hold_the_output_back() -> None:
    orderer = _orderer(queue_xoff=1000, queue_xon=500, global_xoff=25, global_xon=15)
    _send(orderer, 1, 0, 10, now=0.0)
    _send(orderer, 2, 0, 10, now=0.0)
    assert orderer.take_flow_signals() == []
    _send(orderer, 3, 0, 10, now=0.0)  # 30 queued > 25; source 4 is empty: window rule
    assert orderer.globally_paused
    signals = orderer.take_flow_signals()
    assert sorted(signals, key=lambda s: s.source) == [
        FlowSignal(1, True),
        FlowSignal(2, True),
        FlowSignal(3, True),
    ]
    # source 4, the one everybody waits for, is never paused
    assert orderer.source_states()[4]["paused"] is False
    orderer.advance(now=10.0)
    assert not orderer.globally_paused
    assert sorted(orderer.take_flow_signals(), key=lambda s: s.source) == [
        FlowSignal(1, False),
        FlowSignal(2, False),
        FlowSignal(3, False),
    ]


def test_global_xoff_does_not_pause_the_source_at_the_mark() -> None:
    orderer = Orderer(
        {
            "build_window": 10,
            "startup_delay": 0,
            "flow_control": {"global_xoff": 25, "global_xon": 15},
        },
        clock=SimulatedClock(),
    )
    _send(orderer, 1, 100, 15, now=0.0)  # alone: emitted at once by the mark rule
    _send(orderer, 2, 0, 1, now=0.1)  # source 2 now holds the mark low at 0
    _send(orderer, 1, 200, 30, now=0.2)  # source 1 queues 30 above the mark
    assert orderer.globally_paused
    paused = {s.source: s.paused for s in orderer.take_flow_signals()}
    assert paused == {1: True}
    assert orderer.source_states()[2]["paused"] is False


def test_memory_is_given_back_after_a_backlog_drains() -> None:
    orderer = _orderer(queue_xoff=10**6, queue_xon=10, global_xoff=10**7, global_xon=10)
    _send(orderer, 1, 0, 200_000, now=0.0)
    held = orderer.memory_bytes()
    assert held >= 200_000 * 28
    orderer.advance(now=10.0)
    assert orderer.queued == 0
    assert orderer.memory_bytes() < held / 100
