"""orderer.nscldaq.format and .reader against the tests' own writer (tests/nscldaq/writer.py)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from orderer.batch import FragmentBatch
from orderer.nscldaq import format as fmt
from orderer.nscldaq.reader import RingItemReader
from tests.nscldaq import writer


def _read(data: bytes, *, skip: bool = False, chunk: int = 1 << 20) -> FragmentBatch:
    reader = RingItemReader(skip_unstamped=skip, chunk_size=chunk)
    return FragmentBatch.concat(list(reader.read_stream(io.BytesIO(data), "run.evt")))


def test_layouts_match_the_writer() -> None:
    assert fmt.pack_ring_item(30, b"abc", timestamp=9, source=4) == writer.item(30, b"abc", 9, 4)
    assert fmt.pack_ring_item(20, b"abc") == writer.item(20, b"abc", None)
    assert fmt.pack_ring_format() == writer.ring_format()
    assert fmt.pack_fragment(9, 4, 1, b"xy") == struct.pack("<QIII", 9, 4, 2, 1) + b"xy"
    got = fmt.unpack_ring_item(writer.item(1, b"body", 5, 3, 1))
    assert (got.type, got.body, got.timestamp, got.source, got.barrier) == (1, b"body", 5, 3, 1)


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_reader_payload_is_the_whole_item(chunk: int) -> None:
    """Any chunk size (items split across reads): payloads are the stamped items byte for byte,
    the RING_FORMAT item is not sent, fields come from the body headers."""
    data, items = writer.run_file(3, [10, 20, 20, 35])
    batch = _read(data, chunk=chunk)
    assert [
        batch.payload[int(a) : int(b)].tobytes()
        for a, b in zip(batch.payload_offsets[:-1], batch.payload_offsets[1:], strict=True)
    ] == items
    assert list(
        zip(batch.timestamp.tolist(), batch.source.tolist(), batch.barrier.tolist(), strict=True)
    ) == [writer.body_header(i) for i in items]
    assert batch.barrier.tolist()[0] == writer.BEGIN_RUN
    assert batch.barrier.tolist()[-1] == writer.END_RUN


def test_fragments_pack_and_index_round_trip() -> None:
    payloads = [b"", b"a", b"bcdef", bytes(range(200))]
    data = b"".join(
        struct.pack("<QIII", 100 + k, k, len(p), k % 2) + p for k, p in enumerate(payloads)
    )
    index = fmt.index_fragments(data)
    assert index.timestamp.tolist() == [100, 101, 102, 103]
    assert index.payloads(data).tobytes() == b"".join(payloads)
    again = fmt.pack_fragments(
        index.timestamp, index.source, index.barrier, index.payload_offsets(), index.payloads(data)
    )
    assert again == data
    assert writer.read_fragments(again)[2] == (102, 2, 0, b"bcdef")


def test_null_timestamp_takes_the_source_previous_one() -> None:
    """NSCLDAQ's orderer (CFragmentHandler::addFragment): an all-ones stamp becomes the newest
    timestamp from that source; 0 when the source sent nothing before."""
    null = writer.NO_TIMESTAMP
    data = writer.ring_format() + b"".join(
        [
            writer.item(30, b"a", null, 1),  # nothing before from source 1: 0
            writer.item(30, b"b", 50, 1),
            writer.item(30, b"c", 70, 2),
            writer.item(30, b"d", null, 1),  # 50 (source 1's previous, not source 2's 70)
            writer.item(30, b"e", null, 2),  # 70
        ]
    )
    for chunk in (30, 1 << 20):  # the memory spans chunks
        batch = _read(data, chunk=chunk)
        assert batch.timestamp.tolist() == [0, 50, 70, 50, 70]
    assert np.all(batch.timestamp != np.uint64(null))


def test_unstamped_item_refused_with_its_offset_or_skipped_and_counted() -> None:
    good = writer.ring_format() + writer.item(30, b"a", 5, 1)
    data = good + writer.item(writer.PERIODIC_SCALERS, b"sc", None) + writer.item(30, b"b", 6, 1)
    reader = RingItemReader()
    got = []
    with pytest.raises(
        fmt.NscldaqFormatError, match=f"run.evt: byte offset {len(good)}: .*no body header"
    ):
        got.extend(reader.read_stream(io.BytesIO(data), "run.evt"))
    assert len(FragmentBatch.concat(got)) == 1  # what came before was handed on first
    reader = RingItemReader(skip_unstamped=True)
    assert len(FragmentBatch.concat(list(reader.read_stream(io.BytesIO(data), "run.evt")))) == 2
    assert reader.unstamped_skipped == 1


def test_truncated_last_item_names_its_offset() -> None:
    data, _ = writer.run_file(1, [1, 2, 3])
    last = writer.state_change(writer.END_RUN, 4, 1)
    with pytest.raises(
        fmt.NscldaqFormatError, match=f"byte offset {len(data) - len(last)}: truncated"
    ):
        list(RingItemReader().read_stream(io.BytesIO(data[:-5]), "run.evt"))


def test_format_version_refused_naming_the_item() -> None:
    data = writer.ring_format(12, 0) + writer.item(30, b"a", 5, 1)
    with pytest.raises(
        fmt.NscldaqFormatError, match=r"byte offset 0: RING_FORMAT says NSCLDAQ format 12\.0"
    ):
        list(RingItemReader().read_stream(io.BytesIO(data), "run.evt"))
    later = writer.item(30, b"a", 5, 1)
    with pytest.raises(fmt.NscldaqFormatError, match=f"byte offset {len(later)}: RING_FORMAT"):
        list(RingItemReader().read_stream(io.BytesIO(later + writer.ring_format(10, 0)), "x"))


def test_bad_body_header_word_and_big_endian_refused() -> None:
    bad = struct.pack("<III", 12, 30, 7)
    with pytest.raises(fmt.NscldaqFormatError, match="byte offset 0: body header size 7"):
        fmt.index_ring_items(bad, "x")
    swapped = struct.pack(">II", 12, 30) + b"\0" * 4
    with pytest.raises(fmt.NscldaqFormatError, match="upper 16 bits"):
        fmt.index_ring_items(swapped, "x")
