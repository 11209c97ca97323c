"""The tests' own NSCLDAQ writer and fragment reader, written from the layout in docs/nscldaq.md
with :mod:`struct` alone, independent of orderer.nscldaq.format, so that the tests check it."""

from __future__ import annotations

import struct

BEGIN_RUN, END_RUN, PHYSICS_EVENT, PERIODIC_SCALERS, RING_FORMAT = 1, 2, 30, 20, 12
NO_TIMESTAMP = 2**64 - 1


def item(
    item_type: int, body: bytes, timestamp: int | None, source: int = 0, barrier: int = 0
) -> bytes:
    """One ring item: {size, type}, then a body header {20, ts, source, barrier} (or the word 0
    when ``timestamp`` is None), then the body."""
    if timestamp is None:
        head = struct.pack("<I", 0)
    else:
        head = struct.pack("<IQII", 20, timestamp, source, barrier)
    return struct.pack("<II", 8 + len(head) + len(body), item_type) + head + body


def ring_format(major: int = 11, minor: int = 0) -> bytes:
    return struct.pack("<IIIHH", 16, RING_FORMAT, 0, major, minor)


def state_change(item_type: int, timestamp: int, source: int, run: int = 7) -> bytes:
    """A BEGIN/END item: barrier type = its item type, a (short) state-change body."""
    body = struct.pack("<IIII", run, 0, 0, 1) + b"title".ljust(81, b"\0")
    return item(item_type, body, timestamp, source, barrier=item_type)


def run_file(source: int, timestamps: list[int], *, seed: int = 0) -> tuple[bytes, list[bytes]]:
    """A run of one source: RING_FORMAT, BEGIN_RUN, physics events, END_RUN. Returns the file
    and its stamped items (what evb must carry as payloads), in file order."""
    items = [state_change(BEGIN_RUN, 0, source)]
    for k, ts in enumerate(timestamps):
        body = bytes((seed + k + source + j) % 256 for j in range(2 + (k * 7 + source) % 40))
        items.append(item(PHYSICS_EVENT, body, ts, source))
    items.append(state_change(END_RUN, max(timestamps, default=0) + 1, source))
    return ring_format() + b"".join(items), items


def read_fragments(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """NSCLDAQ event-builder fragments: (timestamp, source, barrier, payload) each."""
    out = []
    pos = 0
    while pos < len(data):
        ts, source, size, barrier = struct.unpack_from("<QIII", data, pos)
        out.append((ts, source, barrier, data[pos + 20 : pos + 20 + size]))
        pos += 20 + size
    assert pos == len(data), "a partial fragment at the end"
    return out


def body_header(ring_item: bytes) -> tuple[int, int, int]:
    """(timestamp, source, barrier) of a stamped ring item."""
    _, ts, source, barrier = struct.unpack_from("<IQII", ring_item, 8)
    return ts, source, barrier
