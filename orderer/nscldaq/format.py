"""NSCLDAQ version-11 layouts: ring items, body headers and event-builder fragments.

Why here, once: ``evb send/replay --nscldaq`` read ring items, ``evb tail --nscldaq`` writes
event-builder fragments and ``evb spark-job --format nscldaq`` writes built events as ring items;
all three must agree with NSCLDAQ byte for byte, so there is one copy of the layouts. Everything
is little-endian (NSCLDAQ writes the producer's native order; the type's upper 16 bits being zero
is how a reader tells, and every system evb runs on is little-endian).

- ring item: header ``{u32 size (whole item, header included), u32 type}``, then either a body
  header ``{u32 size = 20, u64 timestamp, u32 source id, u32 barrier type}`` or a single u32 0
  ("no body header"), then the body.
- RING_FORMAT item (starts a version-11 file): header, u32 0, ``u16 major, u16 minor``.
- event-builder fragment (what NSCLDAQ's orderer emits and glom reads): header
  ``{u64 timestamp, u32 source id, u32 payload size, u32 barrier type}`` then the payload.

Readers come in two shapes: one item at a time (:func:`unpack_ring_item`, for tests and tools)
and a whole buffer at a time (:func:`index_ring_items`, :func:`index_fragments`). Both walk the
records in the compiled core (each record's size says where the next begins, a loop by nature:
in Python it was the bottleneck of ``evb send --nscldaq``), which gathers the header fields in
the same pass and says where and why it stopped; the messages are made here, once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from orderer._core import core
from orderer.errors import InterfaceError

__all__ = [
    "ABNORMAL_ENDRUN",
    "BARRIER_TYPES",
    "BEGIN_RUN",
    "BODY_HEADER_SIZE",
    "END_RUN",
    "EVB_FRAGMENT",
    "EVB_GLOM_INFO",
    "EVB_UNKNOWN_PAYLOAD",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "FRAGMENT_HEADER_SIZE",
    "NULL_TIMESTAMP",
    "PAUSE_RUN",
    "PERIODIC_SCALERS",
    "PHYSICS_EVENT",
    "PHYSICS_EVENT_COUNT",
    "READABLE_MAJORS",
    "RESUME_RUN",
    "RING_FORMAT",
    "RING_HEADER_SIZE",
    "STATE_CHANGE_TYPES",
    "FragmentIndex",
    "NscldaqFormatError",
    "RingIndex",
    "RingItem",
    "index_fragments",
    "index_ring_items",
    "pack_fragment",
    "pack_fragment_header",
    "pack_fragments",
    "pack_ring_format",
    "pack_ring_item",
    "scan_ring_items",
    "truncated_item_error",
    "unpack_fragment_header",
    "unpack_ring_format",
    "unpack_ring_item",
]

# --- item types (NSCLDAQ 11 DataFormat.h) --------------------------------------------------------
BEGIN_RUN = 1
END_RUN = 2
PAUSE_RUN = 3
RESUME_RUN = 4
ABNORMAL_ENDRUN = 5
PACKET_TYPES = 10
MONITORED_VARIABLES = 11
RING_FORMAT = 12
PERIODIC_SCALERS = 20
PHYSICS_EVENT = 30
PHYSICS_EVENT_COUNT = 31
EVB_FRAGMENT = 40
EVB_UNKNOWN_PAYLOAD = 41
EVB_GLOM_INFO = 42
FIRST_USER_ITEM_CODE = 0x8000

STATE_CHANGE_TYPES = frozenset({BEGIN_RUN, END_RUN, PAUSE_RUN, RESUME_RUN})
"""The run-state changes; NSCLDAQ readouts stamp them with their own type as barrier type."""
BARRIER_TYPES = {
    BEGIN_RUN: BEGIN_RUN,
    END_RUN: END_RUN,
    PAUSE_RUN: PAUSE_RUN,
    RESUME_RUN: RESUME_RUN,
}
"""Item type -> the barrier type NSCLDAQ gives it (the same number); physics events carry 0."""

FORMAT_MAJOR = 11
FORMAT_MINOR = 0
READABLE_MAJORS = frozenset({FORMAT_MAJOR})
"""Major versions evb reads: 12 changed the body header (extensions, a non-zero "no header"
word), so a 12 file read as 11 would be misread, not refused."""

NULL_TIMESTAMP = 0xFFFF_FFFF_FFFF_FFFF
"""The all-ones "no timestamp" stamp; NSCLDAQ's orderer gives such a fragment the timestamp of
the previous fragment from the same source (0 if none): see docs/nscldaq.md."""

# --- layouts --------------------------------------------------------------------------------------
_RING_HEADER = struct.Struct("<II")
_BODY_HEADER = struct.Struct("<IQII")
_FORMAT_BODY = struct.Struct("<IHH")
_FRAGMENT_HEADER = struct.Struct("<QIII")
RING_HEADER_SIZE = _RING_HEADER.size  # 8
BODY_HEADER_SIZE = _BODY_HEADER.size  # 20
FRAGMENT_HEADER_SIZE = _FRAGMENT_HEADER.size  # 20
_NO_BODY_HEADER = 4  # the single u32 0 that stands for "no body header"
_MIN_ITEM = RING_HEADER_SIZE + _NO_BODY_HEADER


class NscldaqFormatError(InterfaceError):
    """Bytes that are not what the NSCLDAQ layout says; names the file and the byte offset of the
    item (or fragment) at fault, so it can be found with ``od -j OFFSET``. An
    :class:`InterfaceError` so that the command line reports it as bad input (exit 2)."""

    def __init__(self, file: str, offset: int, what: str, *, hint: str | None = None) -> None:
        self.file = file
        self.offset = offset
        self.what = what
        super().__init__(f"{file}: byte offset {offset}: {what}", hint=hint)


@dataclass(frozen=True, slots=True)
class RingItem:
    """One ring item as read; ``timestamp``/``source``/``barrier`` are None without a body
    header. ``body`` is what follows the body header (or the "no body header" word)."""

    type: int
    body: bytes
    timestamp: int | None = None
    source: int | None = None
    barrier: int | None = None

    @property
    def has_body_header(self) -> bool:
        return self.timestamp is not None


# --- one item at a time ---------------------------------------------------------------------------
def pack_ring_item(
    item_type: int,
    body: bytes = b"",
    *,
    timestamp: int | None = None,
    source: int = 0,
    barrier: int = 0,
) -> bytes:
    """A ring item; with ``timestamp`` given it has a body header, without it the "no body
    header" word."""
    if timestamp is None:
        size = _MIN_ITEM + len(body)
        return _RING_HEADER.pack(size, item_type) + b"\0\0\0\0" + body
    size = RING_HEADER_SIZE + BODY_HEADER_SIZE + len(body)
    return (
        _RING_HEADER.pack(size, item_type)
        + _BODY_HEADER.pack(BODY_HEADER_SIZE, timestamp, source, barrier)
        + body
    )


def pack_ring_format(major: int = FORMAT_MAJOR, minor: int = FORMAT_MINOR) -> bytes:
    """The RING_FORMAT item a version-11 file starts with."""
    body = _FORMAT_BODY.pack(0, major, minor)
    return _RING_HEADER.pack(RING_HEADER_SIZE + len(body), RING_FORMAT) + body


def unpack_ring_format(
    item: bytes | memoryview, file: str = "<bytes>", offset: int = 0
) -> tuple[int, int]:
    """(major, minor) of a RING_FORMAT item."""
    size, item_type = _RING_HEADER.unpack_from(item, 0)
    if item_type != RING_FORMAT or size < RING_HEADER_SIZE + _FORMAT_BODY.size:
        raise NscldaqFormatError(
            file, offset, f"not a RING_FORMAT item (type {item_type}, size {size})"
        )
    _mbz, major, minor = _FORMAT_BODY.unpack_from(item, RING_HEADER_SIZE)
    return major, minor


def unpack_ring_item(buf: bytes | memoryview, offset: int = 0, file: str = "<bytes>") -> RingItem:
    """The ring item at ``offset``, checked as :func:`index_ring_items` checks every item."""
    view = memoryview(buf)[offset:]
    if len(view) >= RING_HEADER_SIZE:  # the item alone: its size, if it has room, bounds it
        view = view[: max(_RING_HEADER.unpack_from(view, 0)[0], _MIN_ITEM)]
    index, error = scan_ring_items(view, file, offset)
    if error is not None:
        raise error
    if not len(index):
        raise truncated_item_error(file, offset, view)
    start = int(
        RING_HEADER_SIZE + (BODY_HEADER_SIZE if index.has_body_header[0] else _NO_BODY_HEADER)
    )
    body = bytes(view[start : int(index.size[0])])
    if not index.has_body_header[0]:
        return RingItem(int(index.type[0]), body)
    return RingItem(
        int(index.type[0]),
        body,
        int(index.timestamp[0]),
        int(index.source[0]),
        int(index.barrier[0]),
    )


def pack_fragment_header(timestamp: int, source: int, payload_size: int, barrier: int) -> bytes:
    return _FRAGMENT_HEADER.pack(timestamp, source, payload_size, barrier)


def pack_fragment(timestamp: int, source: int, barrier: int, payload: bytes) -> bytes:
    """One event-builder fragment: its header, then the payload."""
    return _FRAGMENT_HEADER.pack(timestamp, source, len(payload), barrier) + payload


def unpack_fragment_header(buf: bytes | memoryview, offset: int = 0) -> tuple[int, int, int, int]:
    """(timestamp, source, payload size, barrier) of the fragment at ``offset``."""
    ts, src, size, bar = _FRAGMENT_HEADER.unpack_from(buf, offset)
    return ts, src, size, bar


def truncated_item_error(file: str, offset: int, tail: bytes | memoryview) -> NscldaqFormatError:
    """The error for ``tail``, the bytes at the end of a file (at ``offset``) that do not make a
    whole item."""
    if len(tail) < RING_HEADER_SIZE:
        what = f"truncated ring item: {len(tail)} bytes at the end, not even a header"
    else:
        size = _RING_HEADER.unpack_from(tail, 0)[0]
        what = f"truncated ring item: its header says {size} bytes, the data ends after {len(tail)}"
    return NscldaqFormatError(file, offset, what)


def _stop_error(
    stop: int, buf: npt.NDArray[np.uint8], at: int, file: str, base: int
) -> NscldaqFormatError | None:
    """What the compiled walk's ``stop`` code says of the item at ``at`` (None: nothing wrong
    with it, the buffer ended)."""
    if stop in (core.RING_WHOLE, core.RING_PARTIAL):
        return None
    data = buf.data
    size, item_type = _RING_HEADER.unpack_from(data, at)
    if stop == core.RING_TYPE_UPPER_BITS:
        what = (
            f"item type {item_type:#x} has its upper 16 bits set: not a little-endian "
            "NSCLDAQ ring item (or not a ring-item file)"
        )
    elif stop == core.RING_SIZE_BELOW_MINIMUM:
        what = f"item size {size} is below the minimum {_MIN_ITEM}"
    elif stop == core.RING_BODY_HEADER_WORD:
        word = struct.unpack_from("<I", data, at + RING_HEADER_SIZE)[0]
        what = f"body header size {word}: expected 0 (none) or {BODY_HEADER_SIZE}"
    else:
        what = f"item size {size} too small for a body header"
    return NscldaqFormatError(file, base + at, what)


# --- a buffer at a time ---------------------------------------------------------------------------
def _as_array(buf: bytes | bytearray | memoryview | npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf)
    return np.frombuffer(buf, dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class RingIndex:
    """Where the whole items of a buffer are and their header fields, as arrays.

    ``has_body_header`` is False where an item carries the "no body header" word; there
    ``timestamp``/``source``/``barrier`` are 0. ``end`` is where the last whole item ends:
    ``end < len(buffer)`` means a partial item follows (the tail of a stream still being read,
    or a truncated file).
    """

    offset: npt.NDArray[np.int64]
    size: npt.NDArray[np.uint32]
    type: npt.NDArray[np.uint32]
    has_body_header: npt.NDArray[np.bool_]
    timestamp: npt.NDArray[np.uint64]
    source: npt.NDArray[np.uint32]
    barrier: npt.NDArray[np.uint32]
    end: int

    def __len__(self) -> int:
        return int(self.offset.shape[0])


def index_ring_items(
    buf: bytes | memoryview | npt.NDArray[np.uint8], file: str = "<bytes>", base: int = 0
) -> RingIndex:
    """Index every whole ring item of ``buf``, its header fields gathered in the same pass.

    A malformed item (size below the minimum, a type with its upper bits set, a body-header
    word that is neither 0 nor 20) raises :class:`NscldaqFormatError` naming ``file`` and its
    offset (``base`` + the offset in ``buf``: the buffer's place in the file). An item whose
    size runs past the end of ``buf`` is not an error here: ``end`` tells the caller, who knows
    whether more bytes can come.
    """
    index, error = scan_ring_items(buf, file, base)
    if error is not None:
        raise error
    return index


def scan_ring_items(
    buf: bytes | memoryview | npt.NDArray[np.uint8], file: str = "<bytes>", base: int = 0
) -> tuple[RingIndex, NscldaqFormatError | None]:
    """:func:`index_ring_items` for a stream: the items before a malformed one, and its error
    (None if there is none), so that a sender can deliver what came before it."""
    data = _as_array(buf)
    offset, size, item_type, has, timestamp, source, barrier, end, stop = core.index_ring_items(
        data
    )
    index = RingIndex(offset, size, item_type, has, timestamp, source, barrier, end)
    return index, _stop_error(stop, data, end, file, base)


_FRAGMENT_DTYPE = np.dtype([("ts", "<u8"), ("source", "<u4"), ("size", "<u4"), ("barrier", "<u4")])


def pack_fragments(
    timestamp: npt.NDArray[np.uint64],
    source: npt.NDArray[np.uint32],
    barrier: npt.NDArray[np.uint32],
    payload_offsets: npt.NDArray[np.uint64],
    payload: npt.NDArray[np.uint8],
) -> bytes:
    """Many event-builder fragments (header, payload, header, payload, ...) from batch columns
    (``n + 1`` payload offsets into ``payload``), with numpy scatters rather than a Python loop."""
    n = int(timestamp.shape[0])
    if n == 0:
        return b""
    offsets = payload_offsets.astype(np.int64)
    sizes = np.diff(offsets)
    headers = np.empty(n, dtype=_FRAGMENT_DTYPE)
    headers["ts"], headers["source"] = timestamp, source
    headers["size"], headers["barrier"] = sizes, barrier
    out = np.empty(n * FRAGMENT_HEADER_SIZE + int(sizes.sum()), dtype=np.uint8)
    starts = offsets[:-1] - offsets[0] + FRAGMENT_HEADER_SIZE * np.arange(n, dtype=np.int64)
    out[starts[:, None] + np.arange(FRAGMENT_HEADER_SIZE)] = headers.view(np.uint8).reshape(
        n, FRAGMENT_HEADER_SIZE
    )
    # payload byte k of the batch lands after the headers of its own and every earlier fragment
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    body = payload[int(offsets[0]) : int(offsets[-1])]
    out[np.arange(body.shape[0], dtype=np.int64) + FRAGMENT_HEADER_SIZE * (owner + 1)] = body
    return out.tobytes()


@dataclass(frozen=True, slots=True)
class FragmentIndex:
    """Where the whole event-builder fragments of a buffer are and their headers, as arrays;
    a fragment's payload is ``buf[offset + 20 : offset + 20 + size]``. ``end`` as in
    :class:`RingIndex`."""

    offset: npt.NDArray[np.int64]
    timestamp: npt.NDArray[np.uint64]
    source: npt.NDArray[np.uint32]
    size: npt.NDArray[np.uint32]
    barrier: npt.NDArray[np.uint32]
    end: int

    def __len__(self) -> int:
        return int(self.offset.shape[0])

    def payload_offsets(self) -> npt.NDArray[np.uint64]:
        """The payloads' ``n + 1`` offsets once the headers are cut out (the batch layout)."""
        out = np.zeros(len(self) + 1, dtype=np.uint64)
        np.cumsum(self.size, out=out[1:])
        return out

    def payloads(self, buf: bytes | npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """The payloads back to back (headers cut out), one array."""
        data = _as_array(buf)
        if not len(self):
            return np.zeros(0, dtype=np.uint8)
        starts = self.offset + FRAGMENT_HEADER_SIZE
        sizes = self.size.astype(np.int64)
        # each payload byte's place in buf: its fragment's start + its rank inside the fragment
        firsts = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        return data[firsts + np.arange(int(sizes.sum()), dtype=np.int64)]


def index_fragments(buf: bytes | npt.NDArray[np.uint8]) -> FragmentIndex:
    """Index every whole event-builder fragment of ``buf`` (walked in the compiled core)."""
    return FragmentIndex(*core.index_evb_fragments(_as_array(buf)))
