# NSCLDAQ records (a part that core.pyx includes).
# The one step of reading NSCLDAQ data that is sequential by nature: each record's size says
# where the next one begins, so the walk is a loop, compiled here with the header fields
# gathered in the same pass. No Python object is made per record. The layouts, the rules of
# evb send --nscldaq and every message are orderer.nscldaq.format's: a walk returns where it
# stopped and why (a RING_* code), the offset of the item at fault being where it stopped.

from libc.stdint cimport int64_t

cdef enum RingStop:
    RS_WHOLE = 0                  # the buffer ends where its last item ends
    RS_PARTIAL = 1                # a partial item (or header) follows: more bytes may come
    RS_TYPE_UPPER_BITS = 2        # not little-endian, or not a ring item at all
    RS_SIZE_BELOW_MINIMUM = 3     # a size below header + the "no body header" word
    RS_BODY_HEADER_WORD = 4       # the word after the header is neither 0 nor 20
    RS_NO_ROOM_FOR_BODY_HEADER = 5  # a body header announced, the size does not reach its end

RING_WHOLE = RS_WHOLE
RING_PARTIAL = RS_PARTIAL
RING_TYPE_UPPER_BITS = RS_TYPE_UPPER_BITS
RING_SIZE_BELOW_MINIMUM = RS_SIZE_BELOW_MINIMUM
RING_BODY_HEADER_WORD = RS_BODY_HEADER_WORD
RING_NO_ROOM_FOR_BODY_HEADER = RS_NO_ROOM_FOR_BODY_HEADER

cdef enum:
    RING_HEADER = 8         # {u32 size, u32 type}
    RING_BODY_HEADER = 20   # {u32 size = 20, u64 timestamp, u32 source, u32 barrier}
    RING_MIN_ITEM = 12      # header + the u32 0 that stands for "no body header"
    EVB_FRAGMENT_HEADER = 20  # {u64 timestamp, u32 source, u32 payload size, u32 barrier}


cdef inline uint32_t _le32(const uint8_t *p) noexcept nogil:
    """A little-endian u32 at any alignment (every platform evb runs on is little-endian)."""
    cdef uint32_t value
    memcpy(&value, p, 4)
    return value


cdef inline uint64_t _le64(const uint8_t *p) noexcept nogil:
    cdef uint64_t value
    memcpy(&value, p, 8)
    return value


cdef inline RingStop _ring_item_stop(const uint8_t *p, Py_ssize_t left) noexcept nogil:
    """RS_WHOLE if a whole, well-formed ring item starts at ``p`` (``left`` bytes on), else
    why not. Checked in the order a reader meets the fields: type, size, body-header word."""
    if left < RING_HEADER:
        return RS_PARTIAL
    cdef uint32_t size = _le32(p), word
    if _le32(p + 4) >> 16:
        return RS_TYPE_UPPER_BITS
    if size < RING_MIN_ITEM:
        return RS_SIZE_BELOW_MINIMUM
    if size > left:
        return RS_PARTIAL
    word = _le32(p + RING_HEADER)
    if word == 0:
        return RS_WHOLE
    if word != RING_BODY_HEADER:
        return RS_BODY_HEADER_WORD
    if size < RING_HEADER + RING_BODY_HEADER:
        return RS_NO_ROOM_FOR_BODY_HEADER
    return RS_WHOLE


cdef list _columns(Py_ssize_t n, tuple dtypes):
    """One zeroed array of ``n`` rows a dtype: the columns a walk fills."""
    return [np.zeros(n, dtype=dtype) for dtype in dtypes]


def index_ring_items(const uint8_t[::1] buf):
    """The whole ring items at the start of ``buf``, up to the first one that is malformed or
    runs past the end: ``(offset, size, type, has_body_header, timestamp, source, barrier,
    end, stop)``. The arrays have one row an item; timestamp, source and barrier are 0 where
    an item has no body header. ``end`` is where the last whole item ends and ``stop`` a
    RING_* code saying what is at ``end``: RING_WHOLE (the buffer's end), RING_PARTIAL (a
    partial item) or the malformation of the item at ``end``."""
    cdef Py_ssize_t total = buf.shape[0], pos = 0, n = 0, i
    cdef const uint8_t *p = &buf[0] if total else NULL
    cdef RingStop stop = RS_WHOLE
    with nogil:
        while pos < total:
            stop = _ring_item_stop(p + pos, total - pos)
            if stop != RS_WHOLE:
                break
            pos += _le32(p + pos)
            n += 1
    offset, size, item_type, has_body_header, timestamp, source, barrier = _columns(
        n, (np.int64, np.uint32, np.uint32, np.uint8, np.uint64, np.uint32, np.uint32))
    cdef int64_t[::1] offset_v = offset
    cdef uint32_t[::1] size_v = size, type_v = item_type, source_v = source, barrier_v = barrier
    cdef uint8_t[::1] has_v = has_body_header
    cdef uint64_t[::1] timestamp_v = timestamp
    cdef const uint8_t *item
    cdef Py_ssize_t at = 0
    with nogil:
        for i in range(n):
            item = p + at
            offset_v[i] = at
            size_v[i] = _le32(item)
            type_v[i] = _le32(item + 4)
            has_v[i] = _le32(item + RING_HEADER) == RING_BODY_HEADER
            if has_v[i]:
                timestamp_v[i] = _le64(item + RING_HEADER + 4)
                source_v[i] = _le32(item + RING_HEADER + 12)
                barrier_v[i] = _le32(item + RING_HEADER + 16)
            at += size_v[i]
    return (offset, size, item_type, has_body_header.view(np.bool_), timestamp, source, barrier,
            pos, <int>stop)


def index_evb_fragments(const uint8_t[::1] buf):
    """The whole event-builder fragments at the start of ``buf``: ``(offset, timestamp, source,
    payload size, barrier, end)``; ``end`` is where the last whole one ends (a partial one may
    follow)."""
    cdef Py_ssize_t total = buf.shape[0], pos = 0, n = 0, i
    cdef const uint8_t *p = &buf[0] if total else NULL
    with nogil:
        while total - pos >= EVB_FRAGMENT_HEADER:
            if <Py_ssize_t>_le32(p + pos + 12) > total - pos - EVB_FRAGMENT_HEADER:
                break
            pos += EVB_FRAGMENT_HEADER + _le32(p + pos + 12)
            n += 1
    offset, timestamp, source, size, barrier = _columns(
        n, (np.int64, np.uint64, np.uint32, np.uint32, np.uint32))
    cdef int64_t[::1] offset_v = offset
    cdef uint64_t[::1] timestamp_v = timestamp
    cdef uint32_t[::1] source_v = source, size_v = size, barrier_v = barrier
    cdef Py_ssize_t at = 0
    with nogil:
        for i in range(n):
            offset_v[i] = at
            timestamp_v[i] = _le64(p + at)
            source_v[i] = _le32(p + at + 8)
            size_v[i] = _le32(p + at + 12)
            barrier_v[i] = _le32(p + at + 16)
            at += EVB_FRAGMENT_HEADER + size_v[i]
    return offset, timestamp, source, size, barrier, pos
