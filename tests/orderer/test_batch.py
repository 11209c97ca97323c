"""Concatenating columnar batches: payload offsets are rebased, slices keep only their bytes."""

from __future__ import annotations

import numpy as np

from orderer.batch import EmittedBatch, FragmentBatch, concat_payloads


def _payloads(batch: FragmentBatch) -> list[bytes]:
    offsets = batch.payload_offsets
    return [
        batch.payload[int(offsets[i]) : int(offsets[i + 1])].tobytes() for i in range(len(batch))
    ]


def test_fragment_batches_concatenate_with_rebased_payloads() -> None:
    a = FragmentBatch.from_arrays(1, [1, 2], payloads=[b"a", b"bcd"])
    b = FragmentBatch.from_arrays(2, [3], [7], payloads=[b"ef"])
    joined = FragmentBatch.concat([a, b])
    assert joined.source.tolist() == [1, 1, 2]
    assert joined.timestamp.tolist() == [1, 2, 3]
    assert joined.barrier.tolist() == [0, 0, 7]
    assert joined.payload_offsets.tolist() == [0, 1, 4, 6]
    assert _payloads(joined) == [b"a", b"bcd", b"ef"]
    assert FragmentBatch.concat([a]) is a


def test_sliced_parts_keep_only_their_own_bytes() -> None:
    blob = np.frombuffer(b"xxABCyyDEz", dtype=np.uint8)
    offsets, payload = concat_payloads(
        [
            (np.array([2, 3, 5], dtype=np.uint64), blob),  # "A", "BC"
            (np.array([7, 9], dtype=np.uint64), blob),  # "DE"
            (np.array([0, 0], dtype=np.uint64), blob),  # an empty payload
        ]
    )
    assert offsets.tolist() == [0, 1, 3, 5, 5]
    assert payload.tobytes() == b"ABCDE"


def test_emitted_batches_keep_the_first_sequence() -> None:
    first = EmittedBatch.empty(10)
    joined = EmittedBatch.concat([first, first])
    assert joined.first_seq == 10
    assert len(joined) == 0
    assert joined.payload_offsets.tolist() == [0]


def test_slices_rebase_payloads_and_copies_own_their_memory() -> None:
    batch = FragmentBatch.from_arrays(4, [1, 2, 3, 4], payloads=[b"a", b"bc", b"", b"def"])
    tail = batch.slice(1)
    assert tail.timestamp.tolist() == [2, 3, 4]
    assert tail.payload_offsets.tolist() == [0, 2, 2, 5]
    assert _payloads(tail) == [b"bc", b"", b"def"]
    middle = batch.slice(1, 3)
    assert _payloads(middle) == [b"bc", b""]
    assert np.shares_memory(middle.payload, batch.payload)

    emitted = EmittedBatch(
        first_seq=10,
        t=np.array([0.5, 0.5, 0.6]),
        source=np.array([1, 2, 1], dtype=np.uint32),
        timestamp=np.array([5, 6, 7], dtype=np.uint64),
        barrier=np.zeros(3, dtype=np.uint32),
        late=np.array([False, True, False]),
        payload_offsets=np.array([0, 1, 3, 6], dtype=np.uint64),
        payload=np.frombuffer(b"abcdef", dtype=np.uint8),
    )
    part = emitted.slice(1, 3)
    assert part.first_seq == 11
    assert [part.payload_of(i) for i in range(len(part))] == [b"bc", b"def"]
    owned = part.copy()
    assert owned.first_seq == 11 and owned.late.tolist() == [True, False]
    assert [owned.payload_of(i) for i in range(len(owned))] == [b"bc", b"def"]
    for name in ("t", "source", "timestamp", "barrier", "late", "payload_offsets", "payload"):
        assert not np.shares_memory(getattr(owned, name), getattr(emitted, name)), name
