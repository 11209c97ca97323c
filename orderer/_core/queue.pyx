# A source's queue (a part that core.pyx includes).
# Fragments waiting for the other sources, in a structure of arrays sorted by (timestamp,
# arrival order), and their payloads in an arena in arrival order (docs/ordering.md,
# "Sources and their queues"). Functions over one Queue; no Python object, all nogil.


cdef int _grow(void **ptr, size_t new_bytes) except -1 nogil:
    cdef void *p = PyMem_RawRealloc(ptr[0], new_bytes if new_bytes else 1)
    if p == NULL:
        with gil:
            raise MemoryError()
    ptr[0] = p
    return 0


cdef int _queue_resize(Queue *q, Py_ssize_t cap) except -1 nogil:
    _grow(<void **>&q.ts, cap * sizeof(uint64_t))
    _grow(<void **>&q.arrival, cap * sizeof(double))
    _grow(<void **>&q.barrier, cap * sizeof(uint32_t))
    _grow(<void **>&q.pay_off, cap * sizeof(uint64_t))
    q.cap = cap
    return 0


cdef int _queue_compact(Queue *q) except -1 nogil:
    """Move the live fragments to the start of the arrays."""
    cdef Py_ssize_t n = q.tail - q.head
    if q.head == 0:
        return 0
    if n:
        memmove(q.ts, q.ts + q.head, n * sizeof(uint64_t))
        memmove(q.arrival, q.arrival + q.head, n * sizeof(double))
        memmove(q.barrier, q.barrier + q.head, n * sizeof(uint32_t))
        memmove(q.pay_off, q.pay_off + q.head, n * sizeof(uint64_t))
    if q.first_barrier >= 0:
        q.first_barrier -= q.head
    q.head = 0
    q.tail = n
    return 0


cdef int _queue_reserve(Queue *q, Py_ssize_t extra) except -1 nogil:
    """Room for ``extra`` more fragments at the tail: compact first, grow by 1.5x if needed."""
    cdef Py_ssize_t live = q.tail - q.head
    cdef Py_ssize_t cap
    if q.tail + extra <= q.cap:
        return 0
    if live + extra <= q.cap and q.head >= q.cap // 4:
        return _queue_compact(q)
    _queue_compact(q)
    # Large queues grow by 1/8 (a realloc of a large block is a page remap, not a copy), so
    # that spare capacity stays small: bounded memory is the point of a queue this big.
    cap = q.cap + (q.cap // 2 if q.cap < 65536 else q.cap // 8)
    if cap < live + extra:
        cap = live + extra
    if cap < MIN_QUEUE_CAP:
        cap = MIN_QUEUE_CAP
    return _queue_resize(q, cap)


cdef int _queue_emptied(Queue *q) except -1 nogil:
    """Reset an empty queue; give memory back after a backlog (bounded memory after a stall)."""
    q.head = 0
    q.tail = 0
    q.first_barrier = -1
    q.arena_len = 0
    q.arena_live = 0
    if q.cap > 65536:
        _queue_resize(q, MIN_QUEUE_CAP)
    if q.arena_cap > 1 << 20:
        _grow(<void **>&q.arena, 4096)
        q.arena_cap = 4096
    return 0


cdef bint _arena_in_order(const Queue *q) noexcept nogil:
    """Whether the queued payloads lie in the arena in queue order (the usual case: payloads
    are appended in arrival order, runs are appended at the tail, and pops take the head)."""
    cdef Py_ssize_t i
    cdef uint64_t last = 0
    cdef bint first = True
    for i in range(q.head, q.tail):
        if q.pay_off[i] != NO_PAYLOAD:
            if not first and q.pay_off[i] <= last:
                return False
            last = q.pay_off[i]
            first = False
    return True


cdef void _arena_compact(Queue *q) noexcept nogil:
    """Move the live payloads, in queue order = arena order, to the start of the arena: one
    memmove per stretch of adjacent payloads (usually a single one), no new memory. Each
    payload only moves down, onto bytes already moved or dead, so nothing live is overwritten."""
    cdef Py_ssize_t i = q.head, j
    cdef size_t pos = 0, start, end, delta
    while i < q.tail:
        if q.pay_off[i] == NO_PAYLOAD:
            i += 1
            continue
        start = q.pay_off[i]
        end = start + PAY_PREFIX + _pay_size(q, i)
        delta = start - pos
        q.pay_off[i] = pos
        j = i + 1
        while j < q.tail and (q.pay_off[j] == NO_PAYLOAD or q.pay_off[j] == end):
            if q.pay_off[j] != NO_PAYLOAD:
                end += PAY_PREFIX + _pay_size(q, j)
                q.pay_off[j] -= delta
            j += 1
        if delta:
            memmove(q.arena + pos, q.arena + start, end - start)
        pos += end - start
        i = j
    q.arena_len = pos
    q.arena_live = pos


cdef int _arena_reserve(Queue *q, size_t extra) except -1 nogil:
    """Room for ``extra`` payload bytes: repack the live payloads when most of the arena is
    dead, grow it otherwise.

    Why in place: a queue that is popped as fast as it fills repacks each time its arena fills
    up, and repacking into a fresh block costs a page fault per 4 KiB on top of the copy; a
    large block grows by remapping, not copying. Dead bytes left in front by a growth are
    reclaimed by the next repack."""
    cdef size_t need = q.arena_len + extra
    cdef size_t cap, pos, size
    cdef uint8_t *fresh
    cdef Py_ssize_t i
    if need <= q.arena_cap:
        return 0
    if not (q.arena_live + extra <= q.arena_cap // 2 and q.arena_live < q.arena_len):
        cap = q.arena_cap + q.arena_cap // 2
        if cap < need:
            cap = need
        if cap < 4096:
            cap = 4096
        _grow(<void **>&q.arena, cap)
        q.arena_cap = cap
        return 0
    if _arena_in_order(q):
        _arena_compact(q)
        return 0
    # Out of order (a fragment was inserted before queued ones): copy the live payloads to a
    # fresh block in queue order, which puts them back in order.
    fresh = <uint8_t *>PyMem_RawMalloc(q.arena_cap)
    if fresh == NULL:
        with gil:
            raise MemoryError()
    pos = 0
    for i in range(q.head, q.tail):
        if q.pay_off[i] != NO_PAYLOAD:
            size = PAY_PREFIX + _pay_size(q, i)
            memcpy(fresh + pos, q.arena + q.pay_off[i], size)
            q.pay_off[i] = pos
            pos += size
    PyMem_RawFree(q.arena)
    q.arena = fresh
    q.arena_len = pos
    q.arena_live = pos
    return 0


cdef inline uint32_t _pay_size(const Queue *q, Py_ssize_t i) noexcept nogil:
    """Payload length of queued fragment i (read from its 4-byte prefix in the arena)."""
    cdef uint32_t size
    if q.pay_off[i] == NO_PAYLOAD:
        return 0
    memcpy(&size, q.arena + q.pay_off[i], PAY_PREFIX)
    return size


cdef inline void _arena_put(Queue *q, const uint8_t *pay, uint32_t size, uint64_t *pay_off) noexcept nogil:
    """Append a payload with its length prefix (room reserved by the caller)."""
    if size == 0:
        pay_off[0] = NO_PAYLOAD
        return
    pay_off[0] = q.arena_len
    memcpy(q.arena + q.arena_len, &size, PAY_PREFIX)
    memcpy(q.arena + q.arena_len + PAY_PREFIX, pay, size)
    q.arena_len += PAY_PREFIX + size
    q.arena_live += PAY_PREFIX + size


cdef inline void _pay_move(Queue *q, Py_ssize_t i, uint8_t *out, size_t *out_len) noexcept nogil:
    """Copy the payload of queued fragment i to the output (room reserved by the caller)."""
    cdef uint32_t size = _pay_size(q, i)
    if size:
        memcpy(out + out_len[0], q.arena + q.pay_off[i] + PAY_PREFIX, size)
        out_len[0] += size
        q.arena_live -= PAY_PREFIX + size


cdef inline void _pay_discard(Queue *q, Py_ssize_t i) noexcept nogil:
    if q.pay_off[i] != NO_PAYLOAD:
        q.arena_live -= PAY_PREFIX + _pay_size(q, i)


cdef inline Py_ssize_t _upper_bound(const uint64_t *ts, Py_ssize_t lo, Py_ssize_t hi,
                                    uint64_t value) noexcept nogil:
    """First index in [lo, hi) whose timestamp is > value (ts sorted ascending)."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if ts[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef size_t _queued_payload(const Queue *q) noexcept nogil:
    """Payload bytes of the queued fragments, without their length prefixes: the live arena
    bytes less a prefix per fragment that has a payload (one pass over the offsets; for the
    statistics, not the hot path)."""
    cdef Py_ssize_t i
    cdef size_t with_payload = 0
    for i in range(q.head, q.tail):
        with_payload += q.pay_off[i] != NO_PAYLOAD
    return q.arena_live - PAY_PREFIX * with_payload


cdef inline bint _front_is_barrier(Source *s) noexcept nogil:
    return s.q.n_barriers > 0 and s.q.first_barrier == s.q.head
