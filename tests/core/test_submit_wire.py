"""The compiled decoder of ``Submit`` messages (``orderer/_core/submit_wire.pyx`` and
``batch_fields.pyx``, through :func:`orderer.wire.submit.decode_submit`) against the protobuf
path it replaced: the protobuf runtime's parse of the same bytes, then the checks and the
deduplication the service made of the parsed message until the decoder took over
(:func:`reference` and :func:`reference_deduplicated`, kept here as the specification, with
``numpy``), and today's :func:`orderer.wire.convert.batch_from_pb`.

On random valid messages and hostile ones (truncated, bytes flipped, wrong wire types,
overlong varints and tags, unknown fields and groups, repeated fields and members of the oneof,
counts that disagree, reserved timestamps, undeclared sources, payloads too large or offsets
bent) all give the same columns, or the same ``InterfaceError`` text; wire data the runtime
cannot parse is refused by the decoder as malformed (an INVALID_ARGUMENT, never a crash).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from orderer._core.core import check_fragment_rules
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.batch import FragmentBatch
from orderer.errors import InterfaceError
from orderer.wire import convert, submit
from tests.soak import fuzz_settings

MALFORMED = "SubmitRequest: not a valid protobuf message"
LIMITS = (
    submit.BatchLimits(max_payload_bytes=64),
    submit.BatchLimits(max_payload_bytes=64, sources=frozenset({1, 2, 3})),
    submit.BatchLimits(max_payload_bytes=2**64 - 1, sources=frozenset()),
)


# ------------------------------------------------------------------ the protobuf path (spec)

_LE_U32 = np.dtype("<u4")
_LE_U64 = np.dtype("<u8")


def _packed(field: str, data: bytes, dtype: np.dtype, count: int | None) -> npt.NDArray[Any]:
    if len(data) % dtype.itemsize:
        raise InterfaceError(
            f"{field}: {len(data)} bytes is not a whole number of {dtype.itemsize}-byte values"
        )
    array = np.frombuffer(data, dtype=dtype)
    if count is not None and array.shape[0] != count:
        raise InterfaceError(
            f"{field}: {array.shape[0]} values for {count} fragments (arrays of different lengths)"
        )
    return array.astype(dtype.newbyteorder("="), copy=False)


def _declared(field: str, source: int, limits: submit.BatchLimits, hint: bool = True) -> None:
    if limits.sources is not None and source not in limits.sources:
        raise InterfaceError(
            f"{field}: {source} is not a declared source",
            hint=f"the server accepts only {sorted(limits.sources)}" if hint else None,
        )


def reference_batch(message: pb.FragmentBatch, limits: submit.BatchLimits) -> tuple[Any, ...]:
    """``convert.batch_from_pb`` as the service ran it on the protobuf runtime's message."""
    timestamp = _packed("timestamps", message.timestamps, _LE_U64, None)
    n = timestamp.shape[0]
    single: int | None = None
    first_sequence: int | None
    if message.sources:
        source = _packed("sources", message.sources, _LE_U32, n)
        if message.source:
            raise InterfaceError("source: set together with sources; give one or the other")
        if message.first_sequence:
            raise InterfaceError(
                "first_sequence: only single-source batches carry sequence numbers"
            )
        for each in np.unique(source).tolist():
            _declared("sources", each, limits)
        first_sequence = None
    else:
        single = message.source
        source = np.full(n, single, dtype=np.uint32)
        first_sequence = message.first_sequence
        if first_sequence + n > 2**64:
            raise InterfaceError(
                f"first_sequence: {first_sequence} + {n} fragments overflows uint64"
            )
        _declared("source", single, limits)
    if message.barrier_types:
        barrier = _packed("barrier_types", message.barrier_types, _LE_U32, n)
    else:
        barrier = np.zeros(n, dtype=np.uint32)
    if message.payload_offsets:
        offsets = _packed("payload_offsets", message.payload_offsets, _LE_U64, n + 1)
        if offsets[0] != 0:
            raise InterfaceError(f"payload_offsets: must start at 0, got {int(offsets[0])}")
        payload = np.frombuffer(message.payload, dtype=np.uint8)
    else:
        if message.payload:
            raise InterfaceError("payload: given without payload_offsets")
        offsets = np.zeros(0, dtype=np.uint64)
        payload = np.zeros(0, dtype=np.uint8)
    if offsets.shape[0] and int(offsets[-1]) != len(message.payload):
        raise InterfaceError(
            f"payload_offsets: last offset {int(offsets[-1])} is not the payload's length "
            f"{len(message.payload)}"
        )
    check_fragment_rules(timestamp, offsets, limits.max_payload_bytes)
    if not offsets.shape[0]:
        offsets = np.zeros(n + 1, dtype=np.uint64)
    return ("batch", source, timestamp, barrier, offsets, payload, single, first_sequence)


def reference(data: bytes, limits: submit.BatchLimits) -> tuple[Any, ...]:
    """What the protobuf path made of ``data``: an outcome to compare."""
    try:
        request = pb.SubmitRequest.FromString(data)
    except DecodeError:
        return ("malformed",)
    item = request.WhichOneof("item")
    try:
        if item == "batch":
            return reference_batch(request.batch, limits)
        if item == "watermark":
            _declared("watermark.source", request.watermark.source, limits, hint=False)
            return ("watermark", request.watermark.source, request.watermark.watermark)
        if item == "end_of_source":
            _declared("end_of_source.source", request.end_of_source.source, limits, hint=False)
            return ("end_of_source", request.end_of_source.source)
        raise InterfaceError("item: an empty SubmitRequest")
    except InterfaceError as error:
        return ("refused", str(error))


def compiled(data: bytes, limits: submit.BatchLimits) -> tuple[Any, ...]:
    """What the service's decoder makes of ``data``, as the same kind of outcome."""
    try:
        item = submit.decode_submit(data, limits)
    except InterfaceError as error:
        if str(error).startswith(MALFORMED):
            return ("malformed",)
        return ("refused", str(error))
    if isinstance(item, submit.WatermarkItem):
        return ("watermark", item.source, item.watermark)
    if isinstance(item, submit.EndOfSourceItem):
        return ("end_of_source", item.source)
    b = item.batch
    return ("batch", b.source, b.timestamp, b.barrier, b.payload_offsets, b.payload,
            item.source, item.first_sequence)  # fmt: skip


def _comparable(outcome: tuple[Any, ...]) -> tuple[Any, ...]:
    """Arrays as (dtype, values): equal outcomes compare equal."""
    return tuple(
        (value.dtype.str, value.tolist()) if isinstance(value, np.ndarray) else value
        for value in outcome
    )


def _same(data: bytes) -> None:
    for limits in LIMITS:
        expected = _comparable(reference(data, limits))
        assert _comparable(compiled(data, limits)) == expected, (data.hex(), limits)
        if expected[0] == "batch":  # the protobuf path of today's convert agrees too
            request = pb.SubmitRequest.FromString(data)
            again = convert.batch_from_pb(request.batch, limits)
            b = again.batch
            columns = (b.source, b.timestamp, b.barrier, b.payload_offsets, b.payload)
            assert _comparable(("batch", *columns, again.source, again.first_sequence)) == expected


# ------------------------------------------------------------------ the wire format, by hand


def _varint(value: int, pad: int = 0) -> bytes:
    """``value`` as a varint, ``pad`` bytes longer than it needs (overlong past 10 bytes)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte | (0x80 if pad else 0))
            break
        out.append(byte | 0x80)
    if pad:
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


_pads = st.sampled_from([0] * 60 + [1, 2, 4, 9, 10])  # 10: overlong (11 bytes)
_length_pads = st.sampled_from([0] * 60 + [1, 2, 4, 5])  # 5: overlong (a length: 6 bytes)
_wire_types = st.sampled_from([0, 1, 2, 3, 5] * 16 + [4, 6, 7])  # 4, 6, 7: malformed


@st.composite
def _tag(draw: st.DrawFn, number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire, pad=draw(st.sampled_from([0] * 100 + [1, 2, 4, 5])))


@st.composite
def _value(draw: st.DrawFn, wire: int, payload: bytes | int | None = None) -> bytes:
    """A value of wire type ``wire`` (``payload`` the bytes or integer when known)."""
    if wire == 0:
        value = payload if isinstance(payload, int) else draw(st.integers(0, 2**64 - 1))
        return _varint(value, pad=draw(_pads))
    if wire == 1:
        return draw(st.binary(min_size=8, max_size=8))
    if wire == 5:
        return draw(st.binary(min_size=4, max_size=4))
    if wire == 2:
        data = payload if isinstance(payload, bytes) else draw(st.binary(max_size=12))
        return _varint(len(data), pad=draw(_length_pads)) + data
    return b""  # a group is made by _unknown; an end of group, wire types 6 and 7: malformed


@st.composite
def _unknown(draw: st.DrawFn, depth: int = 0) -> bytes:
    """A field the message does not have (numbers past its own; group numbers are matched)."""
    number = draw(st.integers(8, 40) | st.sampled_from([2**29 - 1, 1000]))
    wire = draw(_wire_types)
    tag = draw(_tag(number, wire))
    if wire == 3:  # a group of unknown fields, ended by its own number (mostly)
        inner = b"".join(draw(st.lists(_unknown(depth + 1), max_size=3 if depth < 3 else 0)))
        end = draw(st.sampled_from([number] * 20 + [number + 1]))
        return tag + inner + draw(_tag(end, 4))
    return tag + draw(_value(wire))


_u64 = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 2, 2**64 - 1])


@st.composite
def _columns(draw: st.DrawFn) -> dict[int, bytes]:
    """Packed columns of a batch (by field number), mostly agreeing, sometimes not."""
    n = draw(st.integers(0, 6))

    def count() -> int:
        return n if draw(st.integers(0, 15)) else draw(st.integers(0, 7))

    def values(elements: st.SearchStrategy[int]) -> list[int]:
        size = count()
        return draw(st.lists(elements, min_size=size, max_size=size))

    columns = {3: np.asarray(values(_u64), "<u8").tobytes()}
    if draw(st.booleans()):
        sources = values(st.sampled_from([1, 2, 3, 7, 2**32 - 1]))
        columns[2] = np.asarray(sources, "<u4").tobytes()
    if draw(st.booleans()):
        columns[4] = np.asarray(values(st.integers(0, 2**32 - 1)), "<u4").tobytes()
    if draw(st.booleans()):
        lengths = values(st.integers(0, 80))
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        bend = draw(st.sampled_from(["none"] * 4 + ["start", "backwards", "end"]))
        if bend == "start":
            offsets[0] = draw(st.integers(1, 5))
        elif bend == "backwards" and len(offsets) > 2:
            offsets[1] = offsets[-1] + 1
        elif bend == "end":
            offsets[-1] += draw(st.integers(-3, 3))
        columns[6] = np.asarray(np.maximum(offsets, 0), "<u8").tobytes()
        columns[5] = draw(st.binary(min_size=int(max(offsets[-1], 0)),
                                    max_size=int(max(offsets[-1], 0)) + 1))  # fmt: skip
    elif draw(st.integers(0, 5)) == 0:
        columns[5] = draw(st.binary(min_size=1, max_size=4))
    for field in (2, 3, 4, 5, 6):  # a whole column of odd bytes now and then
        if draw(st.integers(0, 15)) == 0:
            columns[field] = draw(st.binary(max_size=20))
    return columns


@st.composite
def _batch(draw: st.DrawFn) -> bytes:
    """A FragmentBatch's wire bytes: its fields in any order, some repeated (the last wins),
    some with another wire type (an unknown field then), unknown fields between them."""
    fields: list[bytes] = []
    columns = draw(_columns())
    several = 2 in columns and draw(st.integers(0, 7))  # then mostly without source, sequence
    source = draw(st.sampled_from([0, 1, 2, 3, 7]) | st.integers(0, 2**64 - 1))
    first = draw(st.sampled_from([0, 0, 5]) | _u64)
    scalars = {1: 0 if several else source, 7: 0 if several else first}
    for number, value in list(columns.items()) + list(scalars.items()):
        if number in scalars and value == 0 and draw(st.booleans()):
            continue
        wire = 0 if number in scalars else 2
        for _ in range(draw(st.sampled_from([1] * 6 + [2]))):
            fields.append(draw(_tag(number, wire)) + draw(_value(wire, value)))
        if draw(st.integers(0, 12)) == 0:  # the same number with another wire type
            other = draw(st.sampled_from([w for w in (0, 1, 2, 5) if w != wire]))
            fields.append(draw(_tag(number, other)) + draw(_value(other)))
    fields += draw(st.lists(_unknown(), max_size=2))
    return b"".join(draw(st.permutations(fields)))


@st.composite
def _marker(draw: st.DrawFn, watermark: bool) -> bytes:
    fields = [draw(_tag(1, 0)) + draw(_value(0, draw(st.sampled_from([1, 2, 9]) | _u64)))]
    if watermark or draw(st.integers(0, 4)) == 0:
        fields.append(draw(_tag(2, 0)) + draw(_value(0, draw(_u64))))
    fields += draw(st.lists(_unknown(), max_size=1))
    return b"".join(draw(st.permutations(fields)))


@st.composite
def _request(draw: st.DrawFn) -> bytes:
    """A SubmitRequest's wire bytes: usually one member of the oneof, sometimes several (the
    last wins; the same member again merges) or none, unknown fields around."""
    parts: list[bytes] = []
    for _ in range(draw(st.sampled_from([1] * 8 + [0, 2, 3]))):
        member = draw(st.sampled_from([1, 1, 1, 2, 3]))
        body = draw(_batch()) if member == 1 else draw(_marker(member == 2))
        wire = 2 if draw(st.integers(0, 15)) else draw(st.sampled_from([0, 1, 5]))
        parts.append(draw(_tag(member, wire)) + draw(_value(wire, body)))
    parts += draw(st.lists(_unknown(), max_size=2))
    return b"".join(draw(st.permutations(parts)))


def damaged(draw: st.DrawFn, request: bytes, edits: int, longest: int) -> bytes:
    """``request`` with 1 to ``edits`` bytes flipped, cut off there or inserted (at most
    ``longest`` bytes at once). Also the service fuzzer's (tests/service/test_fuzz_submit.py)."""
    data = bytearray(request)
    for _ in range(draw(st.integers(1, edits))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=longest))
    return bytes(data)


@st.composite
def _hostile(draw: st.DrawFn) -> bytes:
    """A request's bytes cut short, with bytes flipped or inserted."""
    return damaged(draw, draw(_request()), edits=3, longest=3)


# ------------------------------------------------------------------------------ the tests


@fuzz_settings(1500)
@given(data=_request())
@example(data=b"")
@example(data=b"\x0a\x00")
@example(data=b"\x12\x00\x1a\x00")
def test_requests_decode_as_the_protobuf_path_decodes_them(data: bytes) -> None:
    _same(data)


@fuzz_settings(1500)
@given(data=_hostile() | st.binary(max_size=64))
# field number 0 inside a skipped group: upb reads it as any unknown field (a varint here, then
# a fixed64), where at a message's level it is malformed
@example(data=bytes.fromhex("0a0d2b00000100000000000000002c"))
@example(data=bytes.fromhex(
    "810100000000000000000a1f1a001200320800000000000000002b0022004100000100000000008001802c"
))
@example(data=bytes.fromhex("0a022b00"))
@example(data=bytes.fromhex("0a020000"))
def test_hostile_bytes_are_refused_or_decoded_as_the_protobuf_path_does(data: bytes) -> None:
    _same(data)


def test_a_valid_batch_comes_out_as_its_columns() -> None:
    """Not everything refused: a batch with payloads and barriers decodes to its columns (the
    generators above reach this kind of outcome too, but this one is certain)."""
    message = pb.SubmitRequest(
        batch=pb.FragmentBatch(
            source=2,
            first_sequence=40,
            timestamps=np.asarray([5, 3, 9], "<u8").tobytes(),
            barrier_types=np.asarray([0, 7, 0], "<u4").tobytes(),
            payload_offsets=np.asarray([0, 2, 2, 5], "<u8").tobytes(),
            payload=b"abcde",
        )
    )
    item = submit.decode_submit(message.SerializeToString(), LIMITS[1])
    assert isinstance(item, submit.IncomingBatch)
    assert (item.source, item.first_sequence) == (2, 40)
    assert item.batch.timestamp.tolist() == [5, 3, 9]
    assert item.batch.source.tolist() == [2, 2, 2]
    assert item.batch.barrier.tolist() == [0, 7, 0]
    assert item.batch.payload.tobytes() == b"abcde"
    _same(message.SerializeToString())


def test_nesting_is_refused_past_the_protobuf_runtimes_limit() -> None:
    """Unknown groups nested inside each other: accepted and refused at the same depths as the
    runtime (a deep message must not exhaust the decoder's stack either)."""
    for depth in (1, 50, 97, 98, 99, 100, 101, 5000):
        group = b"".join(_varint(9 << 3 | 3) for _ in range(depth))
        group += b"".join(_varint(9 << 3 | 4) for _ in range(depth))
        _same(group)
        _same(_varint(1 << 3 | 2) + _varint(len(group)) + group)


# ------------------------------------------------------------------ deduplication


def reference_deduplicated(data: bytes, sequences: dict[int, int]) -> tuple[Any, ...]:
    """The protobuf path, then the service's deduplication of a single-source batch against
    the next sequence expected of each source (``OrdererService.submit`` until the decoder
    took it over): ``(..., first sequence, next sequence, distinct sources)``."""
    outcome = reference(data, LIMITS[0])
    if outcome[0] != "batch":
        return outcome
    _, source, timestamp, barrier, offsets, payload, single, first = outcome
    batch = FragmentBatch(source, timestamp, barrier, offsets, payload)
    distinct = np.unique(source).tolist()
    if single is None:
        return (*outcome, None, distinct)
    n = len(batch)
    expected = sequences.get(single, 0)
    if n and first > expected:
        return ("refused", f"first_sequence: {first} leaves a gap; source {single} continues "
                f"at {expected} (resend from the last acknowledged sequence)")  # fmt: skip
    if n and first + n > expected:
        new, following = batch.slice(expected - first), first + n
    else:
        new, following = batch.slice(n), expected
    columns = (new.source, new.timestamp, new.barrier, new.payload_offsets, new.payload)
    return ("batch", *columns, single, expected, following, [single])


def compiled_deduplicated(data: bytes, sequences: dict[int, int]) -> tuple[Any, ...]:
    try:
        item = submit.decode_submit(data, LIMITS[0], sequences)
    except InterfaceError as error:
        return ("refused", str(error))
    assert isinstance(item, submit.IncomingBatch)
    b = item.batch
    columns = (b.source, b.timestamp, b.barrier, b.payload_offsets, b.payload)
    return ("batch", *columns, item.source, item.first_sequence, item.next_sequence,
            list(item.sources))  # fmt: skip


@st.composite
def _sequenced(draw: st.DrawFn) -> tuple[bytes, dict[int, int]]:
    """A good batch of source 1 or 2 (or of several sources) with payloads, and the sequences
    the service holds: ahead of it, behind it, inside it, or none for its source."""
    n = draw(st.integers(0, 6))
    lengths = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype("<u8")
    batch = pb.FragmentBatch(
        timestamps=np.asarray(draw(st.lists(st.integers(0, 99), min_size=n, max_size=n)),
                              "<u8").tobytes(),
        payload_offsets=offsets.tobytes() if n and draw(st.booleans()) else b"",
    )  # fmt: skip
    batch.payload = bytes(range(int(offsets[-1]))) if batch.payload_offsets else b""
    if n and draw(st.integers(0, 4)) == 0:
        sources = draw(st.lists(st.sampled_from([1, 2, 5]), min_size=n, max_size=n))
        batch.sources = np.asarray(sources, "<u4").tobytes()
    else:
        batch.source = draw(st.sampled_from([1, 2]))
        batch.first_sequence = draw(st.integers(0, 12) | st.sampled_from([2**64 - max(n, 1)]))
    table = draw(st.dictionaries(st.sampled_from([1, 2, 3]), st.integers(0, 20), max_size=3))
    return pb.SubmitRequest(batch=batch).SerializeToString(), table


@fuzz_settings(1000)
@given(case=_sequenced())
def test_resends_are_deduplicated_as_the_service_deduplicated_them(
    case: tuple[bytes, dict[int, int]],
) -> None:
    data, sequences = case
    before = dict(sequences)
    expected = _comparable(reference_deduplicated(data, sequences))
    assert _comparable(compiled_deduplicated(data, sequences)) == expected
    assert sequences == before  # read, never changed: the service moves it once taken in
