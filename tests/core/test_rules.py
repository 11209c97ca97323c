"""The batch rules of the core (orderer/_core/rules.pyx): each rule has one message, naming the
field and the fragment, whoever checks it (the core's submit and replay, or a caller through
check_fragment_rules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orderer._core.core import OrdererCore, check_fragment_rules
from orderer.errors import InterfaceError

U64 = np.uint64
TS = np.array([1, 2, 3, 4], dtype=U64)
OFFSETS = np.array([0, 2, 4, 6, 8], dtype=U64)
NO_PAYLOADS = np.zeros(0, dtype=U64)


def _core() -> OrdererCore:
    return OrdererCore(0.0, 0.0, 1.0, float("inf"), False, 10**9, 10**8, 10**9, 10**8)


def _submit(core: OrdererCore, ts: np.ndarray, offsets: np.ndarray) -> None:
    n = len(ts)
    payload = np.zeros(int(offsets[-1]) if len(offsets) else 0, dtype=np.uint8)
    core.submit(0.0, np.ones(n, np.uint32), ts, np.zeros(n, np.uint32), offsets, payload)


def test_a_batch_keeping_the_rules_passes() -> None:
    check_fragment_rules(TS, OFFSETS, 10)
    check_fragment_rules(TS, NO_PAYLOADS, 10)  # no payloads
    check_fragment_rules(np.zeros(0, dtype=U64), NO_PAYLOADS, 10)
    check_fragment_rules(TS, np.array([0, 2, 4, 16, 18], dtype=U64), 12)  # 12 bytes: the limit


def test_the_first_fragment_breaking_a_rule_is_named() -> None:
    ts = np.array([1, 2, 3, 2**64 - 1], dtype=U64)
    with pytest.raises(InterfaceError, match=r"^payload_offsets: fragment 1 "):
        check_fragment_rules(ts, np.array([0, 2, 1, 6, 8], dtype=U64), 10)
    with pytest.raises(InterfaceError, match=r"^timestamps: fragment 3 "):
        check_fragment_rules(ts, OFFSETS, 10)


@pytest.mark.parametrize(
    ("ts", "offsets", "message"),
    [
        (
            np.array([1, 2, 2**64 - 1, 4], dtype=U64),
            OFFSETS,
            "timestamps: fragment 2 has 2**64-1, reserved for +infinity",
        ),
        (
            TS,
            np.array([0, 2, 1, 6, 8], dtype=U64),
            "payload_offsets: fragment 1 ends at 1, before it starts at 2",
        ),
        (
            TS,
            np.array([0, 2, 4, 16, 18], dtype=U64),
            "payload: fragment 2 has 12 bytes, above the limit of 10",
        ),
        (TS, np.array([0, 2], dtype=U64), "payload_offsets has 2 entries, expected 5"),
    ],
)
def test_each_rule_has_one_message(ts: np.ndarray, offsets: np.ndarray, message: str) -> None:
    with pytest.raises(InterfaceError) as caught:
        check_fragment_rules(ts, offsets, 10)
    assert str(caught.value).startswith(message), caught.value


def _replay_two(core: Any, kind: np.ndarray) -> None:
    """Replay two records of source 1 at t=0 with timestamps 1 and 2**64-1."""
    core.replay(
        kind,
        np.zeros(2),
        np.ones(2, np.uint32),
        np.array([1, 2**64 - 1], U64),
        np.zeros(2, np.uint32),
        np.zeros(3, U64),
        np.zeros(0, np.uint8),
    )


def test_the_core_raises_the_same_messages() -> None:
    with pytest.raises(InterfaceError) as direct:
        check_fragment_rules(np.array([1, 2**64 - 1], dtype=U64), NO_PAYLOADS, 10)
    with pytest.raises(InterfaceError) as submitted:
        _submit(_core(), np.array([1, 2**64 - 1], dtype=U64), np.zeros(3, dtype=U64))
    assert str(submitted.value) == str(direct.value)
    with pytest.raises(InterfaceError) as replayed:
        _replay_two(_core(), kind=np.zeros(2, np.uint8))
    assert str(replayed.value) == str(direct.value)
    with pytest.raises(InterfaceError) as backwards:
        _submit(_core(), np.array([1, 2], dtype=U64), np.array([0, 5, 3], dtype=U64))
    assert str(backwards.value) == "payload_offsets: fragment 1 ends at 3, before it starts at 5"


def test_the_reserved_timestamp_is_a_watermark_in_a_replay() -> None:
    core = _core()
    _replay_two(core, kind=np.array([0, 1], np.uint8))
    assert core.counters()["totals"]["received"] == 1


@pytest.mark.parametrize(("kinds", "times", "values"), [(1, 2, 2), (2, 2, 1), (2, 3, 2)])
def test_a_replay_with_columns_of_different_lengths_is_refused_before_it_is_read(
    kinds: int, times: int, values: int
) -> None:
    """The core reads the columns without bounds checks: a short one must be refused first."""
    core = _core()
    with pytest.raises(InterfaceError, match="entries, t has"):
        core.replay(
            np.zeros(kinds, np.uint8),
            np.zeros(times),
            np.ones(values, np.uint32),
            np.arange(values, dtype=U64),
            np.zeros(values, np.uint32),
            np.zeros(values + 1, U64),
            np.zeros(0, np.uint8),
        )
    assert core.counters()["totals"]["received"] == 0
