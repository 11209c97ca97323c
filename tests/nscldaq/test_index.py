"""The compiled walk of ring items and event-builder fragments (orderer/_core/nscldaq.pyx): where
it stops and why, checked against the tests' own writer, and the batches built on it."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from orderer._core import core
from orderer.batch import FragmentBatch
from orderer.nscldaq import format as fmt
from orderer.nscldaq.reader import RingItemReader
from tests.nscldaq import writer


def _good() -> tuple[bytes, list[bytes]]:
    """A RING_FORMAT item, a stamped and an unstamped item of odd sizes; the items."""
    items = [
        writer.ring_format(),
        writer.item(30, b"abc", 7, 2),
        writer.item(writer.PERIODIC_SCALERS, b"12345", None),
        writer.state_change(writer.BEGIN_RUN, 9, 2),
    ]
    return b"".join(items), items


def test_fields_gathered_in_the_walk_match_the_writer() -> None:
    data, items = _good()
    offset, size, item_type, has, ts, source, barrier, end, stop = core.index_ring_items(
        np.frombuffer(data, np.uint8)
    )
    starts = np.cumsum([0] + [len(i) for i in items[:-1]])
    assert offset.tolist() == starts.tolist()
    assert size.tolist() == [len(i) for i in items]
    assert item_type.tolist() == [12, 30, writer.PERIODIC_SCALERS, writer.BEGIN_RUN]
    assert has.tolist() == [False, True, False, True]
    stamped = [writer.body_header(items[1]), writer.body_header(items[3])]
    fields = zip(ts[has].tolist(), source[has].tolist(), barrier[has].tolist(), strict=True)
    assert list(fields) == stamped
    assert ts[~has].tolist() == [0, 0]
    assert (end, stop) == (len(data), core.RING_WHOLE)


@pytest.mark.parametrize(
    ("bad", "stop", "message"),
    [
        (struct.pack("<II", 7, 30), core.RING_SIZE_BELOW_MINIMUM, "item size 7 is below the min"),
        (struct.pack("<II", 0, 30) + b"\0" * 8, core.RING_SIZE_BELOW_MINIMUM, "item size 0 "),
        (struct.pack("<III", 11, 30, 0), core.RING_SIZE_BELOW_MINIMUM, "item size 11 "),
        # a body header announced (word 20) by an item too short to hold it
        (
            struct.pack("<IIIQ", 27, 30, 20, 5) + b"\0" * 7,
            core.RING_NO_ROOM_FOR_BODY_HEADER,
            "item size 27 too small for a body header",
        ),
        (struct.pack("<III", 12, 30, 19), core.RING_BODY_HEADER_WORD, "body header size 19"),
        (
            struct.pack(">III", 12, 30, 0),
            core.RING_TYPE_UPPER_BITS,
            "item type 0x1e000000 has its upper 16 bits set",
        ),
    ],
)
def test_malformed_item_stops_the_walk_at_its_offset(bad: bytes, stop: int, message: str) -> None:
    """The walk stops at the bad item, returns its offset and why; the items before it are
    indexed; the message names the file and the item's offset in the file."""
    data, items = _good()
    buf = data + bad + writer.item(30, b"after", 11, 2)
    *_, end, got = core.index_ring_items(np.frombuffer(buf, np.uint8))
    assert (end, got) == (len(data), stop)
    index, error = fmt.scan_ring_items(buf, "run.evt", base=1000)
    assert len(index) == len(items) and index.end == len(data)
    assert error is not None and str(error).startswith(
        f"run.evt: byte offset {1000 + len(data)}: {message}"
    )
    with pytest.raises(fmt.NscldaqFormatError, match=f"byte offset {len(data)}: "):
        list(RingItemReader(skip_unstamped=True).read_stream(io.BytesIO(buf), "run.evt"))


@pytest.mark.parametrize("cut", [1, 7, 8, 20, 40])
def test_truncated_item_is_partial_not_malformed(cut: int) -> None:
    """A last item cut short stops the walk at its offset as RING_PARTIAL (more bytes may come
    on a stream); at the end of a file the reader names it, whether its header is whole or
    not."""
    data, items = _good()
    last = writer.item(30, b"x" * 40, 3, 2)
    buf = data + last[:cut]
    *_, end, stop = core.index_ring_items(np.frombuffer(buf, np.uint8))
    assert (end, stop) == (len(data), core.RING_PARTIAL)
    index, error = fmt.scan_ring_items(buf, "run.evt")
    assert error is None and len(index) == len(items)
    with pytest.raises(fmt.NscldaqFormatError, match=f"byte offset {len(data)}: truncated"):
        list(RingItemReader(skip_unstamped=True).read_stream(io.BytesIO(buf), "run.evt"))
    with pytest.raises(fmt.NscldaqFormatError, match=f"byte offset {len(data)}: truncated"):
        fmt.unpack_ring_item(buf, len(data), "run.evt")


def test_empty_buffer_and_partial_fragment() -> None:
    *_, end, stop = core.index_ring_items(np.zeros(0, np.uint8))
    assert (end, stop) == (0, core.RING_WHOLE)
    whole = struct.pack("<QIII", 5, 1, 3, 0) + b"abc"
    partial = struct.pack("<QIII", 6, 1, 9, 0) + b"abc"
    index = fmt.index_fragments(whole + partial)
    assert (len(index), index.end) == (1, len(whole))
    assert writer.read_fragments(whole) == [(5, 1, 0, b"abc")]


def test_batch_payload_is_the_chunk_itself_when_items_are_contiguous() -> None:
    """Every stamped item kept (the RING_FORMAT item first is not sent): the payload is a view
    of the bytes read, no copy; payload offsets relative to the first item sent."""
    data, items = writer.run_file(4, list(range(100)))
    (batch,) = RingItemReader().read_stream(io.BytesIO(data), "run.evt")
    assert not batch.payload.flags.owndata and batch.payload.base is not None
    assert batch.payload.tobytes() == b"".join(items)
    assert int(batch.payload_offsets[0]) == 0


def test_items_left_out_inside_a_chunk_leave_the_others_whole() -> None:
    """An unstamped item skipped and a RING_FORMAT item mid-file: the kept items are not
    contiguous, each payload is still its own item."""
    stamped = [writer.item(30, bytes([k]) * (k + 1), k, 1) for k in range(6)]
    data = b"".join(
        [
            *stamped[:2],
            writer.item(writer.PERIODIC_SCALERS, b"sc", None),
            *stamped[2:4],
            writer.ring_format(),
            *stamped[4:],
        ]
    )
    reader = RingItemReader(skip_unstamped=True)
    batch = FragmentBatch.concat(list(reader.read_stream(io.BytesIO(data), "run.evt")))
    got = [
        batch.payload[int(a) : int(b)].tobytes()
        for a, b in zip(batch.payload_offsets[:-1], batch.payload_offsets[1:], strict=True)
    ]
    assert got == stamped
    assert batch.timestamp.tolist() == list(range(6))
    assert (reader.unstamped_skipped, reader.format_items) == (1, 1)
