"""The arrival-log rows of taken intake passes (:func:`orderer.service.intake.arrival_records`,
one compiled call a record batch: ``orderer/_core/arrival_rows.pyx``) against the numpy join it
replaced (:func:`reference`, kept here as the specification).

On random passes (batches of one source with sequence numbers, of several sources without,
watermarks and ends of source between them, acks only, batches whose payload offsets start
above 0 in a larger payload, empty payloads, columns that are strided views) every column of the
pieces put together is the same, dtype included; each piece's ``sequence`` and ``sequenced`` are
None as the join's would be; a batch with ``ALONE_BYTES`` of payload or more is a piece of its
own whose payload is the batch's own memory (no copy).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch, concat_payloads
from orderer.errors import InternalOrdererError
from orderer.service import intake as intake_module
from orderer.service.intake import Intake, IntakePass, _Marker, arrival_records

SOAK = bool(os.environ.get("EVB_SOAK"))


def reference(passes: Sequence[tuple[float, IntakePass]]) -> ArrivalRecords:
    """The rows as numpy joined them: column by column, every row of a batch with its pass's
    time, its batch's first sequence plus its place (from 0 when unsequenced)."""
    kinds: list[int] = []
    times: list[float] = []
    lengths: list[int] = []
    firsts: list[int] = []
    sequenced: list[bool] = []
    source: list[npt.NDArray[np.uint32]] = []
    value: list[npt.NDArray[np.uint64]] = []
    barrier: list[npt.NDArray[np.uint32]] = []
    payloads: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]] = []
    for t, taken in passes:
        sequences = iter(taken.sequences)
        for row in taken.rows():
            times.append(t)
            if isinstance(row, _Marker):
                marker = ArrivalRecords.marker(row.kind, row.source, row.value)
                kinds.append(row.kind)
                lengths.append(1)
                firsts.append(0)
                sequenced.append(False)
                source.append(marker.source)
                value.append(marker.value)
                barrier.append(marker.barrier)
                payloads.append((marker.payload_offsets, marker.payload))
                continue
            first = next(sequences)
            kinds.append(ArrivalKind.FRAGMENT)
            lengths.append(len(row))
            firsts.append(0 if first is None else first)
            sequenced.append(first is not None)
            source.append(row.source)
            value.append(row.timestamp)
            barrier.append(row.barrier)
            payloads.append((row.payload_offsets, row.payload))
    n = np.asarray(lengths, dtype=np.int64)
    start = np.cumsum(n) - n
    total = int(n.sum())
    sequence = (
        np.arange(total, dtype=np.uint64)
        - np.repeat(start.astype(np.uint64), n)
        + np.repeat(np.asarray(firsts, dtype=np.uint64), n)
    )
    carries = np.repeat(np.asarray(sequenced, dtype=np.bool_), n)
    offsets, payload = concat_payloads(payloads)
    return ArrivalRecords(
        kind=np.repeat(np.asarray(kinds, dtype=np.uint8), n),
        t=np.repeat(np.asarray(times, dtype=np.float64), n),
        source=np.concatenate(source),
        value=np.concatenate(value),
        barrier=np.concatenate(barrier),
        payload_offsets=offsets,
        payload=payload,
        sequence=sequence if carries.any() else None,
        sequenced=None if carries.all() else carries,
    )


def joined(pieces: list[ArrivalRecords]) -> ArrivalRecords:
    """The pieces as one, with the join's rule for ``sequence`` and ``sequenced`` (each piece
    checked to keep that rule itself)."""
    carries = []
    for piece in pieces:
        n = len(piece)
        row_carries = (
            np.zeros(n, np.bool_) if piece.sequence is None
            else np.ones(n, np.bool_) if piece.sequenced is None
            else piece.sequenced
        )
        assert (piece.sequence is None) == (not row_carries.any())
        assert (piece.sequenced is None) == bool(row_carries.all())
        carries.append(row_carries)
    carried = np.concatenate(carries)
    sequence = np.concatenate(
        [p.sequence if p.sequence is not None else np.zeros(len(p), np.uint64) for p in pieces]
    )
    offsets, payload = concat_payloads([(p.payload_offsets, p.payload) for p in pieces])
    return ArrivalRecords(
        np.concatenate([p.kind for p in pieces]),
        np.concatenate([p.times() for p in pieces]),
        np.concatenate([p.source for p in pieces]),
        np.concatenate([p.value for p in pieces]),
        np.concatenate([p.barrier for p in pieces]),
        offsets,
        payload,
        sequence if carried.any() else None,
        None if carried.all() else carried,
    )


def uncarried_zeroed(records: ArrivalRecords) -> ArrivalRecords:
    """The records with the sequence of rows that carry none set to 0 (the join gives them
    their place in their batch; a piece without any gives them nothing)."""
    if records.sequence is None or records.sequenced is None:
        return records
    return dataclasses.replace(
        records, sequence=np.where(records.sequenced, records.sequence, np.uint64(0))
    )


def assert_same(got: ArrivalRecords, want: ArrivalRecords) -> None:
    for name in ArrivalRecords.__dataclass_fields__:
        g, w = getattr(got, name), getattr(want, name)
        if w is None:
            assert g is None, name
            continue
        assert g is not None, name
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


# ------------------------------------------------------------------ random passes

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)


def _strided(column: npt.NDArray, strided: bool) -> npt.NDArray:
    """The column itself, or the same values as a view with a stride of two."""
    if not strided:
        return column
    doubled = np.empty(2 * column.shape[0], dtype=column.dtype)
    doubled[::2] = column
    return doubled[::2]


@st.composite
def batches(draw: st.DrawFn) -> tuple[FragmentBatch, int | None]:
    """A batch and its first sequence: one source with a sequence, or several without;
    payloads packed after ``skip`` bytes of a larger one (offsets not from 0), with bytes
    after them too."""
    n = draw(st.integers(0, 6))
    sequenced = draw(st.booleans())
    if sequenced:
        source = np.full(n, draw(U32), dtype=np.uint32)
        first: int | None = draw(U64)
    else:
        source = np.asarray(draw(st.lists(U32, min_size=n, max_size=n)), dtype=np.uint32)
        first = None
    timestamp = np.asarray(draw(st.lists(U64, min_size=n, max_size=n)), dtype=np.uint64)
    barrier = np.asarray(draw(st.lists(U32, min_size=n, max_size=n)), dtype=np.uint32)
    sizes = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    skip, tail = draw(st.integers(0, 7)), draw(st.integers(0, 3))
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(np.asarray(sizes, dtype=np.uint64), out=offsets[1:])
    offsets += np.uint64(skip)
    payload = np.frombuffer(draw(st.binary(min_size=skip + sum(sizes) + tail,
                                           max_size=skip + sum(sizes) + tail)), dtype=np.uint8)
    strided = draw(st.booleans()) and draw(st.booleans())
    batch = FragmentBatch(
        _strided(source, strided), _strided(timestamp, strided), barrier, offsets, payload
    )
    return batch, first


@st.composite
def intake_passes(draw: st.DrawFn) -> list[tuple[float, IntakePass]]:
    """Passes taken from an :class:`Intake` fed batches, markers and acks in random order."""
    passes = []
    for _ in range(draw(st.integers(0, 4))):
        intake = Intake()
        for step in draw(st.lists(st.sampled_from("bbbwea"), max_size=8)):
            if step == "b":
                intake.add_batch(*draw(batches()))
            elif step == "w":
                intake.add_watermark(draw(U32), draw(U64))
            elif step == "e":
                intake.add_end_of_source(draw(U32))
            else:
                intake.owe_ack(None, draw(U32), draw(U64))
        t = draw(st.floats(0, 1e9, allow_nan=False))
        passes.append((t, intake.take()))
    return passes


@settings(
    max_examples=6000 if SOAK else 400,
    derandomize=not SOAK,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(passes=intake_passes(), alone=st.sampled_from([intake_module.ALONE_BYTES, 1, 6]))
def test_rows_are_the_numpy_join(passes: list[tuple[float, IntakePass]], alone: int) -> None:
    kept, intake_module.ALONE_BYTES = intake_module.ALONE_BYTES, alone
    try:
        try:
            want = reference(passes)
        except ValueError:  # no row at all: numpy has nothing to concatenate
            with pytest.raises(ValueError):
                arrival_records(passes)
            return
        pieces = arrival_records(passes)
        if alone == kept:  # nothing this small is alone: one piece
            assert len(pieces) == 1
            assert_same(pieces[0], want)
        assert_same(uncarried_zeroed(joined(pieces)), uncarried_zeroed(want))
        large = [
            row for _, taken in passes for row in taken.rows()
            if isinstance(row, FragmentBatch) and row.payload.shape[0] >= alone
        ]
        alone_pieces = [
            p for p in pieces
            if p.payload.shape[0] and any(np.shares_memory(p.payload, b.payload) for b in large)
        ]
        assert len(alone_pieces) == sum(
            1 for b in large if int(b.payload_offsets[-1]) > int(b.payload_offsets[0])
        )
    finally:
        intake_module.ALONE_BYTES = kept


def test_no_rows_is_an_error_as_before() -> None:
    """No pass, or passes with acks only: a ``ValueError``, as numpy's join gave (the service
    never joins passes without rows)."""
    acks_only = Intake()
    acks_only.owe_ack(None, 1, 5)
    for passes in ([], [(1.0, acks_only.take())]):
        with pytest.raises(ValueError):
            reference(passes)
        with pytest.raises(ValueError):
            arrival_records(passes)


def test_a_batch_whose_offsets_pass_its_payload_is_refused() -> None:
    """Only the bytes the offsets span are read: offsets past the payload are a bug, told,
    never read out of bounds."""
    intake = Intake()
    batch = FragmentBatch.from_arrays(3, [1, 2], payload_offsets=[0, 4, 9], payload=b"12345678")
    intake.add_batch(batch, 0)
    with pytest.raises(InternalOrdererError, match=r"payload offsets 0\.\.9"):
        arrival_records([(1.0, intake.take())])
