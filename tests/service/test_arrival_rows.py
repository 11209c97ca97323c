"""The arrival-log rows of taken intake passes (:func:`orderer.service.intake.arrival_records`,
one compiled call: ``orderer/_core/arrival_rows.pyx``) against the numpy join it replaced
(:func:`reference`, kept here as the specification).

On random passes (batches of one source with sequence numbers, of several sources without,
watermarks and ends of source between them, acks only, batches whose payload offsets start
above 0 in a larger payload, empty payloads, columns that are strided views) every column is
the same, dtype included, and so is whether ``sequence`` and ``sequenced`` are None.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch, concat_payloads
from orderer.errors import InternalOrdererError
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
@given(passes=intake_passes())
def test_rows_are_the_numpy_join(passes: list[tuple[float, IntakePass]]) -> None:
    try:
        want = reference(passes)
    except ValueError:  # no row at all: numpy has nothing to concatenate
        with pytest.raises(ValueError):
            arrival_records(passes)
        return
    assert_same(arrival_records(passes), want)


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
