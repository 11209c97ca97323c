# cython: language_level=3
"""The orderer's hot path: per-source queues, frontier and mark rule, window rule, k-way merge,
late policy, barriers, deadlines, counters and flow control, as docs/ordering.md states them.

Called only by :mod:`orderer.api` (and ``evb replay`` through it). Every public method takes the
time explicitly; the core never reads a clock, so the same code runs live and in replay.
Fragments come in and go out as columnar arrays; no Python object is made per fragment.
"""

from libc.math cimport INFINITY
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove, memset
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc

import numpy as np

cimport numpy as cnp

from orderer.errors import InterfaceError, InternalOrdererError

cnp.import_array()

cdef extern from *:
    """
    /* Invariant checks, compiled in by building with EVB_DEBUG=1 (setup.py defines the macro);
       otherwise the compiler drops them. */
    #ifndef EVB_DEBUG
    #define EVB_DEBUG 0
    #endif
    /* Merge keys are timestamps; runs are numbered in source id order, so a tie on the
       timestamp goes to the lower run number: the order (timestamp, source id). An exhausted
       run has the key UINT64_MAX, which no fragment can carry. */
    typedef uint64_t evb_key_t;
    #define EVB_KEY_MAX UINT64_MAX
    static inline int evb_beats(evb_key_t ka, Py_ssize_t a, evb_key_t kb, Py_ssize_t b) {
        return (ka < kb) | ((ka == kb) & (a < b));
    }
    /* Loser tree over k >= 1 runs: leaf of run r is node k + r, tree[n] the loser at node n;
       win[] (2k entries) is scratch for the winners while building. Returns the winner. */
    static inline Py_ssize_t evb_build_tree(Py_ssize_t *tree, Py_ssize_t *win,
                                            const evb_key_t *key, Py_ssize_t k) {
        Py_ssize_t node, a, b;
        if (k == 1) return 0;
        for (node = 0; node < k; node++) win[k + node] = node;
        for (node = k - 1; node >= 1; node--) {
            a = win[2 * node]; b = win[2 * node + 1];
            if (evb_beats(key[b], b, key[a], a)) { win[node] = b; tree[node] = a; }
            else { win[node] = a; tree[node] = b; }
        }
        return win[1];
    }
    /* After the winner w advanced: replay its path to the root, branch-free. */
    static inline Py_ssize_t evb_replay(Py_ssize_t *tree, const evb_key_t *key, Py_ssize_t w,
                                        Py_ssize_t k);
    /* The common case of a merge: on-time fragments without payload. Writes timestamps and
       source ids of ``count`` fragments; returns the new output length. */
    static Py_ssize_t evb_merge_plain(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                                      const Py_ssize_t *end, const uint64_t **tsp,
                                      const uint32_t *ids, Py_ssize_t w, Py_ssize_t k,
                                      Py_ssize_t count, uint64_t *out_ts, uint32_t *out_source,
                                      Py_ssize_t n_out) {
        uint64_t *ots = out_ts + n_out;
        uint32_t *osrc = out_source + n_out;
        Py_ssize_t j, pos;
        for (j = 0; j < count; j++) {
            ots[j] = key[w];
            osrc[j] = ids[w];
            pos = cur[w] + 1;
            cur[w] = pos;
            key[w] = pos < end[w] ? tsp[w][pos] : EVB_KEY_MAX;
            w = evb_replay(tree, key, w, k);
        }
        return n_out + count;
    }
    static inline Py_ssize_t evb_replay(Py_ssize_t *tree, const evb_key_t *key, Py_ssize_t w,
                                        Py_ssize_t k) {
        evb_key_t kw = key[w], kl, km;
        Py_ssize_t node = (w + k) >> 1, l, m;
        while (node) {
            l = tree[node];
            kl = key[l];
            /* all ones when the stored loser beats w; selections by mask stay branch-free */
            m = -(Py_ssize_t)evb_beats(kl, l, kw, w);
            km = (evb_key_t)m;
            tree[node] = l ^ ((w ^ l) & m);
            w = w ^ ((w ^ l) & m);
            kw = kw ^ ((kw ^ kl) & km);
            node >>= 1;
        }
        return w;
    }
    """
    bint EVB_DEBUG_CHECKS "EVB_DEBUG"
    ctypedef uint64_t evb_key_t
    evb_key_t EVB_KEY_MAX
    uint64_t TS_INF "UINT64_MAX"   # +infinity frontier; never a valid timestamp
    uint64_t NO_PAYLOAD "UINT64_MAX"  # pay_off of a fragment without payload
    Py_ssize_t evb_build_tree(Py_ssize_t *tree, Py_ssize_t *win, const evb_key_t *key,
                              Py_ssize_t k) noexcept nogil
    Py_ssize_t evb_replay(Py_ssize_t *tree, const evb_key_t *key, Py_ssize_t w,
                          Py_ssize_t k) noexcept nogil
    Py_ssize_t evb_merge_plain(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                               const Py_ssize_t *end, const uint64_t **tsp, const uint32_t *ids,
                               Py_ssize_t w, Py_ssize_t k, Py_ssize_t count, uint64_t *out_ts,
                               uint32_t *out_source, Py_ssize_t n_out) noexcept nogil

DEF MIN_QUEUE_CAP = 64
DEF PAY_PREFIX = 4                   # bytes of the length stored before each payload
cdef uint64_t MAX_PAYLOAD = 0xFFFFFFFFU  # a payload's length is stored in 4 bytes


# ---------------------------------------------------------------- memory helpers

cdef class _OwnedBlock:
    """A PyMem block that the core handed to a numpy array; freed with the array."""
    cdef void *ptr

    def __dealloc__(self):
        PyMem_Free(self.ptr)


cdef cnp.ndarray _adopt(void *ptr, Py_ssize_t n, int typenum):
    """A numpy array over ``ptr`` that owns it (no copy)."""
    cdef cnp.npy_intp dims = n
    cdef _OwnedBlock owner = _OwnedBlock.__new__(_OwnedBlock)
    owner.ptr = ptr
    cdef cnp.ndarray array = cnp.PyArray_SimpleNewFromData(1, &dims, typenum, ptr)
    cnp.set_array_base(array, owner)
    return array


# From this many fragments, take_emitted hands its buffers over instead of copying them: a
# drained backlog of millions would otherwise cost a copy of hundreds of MB on the loop.
cdef Py_ssize_t _HANDOVER = 65536


cdef int _grow(void **ptr, size_t new_bytes) except -1:
    cdef void *p = PyMem_Realloc(ptr[0], new_bytes if new_bytes else 1)
    if p == NULL:
        raise MemoryError()
    ptr[0] = p
    return 0


cdef int _queue_resize(Queue *q, Py_ssize_t cap) except -1:
    _grow(<void **>&q.ts, cap * sizeof(uint64_t))
    _grow(<void **>&q.arrival, cap * sizeof(double))
    _grow(<void **>&q.barrier, cap * sizeof(uint32_t))
    _grow(<void **>&q.pay_off, cap * sizeof(uint64_t))
    q.cap = cap
    return 0


cdef int _queue_compact(Queue *q) except -1:
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


cdef int _queue_reserve(Queue *q, Py_ssize_t extra) except -1:
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


cdef int _queue_emptied(Queue *q) except -1:
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


cdef int _arena_reserve(Queue *q, size_t extra) except -1:
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
    fresh = <uint8_t *>PyMem_Malloc(q.arena_cap)
    if fresh == NULL:
        raise MemoryError()
    pos = 0
    for i in range(q.head, q.tail):
        if q.pay_off[i] != NO_PAYLOAD:
            size = PAY_PREFIX + _pay_size(q, i)
            memcpy(fresh + pos, q.arena + q.pay_off[i], size)
            q.pay_off[i] = pos
            pos += size
    PyMem_Free(q.arena)
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


cdef inline bint _front_is_barrier(Source *s) noexcept nogil:
    return s.q.n_barriers > 0 and s.q.first_barrier == s.q.head


cdef class OrdererCore:
    """Mutable state of one orderer. Not thread-safe: one caller at a time."""

    def __cinit__(self):
        self._src = NULL
        self._by_id = NULL
        self._runs = NULL
        self._tree = NULL
        self._out_ts = NULL
        self._out_source = NULL
        self._out_barrier = NULL
        self._out_late = NULL
        self._out_t = NULL
        self._out_pay_end = NULL
        self._out_pay = NULL

    def __init__(self, double build_window, double startup_delay, double barrier_timeout,
                 double source_timeout, bint drop_late, uint64_t global_xoff, uint64_t global_xon,
                 uint64_t queue_xoff, uint64_t queue_xon):
        self._index = {}
        self._cached_index = -1
        self._flow_changes = []
        self._barrier_log = []
        self._last_flush = -INFINITY
        self._last_now = -INFINITY
        self._settled = -INFINITY
        self._mark_none = True
        self.configure(build_window, startup_delay, barrier_timeout, source_timeout, drop_late,
                       global_xoff, global_xon, queue_xoff, queue_xon)
        self._reserve_out(1024, 4096)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._src != NULL:
            for i in range(self._n_src):
                PyMem_Free(self._src[i].q.ts)
                PyMem_Free(self._src[i].q.arrival)
                PyMem_Free(self._src[i].q.barrier)
                PyMem_Free(self._src[i].q.pay_off)
                PyMem_Free(self._src[i].q.arena)
            PyMem_Free(self._src)
        PyMem_Free(self._by_id)
        PyMem_Free(self._runs)
        PyMem_Free(self._tree)
        PyMem_Free(self._out_ts)
        PyMem_Free(self._out_source)
        PyMem_Free(self._out_barrier)
        PyMem_Free(self._out_late)
        PyMem_Free(self._out_t)
        PyMem_Free(self._out_pay_end)
        PyMem_Free(self._out_pay)

    # ------------------------------------------------------------ configuration

    def configure(self, double build_window, double startup_delay, double barrier_timeout,
                  double source_timeout, bint drop_late, uint64_t global_xoff,
                  uint64_t global_xon, uint64_t queue_xoff, uint64_t queue_xon):
        """Set the parameters; takes effect at the next flush (live reconfiguration)."""
        self._build_window = build_window
        self._startup_delay = startup_delay
        self._barrier_timeout = barrier_timeout
        self._source_timeout = source_timeout
        self._drop_late = drop_late
        self._global_xoff = global_xoff
        self._global_xon = global_xon
        self._queue_xoff = queue_xoff
        self._queue_xon = queue_xon

    def declare_source(self, uint32_t source_id):
        """Make a source known before it sends anything (``sources`` in the configuration)."""
        self._source_index(source_id)

    # ------------------------------------------------------------ sources

    cdef Py_ssize_t _source_index(self, uint32_t source_id) except -1:
        if self._cached_index >= 0 and self._cached_id == source_id:
            return self._cached_index
        index = self._index.get(source_id)
        if index is None:
            self._add_source(source_id)
            index = self._n_src - 1
        self._cached_id = source_id
        self._cached_index = index
        return index

    cdef int _add_source(self, uint32_t source_id) except -1:
        cdef Py_ssize_t n = self._n_src, i, j
        cdef Source *s
        if n == self._cap_src:
            self._cap_src = 16 if self._cap_src == 0 else 2 * self._cap_src
            _grow(<void **>&self._src, self._cap_src * sizeof(Source))
            _grow(<void **>&self._by_id, self._cap_src * sizeof(Py_ssize_t))
            _grow(<void **>&self._runs, self._cap_src * sizeof(Py_ssize_t))
            _grow(<void **>&self._tree, 2 * self._cap_src * sizeof(Py_ssize_t))
        s = &self._src[n]
        # zero everything, then set what is not zero
        memset_source(s)
        s.id = source_id
        s.q.first_barrier = -1
        _queue_resize(&s.q, MIN_QUEUE_CAP)
        s.q.arena = <uint8_t *>PyMem_Malloc(256)
        if s.q.arena == NULL:
            raise MemoryError()
        s.q.arena_cap = 256
        s.frontier_none = True
        self._n_src = n + 1
        self._index[source_id] = n
        # keep _by_id sorted by source id (insertion step; sources are few and rarely added)
        i = n
        while i > 0 and self._src[self._by_id[i - 1]].id > source_id:
            self._by_id[i] = self._by_id[i - 1]
            i -= 1
        self._by_id[i] = n
        return 0

    cdef int _note_arrival(self, Source *s, double now) except -1:
        s.has_arrival = True
        s.last_arrival = now
        return 0

    # ------------------------------------------------------------ insertion

    cdef int _insert_one(self, Source *s, uint64_t ts, uint32_t barrier, double now,
                         const uint8_t *pay, uint32_t pay_len) except -1:
        """Insert one fragment in place: after every queued fragment with timestamp <= ts."""
        cdef Queue *q = &s.q
        cdef Py_ssize_t pos, m
        _queue_reserve(q, 1)
        if pay_len:
            _arena_reserve(q, PAY_PREFIX + pay_len)
        if q.tail == q.head or q.ts[q.tail - 1] <= ts:
            pos = q.tail
        else:
            pos = _upper_bound(q.ts, q.head, q.tail, ts)
            m = q.tail - pos
            memmove(q.ts + pos + 1, q.ts + pos, m * sizeof(uint64_t))
            memmove(q.arrival + pos + 1, q.arrival + pos, m * sizeof(double))
            memmove(q.barrier + pos + 1, q.barrier + pos, m * sizeof(uint32_t))
            memmove(q.pay_off + pos + 1, q.pay_off + pos, m * sizeof(uint64_t))
            if q.first_barrier >= pos:
                q.first_barrier += 1
        q.ts[pos] = ts
        q.arrival[pos] = now
        q.barrier[pos] = barrier
        _arena_put(q, pay, pay_len, &q.pay_off[pos])
        q.tail += 1
        if barrier:
            q.n_barriers += 1
            if q.first_barrier < 0 or pos < q.first_barrier:
                q.first_barrier = pos
        self._queued += 1
        return 0

    cdef int _insert_run(self, Source *s, const uint64_t *ts, const uint32_t *barrier,
                         Py_ssize_t n, double now, const uint64_t *pay_off,
                         const uint8_t *payload) except -1:
        """Insert a run of one source: ordinary fragments with non-decreasing timestamps, or
        a single barrier. Once the run reaches the queue's tail the rest is appended in bulk."""
        cdef Queue *q = &s.q
        cdef Py_ssize_t i, j, rest, tail
        cdef size_t pay_total
        cdef uint64_t t
        # counters: duplicates and out_of_order against the previous fragment in arrival order
        cdef uint64_t prev = ts[0], dups = 0, disorder = 0
        if s.has_prev:
            prev = s.prev_ts
            dups = ts[0] == prev
            disorder = ts[0] < prev
        for i in range(1, n):
            dups += ts[i] == ts[i - 1]
            disorder += ts[i] < ts[i - 1]
        s.duplicates += dups
        s.out_of_order += disorder
        s.prev_ts = ts[n - 1]
        s.has_prev = True
        s.received += n
        s.ended = False
        if q.tail == q.head:
            q.arrival_floor = now
        self._note_arrival(s, now)
        if not self._has_first:
            self._has_first = True
            self._first_arrival = now
        i = 0
        while i < n and not (q.tail == q.head or q.ts[q.tail - 1] <= ts[i]):
            self._insert_one(s, ts[i], barrier[i], now, payload + pay_off[i],
                             <uint32_t>(pay_off[i + 1] - pay_off[i]))
            i += 1
        if i == n:
            return 0
        if n - i == 1 and barrier[i]:
            return self._insert_one(s, ts[i], barrier[i], now, payload + pay_off[i],
                                    <uint32_t>(pay_off[i + 1] - pay_off[i]))
        # bulk append of ordinary fragments
        rest = n - i
        pay_total = pay_off[n] - pay_off[i]
        _queue_reserve(q, rest)
        if pay_total:
            _arena_reserve(q, pay_total + PAY_PREFIX * rest)
        tail = q.tail
        memcpy(q.ts + tail, ts + i, rest * sizeof(uint64_t))
        for j in range(rest):
            q.arrival[tail + j] = now
            q.barrier[tail + j] = 0
        if pay_total:
            for j in range(rest):
                _arena_put(q, payload + pay_off[i + j],
                           <uint32_t>(pay_off[i + j + 1] - pay_off[i + j]), &q.pay_off[tail + j])
        else:
            for j in range(rest):
                q.pay_off[tail + j] = NO_PAYLOAD
        q.tail += rest
        self._queued += rest
        return 0

    cdef int _submit_range(self, double now, const uint32_t *source, const uint64_t *ts,
                           const uint32_t *barrier, const uint64_t *pay_off,
                           const uint8_t *payload, Py_ssize_t start, Py_ssize_t stop) except -1:
        """Take in fragments [start, stop) arriving at ``now``.

        The contract is one flush after every fragment. A run of one source with non-decreasing
        timestamps and no barrier goes in whole, followed by one flush, whenever that provably
        emits what per-fragment flushes would (see ``_whole_prefix``); otherwise it goes in
        fragment by fragment until it does. Barriers go in on their own.
        """
        cdef Py_ssize_t i = start, j, index, take
        cdef uint32_t sid
        cdef Source *s
        while i < stop:
            sid = source[i]
            j = i + 1
            if not barrier[i]:
                while j < stop and source[j] == sid and not barrier[j] and ts[j] >= ts[j - 1]:
                    j += 1
            index = self._source_index(sid)
            while i < j:
                s = &self._src[index]
                take = self._whole_prefix(index, now, ts + i, j - i) if j - i > 1 else 1
                self._insert_run(s, ts + i, barrier + i, take, now, pay_off + i, payload)
                i += take
                self._flush(now)
        return 0

    cdef Py_ssize_t _whole_prefix(self, Py_ssize_t index, double now, const uint64_t *ts,
                                  Py_ssize_t n) except -1:
        """How many fragments at the head of a run (ordinary fragments of source ``index``,
        non-decreasing timestamps, all arriving at ``now``) can go in together with one flush
        and emit exactly what a flush after each of them would; at least 1.

        Only from a settled state (a flush already ran the rules at ``now``), and never while
        the source holds a barrier (rare, and subtle: fragment by fragment).

        - Before the startup delay every flush is empty: the whole run.
        - Another source's frontier is *none*: only the window rule can pop, the run's own
          fragments have not waited, and every front that had was popped by the last flush;
          pending barriers can only lose a participant. Nothing moves: the whole run.
        - The source's queue is not empty: its frontier is above the mark, which the others fix
          (their frontiers do not move during the run); each fragment at or below the mark goes
          out alone and in order, the queue never empties, so neither the window rule nor a
          barrier comes into play. Merging them at the end is the same: the whole run.
        - The source is the one everybody waits for (empty, no watermark, not ended), no queue
          holds a barrier and no queued fragment can have waited the window: each fragment
          at or below the others' lowest frontier M releases the others' data up to it, then
          the source is empty again. Merging the strictly increasing prefix at or below M in
          one go gives the same order (equal timestamps would interleave with other sources
          differently) and the same late flags.
        """
        cdef Source *s = &self._src[index]
        cdef Source *o
        cdef Py_ssize_t i, k
        cdef uint64_t lowest = TS_INF, f
        cdef bint laggard
        if s.q.n_barriers > 0:
            return 1
        if not (self._has_first and self._first_arrival + self._startup_delay <= now):
            return n
        if self._settled != now:
            return 1  # no flush has run the rules at this time yet: not settled
        if s.q.tail > s.q.head:
            return n
        laggard = not s.ended and not s.has_watermark
        for i in range(self._n_src):
            if i == index:
                continue
            o = &self._src[i]
            if o.q.tail == o.q.head:
                if not o.ended and not o.has_watermark:
                    return n  # a frontier is none
                f = TS_INF if o.ended else o.watermark
            else:
                if o.q.n_barriers > 0 or o.q.arrival_floor + self._build_window <= now:
                    laggard = False
                f = o.q.ts[o.q.tail - 1]
                if o.has_watermark and o.watermark > f:
                    f = o.watermark
            if f < lowest:
                lowest = f
        if not laggard or ts[0] > lowest:
            return 1
        k = 1
        while k < n and ts[k] <= lowest and ts[k] > ts[k - 1]:
            k += 1
        return k

    # ------------------------------------------------------------ flush

    cdef int _flush(self, double now) except -1:
        """One flush (docs/ordering.md, "The flush"): rounds until nothing moves."""
        if now > self._last_flush:
            self._last_flush = now
        cdef bint popped, resolved
        if self._has_first and self._first_arrival + self._startup_delay <= now:
            while True:
                popped = self._pop_round(now, POP_BY_RULES)
                resolved = self._resolve_barriers(now, False)
                if not popped and not resolved:
                    break
            self._settled = now
        self._update_flow()
        return 0

    cdef int _drain(self, double now) except -1:
        """End of run: drain every queue without waiting, resolving barriers as they come."""
        cdef bint popped, resolved
        if now > self._last_flush:
            self._last_flush = now
        while self._queued:
            popped = self._pop_round(now, POP_DRAIN)
            resolved = self._resolve_barriers(now, True)
            if not popped and not resolved:
                raise InternalOrdererError("end of run made no progress with fragments queued")
        self._update_flow()
        return 0

    cdef bint _pop_round(self, double now, PopMode mode) except -1:
        """Steps 1-4: frontiers, mark or window rule, then merge and emit what was popped."""
        cdef Py_ssize_t i, k = 0, limit, end
        cdef Source *s
        cdef Queue *q
        cdef bint any_none = False
        cdef uint64_t mark = TS_INF, f
        cdef double window = self._build_window
        for i in range(self._n_src):
            s = &self._src[i]
            q = &s.q
            s.frontier_none = False
            if q.n_barriers > 0:
                f = TS_INF
            elif q.tail > q.head:
                f = q.ts[q.tail - 1]
                if s.has_watermark and s.watermark > f:
                    f = s.watermark
            elif s.ended:
                f = TS_INF
            elif s.has_watermark:
                f = s.watermark
            else:
                s.frontier_none = True
                any_none = True
                f = TS_INF
            s.frontier = f
            if not s.frontier_none and f < mark:
                mark = f
        self._mark_none = any_none
        self._mark = mark
        for i in range(self._n_src):
            # runs in source id order: the merge breaks timestamp ties by run number
            s = &self._src[self._by_id[i]]
            q = &s.q
            s.pop_end = q.head
            if q.tail == q.head:
                continue
            limit = q.first_barrier if q.n_barriers > 0 else q.tail
            if mode == POP_DRAIN:
                end = limit
            elif not any_none:
                if limit > q.head and q.ts[limit - 1] <= mark:
                    end = limit
                else:
                    end = _upper_bound(q.ts, q.head, limit, mark)
            else:
                end = q.head
                while end < limit and q.arrival[end] + window <= now:
                    end += 1
            if end > q.head:
                s.pop_end = end
                self._runs[k] = self._by_id[i]
                k += 1
        if k == 0:
            return False
        self._merge_emit(now, k)
        return True

    cdef int _merge_emit(self, double now, Py_ssize_t k) except -1:
        """Step 4: merge the popped prefixes by (timestamp, source id) and emit them in order,
        flagging (or dropping) late fragments against the high-water mark.

        A loser tree over the k popped prefixes, numbered in source id order: log2(k)
        branch-free comparisons per fragment. Arrival order needs no key: inside a queue it is
        already the order of equal timestamps. Because the merged round is sorted, its late
        fragments are exactly its prefix below the high-water mark the round started with, so
        the late policy runs on that prefix only and the rest takes a lean loop.
        """
        cdef Py_ssize_t total = 0, i, w, pos, n_out, j, first_fast
        cdef Py_ssize_t *runs = self._runs
        cdef Py_ssize_t *tree = self._tree
        cdef Source *src = self._src
        cdef Source *s
        cdef Queue *q
        cdef size_t pay_total = 0
        cdef uint64_t ts, hwm = self._hwm
        cdef bint drop = self._drop_late, with_payload = False
        cdef uint32_t plen
        cdef evb_key_t *key
        cdef Py_ssize_t *cur
        cdef Py_ssize_t *end
        cdef Py_ssize_t *win
        cdef Py_ssize_t *dropped_now
        cdef uint32_t *ids
        cdef const uint64_t **tsp
        cdef uint64_t *out_ts
        cdef uint32_t *out_source
        cdef uint64_t *out_pay_end
        for i in range(k):
            s = &src[runs[i]]
            total += s.pop_end - s.q.head
            if s.q.arena_live:
                with_payload = True
                for pos in range(s.q.head, s.pop_end):
                    pay_total += _pay_size(&s.q, pos)
        self._reserve_out(total, pay_total)
        key = <evb_key_t *>PyMem_Malloc(
            k * (sizeof(evb_key_t) + 5 * sizeof(Py_ssize_t) + sizeof(uint32_t) + sizeof(void *)))
        if key == NULL:
            raise MemoryError()
        cur = <Py_ssize_t *>(key + k)
        end = cur + k
        dropped_now = end + k
        win = dropped_now + k  # 2k entries
        tsp = <const uint64_t **>(win + 2 * k)
        ids = <uint32_t *>(tsp + k)
        try:
            for i in range(k):
                s = &src[runs[i]]
                cur[i] = s.q.head
                end[i] = s.pop_end
                dropped_now[i] = 0
                tsp[i] = s.q.ts
                ids[i] = s.id
                key[i] = s.q.ts[s.q.head]
            w = evb_build_tree(tree, win, key, k)
            n_out = self._out_n
            out_ts = self._out_ts
            out_source = self._out_source
            out_pay_end = self._out_pay_end
            j = 0
            # late prefix: below the high-water mark the round started with
            if self._has_hwm:
                while j < total and key[w] < hwm:
                    s = &src[runs[w]]
                    q = &s.q
                    pos = cur[w]
                    ts = key[w]
                    s.late += 1
                    if hwm - ts > s.max_lateness:
                        s.max_lateness = hwm - ts
                    if drop:
                        s.dropped += 1
                        dropped_now[w] += 1
                        _pay_discard(q, pos)
                    else:
                        out_ts[n_out] = ts
                        out_source[n_out] = ids[w]
                        self._out_late[n_out] = 1
                        _pay_move(q, pos, self._out_pay, &self._out_pay_len)
                        out_pay_end[n_out] = self._out_pay_len
                        n_out += 1
                    pos += 1
                    cur[w] = pos
                    key[w] = tsp[w][pos] if pos < end[w] else EVB_KEY_MAX
                    w = evb_replay(tree, key, w, k)
                    j += 1
            first_fast = n_out
            # on time: not late, each raises the high-water mark
            if with_payload:
                while j < total:
                    s = &src[runs[w]]
                    q = &s.q
                    pos = cur[w]
                    out_ts[n_out] = key[w]
                    out_source[n_out] = ids[w]
                    _pay_move(q, pos, self._out_pay, &self._out_pay_len)
                    out_pay_end[n_out] = self._out_pay_len
                    n_out += 1
                    pos += 1
                    cur[w] = pos
                    key[w] = tsp[w][pos] if pos < end[w] else EVB_KEY_MAX
                    w = evb_replay(tree, key, w, k)
                    j += 1
            else:
                n_out = evb_merge_plain(tree, key, cur, end, tsp, ids, w, k, total - j,
                                        out_ts, out_source, n_out)
                j = total
                for j in range(first_fast, n_out):
                    out_pay_end[j] = self._out_pay_len
            if n_out > first_fast:
                hwm = out_ts[n_out - 1]
                self._has_hwm = True
                self._hwm = hwm
                memset(self._out_late + first_fast, 0, n_out - first_fast)
            memset(self._out_barrier + self._out_n, 0, (n_out - self._out_n) * sizeof(uint32_t))
            for j in range(self._out_n, n_out):
                self._out_t[j] = now
            self._out_n = n_out
            for i in range(k):
                s = &src[runs[i]]
                if EVB_DEBUG_CHECKS and cur[i] != s.pop_end:
                    raise InternalOrdererError("merge did not consume a popped prefix")
                # every popped fragment is emitted except the dropped ones (counted above)
                s.emitted += (s.pop_end - s.q.head) - dropped_now[i]
                self._queued -= s.pop_end - s.q.head
                s.q.head = s.pop_end
                if s.q.head == s.q.tail:
                    _queue_emptied(&s.q)
        finally:
            PyMem_Free(key)
        return 0

    cdef bint _resolve_barriers(self, double now, bint drain) except -1:
        """Step 5: resolve a pending barrier if complete, incomplete or timed out."""
        cdef Py_ssize_t i, j, n_out
        cdef size_t pay = 0
        cdef Source *s
        cdef Queue *q
        cdef bint pending = False, all_have = True, alive_all_have = True, complete
        cdef bint dead, homogeneous = True, first = True
        cdef double oldest = INFINITY
        cdef uint32_t kind = 0
        cdef uint64_t ts
        for i in range(self._n_src):
            s = &self._src[i]
            if _front_is_barrier(s):
                pending = True
                pay += _pay_size(&s.q, s.q.head)
                if s.q.arrival[s.q.head] < oldest:
                    oldest = s.q.arrival[s.q.head]
            else:
                all_have = False
                dead = s.has_arrival and s.last_arrival + self._source_timeout <= now
                if not s.ended and not dead:
                    alive_all_have = False
        if not pending:
            return False
        complete = all_have
        if not (complete or drain or alive_all_have or oldest + self._barrier_timeout <= now):
            return False
        self._reserve_out(self._n_src, pay)
        n_out = self._out_n
        missing = []
        for i in range(self._n_src):
            s = &self._src[self._by_id[i]]
            q = &s.q
            if not _front_is_barrier(s):
                s.missing += 1
                missing.append(s.id)
                continue
            ts = q.ts[q.head]
            if first:
                kind = q.barrier[q.head]
                first = False
            elif q.barrier[q.head] != kind:
                homogeneous = False
            self._out_ts[n_out] = ts
            self._out_source[n_out] = s.id
            self._out_barrier[n_out] = q.barrier[q.head]
            self._out_late[n_out] = 0
            self._out_t[n_out] = now
            _pay_move(q, q.head, self._out_pay, &self._out_pay_len)
            self._out_pay_end[n_out] = self._out_pay_len
            n_out += 1
            s.emitted += 1
            s.barriers += 1
            q.head += 1
            q.n_barriers -= 1
            self._queued -= 1
            q.first_barrier = -1
            if q.n_barriers > 0:
                for j in range(q.head, q.tail):
                    if q.barrier[j]:
                        q.first_barrier = j
                        break
            if q.head == q.tail:
                _queue_emptied(q)
        self._out_n = n_out
        if complete:
            self._complete += 1
        else:
            self._incomplete += 1
        if homogeneous:
            self._homogeneous += 1
        else:
            self._heterogeneous += 1
        self._barrier_log.append((now, complete, homogeneous, tuple(missing)))
        return True

    # ------------------------------------------------------------ time

    cdef double _next_deadline(self):
        """The earliest deadline after the last flush (docs/ordering.md, "Time and deadlines")."""
        cdef double best = INFINITY, d, oldest = INFINITY
        cdef double after = self._last_flush
        cdef Py_ssize_t i
        cdef Source *s
        cdef bint pending = False
        if not self._has_first:
            return INFINITY
        d = self._first_arrival + self._startup_delay
        if d > after:
            # flushes before the startup delay emit nothing: no other deadline matters yet
            return d
        for i in range(self._n_src):
            s = &self._src[i]
            if s.q.tail == s.q.head:
                continue
            if _front_is_barrier(s):
                pending = True
                if s.q.arrival[s.q.head] < oldest:
                    oldest = s.q.arrival[s.q.head]
            else:
                d = s.q.arrival[s.q.head] + self._build_window
                if d > after and d < best:
                    best = d
        if pending:
            # a source's death only matters to a pending barrier
            d = oldest + self._barrier_timeout
            if d > after and d < best:
                best = d
            for i in range(self._n_src):
                s = &self._src[i]
                if s.has_arrival:
                    d = s.last_arrival + self._source_timeout
                    if d > after and d < best:
                        best = d
        return best

    cdef int _advance(self, double t, bint inclusive) except -1:
        """Run every deadline before ``t`` (or at ``t`` too) at its own time, in order."""
        cdef double d
        while True:
            d = self._next_deadline()
            if d < t or (inclusive and d == t):
                self._flush(d)
            else:
                return 0

    # ------------------------------------------------------------ flow control

    cdef int _update_flow(self) except -1:
        cdef Py_ssize_t i, depth
        cdef Source *s
        cdef bint paused
        if self._global_paused:
            if self._queued < self._global_xon:
                self._global_paused = False
        elif self._queued > self._global_xoff:
            self._global_paused = True
        for i in range(self._n_src):
            s = &self._src[i]
            depth = s.q.tail - s.q.head
            if s.queue_xoff:
                if <uint64_t>depth < self._queue_xon:
                    s.queue_xoff = False
            elif <uint64_t>depth > self._queue_xoff:
                s.queue_xoff = True
            # Under global XOFF the sources that hold the output back (empty, or at the mark)
            # keep sending: pausing them would stop the very data that lets queues drain.
            paused = s.queue_xoff or (
                self._global_paused and depth > 0 and not s.frontier_none
                and (self._mark_none or s.frontier > self._mark))
            if paused != s.paused:
                s.paused = paused
                self._flow_changes.append((s.id, paused))
        return 0

    cdef int _reserve_out(self, Py_ssize_t n, size_t pay) except -1:
        cdef Py_ssize_t cap
        cdef size_t pcap
        if self._out_n + n > self._out_cap:
            cap = self._out_cap * 2
            if cap < self._out_n + n:
                cap = self._out_n + n
            _grow(<void **>&self._out_ts, cap * sizeof(uint64_t))
            _grow(<void **>&self._out_source, cap * sizeof(uint32_t))
            _grow(<void **>&self._out_barrier, cap * sizeof(uint32_t))
            _grow(<void **>&self._out_late, cap * sizeof(uint8_t))
            _grow(<void **>&self._out_t, cap * sizeof(double))
            _grow(<void **>&self._out_pay_end, cap * sizeof(uint64_t))
            self._out_cap = cap
        if self._out_pay_len + pay > self._out_pay_cap:
            pcap = self._out_pay_cap * 2
            if pcap < self._out_pay_len + pay:
                pcap = self._out_pay_len + pay
            _grow(<void **>&self._out_pay, pcap)
            self._out_pay_cap = pcap
        return 0

    # ------------------------------------------------------------ public, coarse calls

    def submit(self, double now, const uint32_t[::1] source, const uint64_t[::1] timestamp,
               const uint32_t[::1] barrier, const uint64_t[::1] payload_offsets,
               const uint8_t[::1] payload):
        """Fragments arriving at ``now``: deadlines before ``now`` run first, then the fragments
        go in, each (run) followed by a flush. The whole batch is checked before anything is
        taken in, so a bad batch changes nothing."""
        cdef Py_ssize_t n = timestamp.shape[0]
        _check_batch(source, timestamp, barrier, payload_offsets, payload)
        self._check_time(now)
        if n == 0:
            return
        self._advance(now, False)
        self._submit_range(now, &source[0], &timestamp[0], &barrier[0], &payload_offsets[0],
                           &payload[0] if payload.shape[0] else <const uint8_t *>NULL, 0, n)

    def watermark(self, double now, uint32_t source_id, uint64_t watermark):
        """Source promises nothing older than ``watermark`` will come; it only moves up."""
        self._check_time(now)
        self._advance(now, False)
        s = self._source_index(source_id)
        self._watermark(s, now, watermark)
        self._flush(now)

    def end_source(self, double now, uint32_t source_id):
        """Source said end of stream; a later fragment from it re-opens it."""
        self._check_time(now)
        self._advance(now, False)
        s = self._source_index(source_id)
        self._src[s].ended = True
        self._note_arrival(&self._src[s], now)
        self._flush(now)

    def run_deadlines(self, double now):
        """Live timer: run every deadline up to and including ``now`` at its own time."""
        self._check_time(now)
        self._advance(now, True)

    def flush(self, double now):
        """One flush at ``now`` after the deadlines before it."""
        self._check_time(now)
        self._advance(now, False)
        self._flush(now)

    def end_of_run(self, double now):
        """Drain everything now (end of a replay file, or an explicit end of run)."""
        self._check_time(now)
        self._advance(now, False)
        self._drain(now)

    def next_deadline(self):
        """Time of the next deadline after the last flush, or +inf."""
        return self._next_deadline()

    def replay(self, const uint8_t[::1] kind, const double[::1] t, const uint32_t[::1] source,
               const uint64_t[::1] value, const uint32_t[::1] barrier,
               const uint64_t[::1] payload_offsets, const uint8_t[::1] payload):
        """Take in a whole replay: records sorted by ``t`` (value is the timestamp of a fragment,
        the watermark of a watermark record). Same code as the live calls, without a Python
        round-trip per record."""
        cdef Py_ssize_t n = t.shape[0], i = 0, j
        cdef double now
        cdef Source *s
        cdef const uint8_t *pay = &payload[0] if payload.shape[0] else <const uint8_t *>NULL
        _check_batch(source, value, barrier, payload_offsets, payload, kind=kind)
        if kind.shape[0] != n:
            raise InterfaceError(f"kind has {kind.shape[0]} entries, t has {n}")
        for i in range(1, n):
            if t[i] < t[i - 1]:
                raise InterfaceError(f"record {i}: t={t[i]} is before the previous t={t[i - 1]}")
        if n:
            self._check_time(t[0])
        i = 0
        while i < n:
            now = t[i]
            self._advance(now, False)
            if kind[i] == RECORD_FRAGMENT:
                j = i + 1
                while j < n and kind[j] == RECORD_FRAGMENT and t[j] == now:
                    j += 1
                self._submit_range(now, &source[0], &value[0], &barrier[0], &payload_offsets[0],
                                   pay, i, j)
                i = j
                continue
            s = &self._src[self._source_index(source[i])]
            if kind[i] == RECORD_WATERMARK:
                self._watermark(s - self._src, now, value[i])
            else:
                s.ended = True
                self._note_arrival(s, now)
            self._flush(now)
            i += 1

    cdef _watermark(self, Py_ssize_t index, double now, uint64_t watermark):
        cdef Source *s = &self._src[index]
        if not s.has_watermark or watermark > s.watermark:
            s.watermark = watermark
            s.has_watermark = True
        self._note_arrival(s, now)

    cdef _check_time(self, double now):
        if now != now:
            raise InterfaceError("time is NaN")
        if now < self._last_flush or now < self._last_now:
            raise InterfaceError(
                f"time went backwards: {now} is before {max(self._last_flush, self._last_now)}")
        self._last_now = now

    # ------------------------------------------------------------ reading out

    def take_emitted(self):
        """Everything emitted since the last call, as columns (numpy arrays) plus ``first_seq``."""
        cdef Py_ssize_t n = self._out_n
        if n >= _HANDOVER:
            return self._hand_over_emitted()
        cdef cnp.ndarray ts = np.empty(n, dtype=np.uint64)
        cdef cnp.ndarray source = np.empty(n, dtype=np.uint32)
        cdef cnp.ndarray barrier = np.empty(n, dtype=np.uint32)
        cdef cnp.ndarray late = np.empty(n, dtype=np.bool_)
        cdef cnp.ndarray t = np.empty(n, dtype=np.float64)
        cdef cnp.ndarray offsets = np.empty(n + 1, dtype=np.uint64)
        cdef cnp.ndarray payload = np.empty(self._out_pay_len, dtype=np.uint8)
        cdef uint64_t first_seq = self._out_seq
        if n:
            memcpy(cnp.PyArray_DATA(ts), self._out_ts, n * sizeof(uint64_t))
            memcpy(cnp.PyArray_DATA(source), self._out_source, n * sizeof(uint32_t))
            memcpy(cnp.PyArray_DATA(barrier), self._out_barrier, n * sizeof(uint32_t))
            memcpy(cnp.PyArray_DATA(late), self._out_late, n * sizeof(uint8_t))
            memcpy(cnp.PyArray_DATA(t), self._out_t, n * sizeof(double))
            memcpy(<uint64_t *>cnp.PyArray_DATA(offsets) + 1, self._out_pay_end,
                   n * sizeof(uint64_t))
        (<uint64_t *>cnp.PyArray_DATA(offsets))[0] = 0
        if self._out_pay_len:
            memcpy(cnp.PyArray_DATA(payload), self._out_pay, self._out_pay_len)
        self._out_seq += n
        self._out_n = 0
        self._out_pay_len = 0
        self._shrink_out(n)
        return first_seq, t, source, ts, barrier, late, offsets, payload

    cdef tuple _hand_over_emitted(self):
        """take_emitted without copying: the output buffers become the arrays, and the next
        emission starts on fresh ones. Only the payload offsets are built (a leading 0)."""
        cdef Py_ssize_t n = self._out_n
        cdef uint64_t first_seq = self._out_seq
        cdef cnp.ndarray offsets = np.empty(n + 1, dtype=np.uint64)
        (<uint64_t *>cnp.PyArray_DATA(offsets))[0] = 0
        memcpy(<uint64_t *>cnp.PyArray_DATA(offsets) + 1, self._out_pay_end, n * sizeof(uint64_t))
        cdef void *ts = self._out_ts
        cdef void *source = self._out_source
        cdef void *barrier = self._out_barrier
        cdef void *late = self._out_late
        cdef void *t = self._out_t
        cdef void *payload = self._out_pay
        cdef Py_ssize_t pay_len = self._out_pay_len
        self._out_ts = NULL
        self._out_source = NULL
        self._out_barrier = NULL
        self._out_late = NULL
        self._out_t = NULL
        self._out_pay = NULL
        self._out_cap = 0
        self._out_pay_cap = 0
        PyMem_Free(self._out_pay_end)
        self._out_pay_end = NULL
        self._out_seq += n
        self._out_n = 0
        self._out_pay_len = 0
        return (
            first_seq,
            _adopt(t, n, cnp.NPY_FLOAT64),
            _adopt(source, n, cnp.NPY_UINT32),
            _adopt(ts, n, cnp.NPY_UINT64),
            _adopt(barrier, n, cnp.NPY_UINT32),
            _adopt(late, n, cnp.NPY_BOOL),
            offsets,
            _adopt(payload, pay_len, cnp.NPY_UINT8),
        )

    cdef int _shrink_out(self, Py_ssize_t used) except -1:
        """Give back output buffers that a burst (an end of run, a drained backlog) grew."""
        cdef Py_ssize_t cap
        if self._out_cap > 262144 and used < self._out_cap // 4:
            cap = max(2 * used, 1024)
            _grow(<void **>&self._out_ts, cap * sizeof(uint64_t))
            _grow(<void **>&self._out_source, cap * sizeof(uint32_t))
            _grow(<void **>&self._out_barrier, cap * sizeof(uint32_t))
            _grow(<void **>&self._out_late, cap * sizeof(uint8_t))
            _grow(<void **>&self._out_t, cap * sizeof(double))
            _grow(<void **>&self._out_pay_end, cap * sizeof(uint64_t))
            self._out_cap = cap
        if self._out_pay_cap > (1 << 24):
            _grow(<void **>&self._out_pay, 1 << 16)
            self._out_pay_cap = 1 << 16
        return 0

    def take_flow_changes(self):
        """Pause/resume transitions since the last call: a list of (source id, paused)."""
        changes = self._flow_changes
        self._flow_changes = []
        return changes

    def take_barrier_log(self):
        """Resolved barriers since the last call: (time, complete, homogeneous, missing ids)."""
        log = self._barrier_log
        self._barrier_log = []
        return log

    def counters(self):
        """Counters of docs/ordering.md in the ``evb replay`` STATS layout."""
        cdef Py_ssize_t i
        cdef Source *s
        sources = {}
        missing = {}
        names = ("received", "emitted", "late", "dropped", "duplicates", "out_of_order")
        totals = dict.fromkeys(names, 0)
        for i in range(self._n_src):
            s = &self._src[self._by_id[i]]
            per = {
                "received": s.received, "emitted": s.emitted, "late": s.late,
                "dropped": s.dropped, "duplicates": s.duplicates,
                "out_of_order": s.out_of_order, "max_lateness": s.max_lateness,
                "barriers": s.barriers,
            }
            for name in names:
                totals[name] += per[name]
            sources[str(s.id)] = per
            if s.missing:
                missing[str(s.id)] = s.missing
        return {
            "totals": totals,
            "barriers": {
                "complete": self._complete, "incomplete": self._incomplete,
                "homogeneous": self._homogeneous, "heterogeneous": self._heterogeneous,
            },
            "missing": missing,
            "sources": sources,
        }

    def source_states(self, double now):
        """Live view per source: queue depth, watermark, ended, dead, paused."""
        cdef Py_ssize_t i
        cdef Source *s
        out = {}
        for i in range(self._n_src):
            s = &self._src[self._by_id[i]]
            out[s.id] = {
                "queued": s.q.tail - s.q.head,
                "watermark": s.watermark if s.has_watermark else None,
                "ended": bool(s.ended),
                "dead": bool(s.has_arrival and s.last_arrival + self._source_timeout <= now),
                "paused": bool(s.paused),
                "last_arrival": s.last_arrival if s.has_arrival else None,
            }
        return out

    def memory_bytes(self):
        """Bytes held by the queues (arrays and payload arenas, allocated capacity)."""
        cdef Py_ssize_t i
        cdef size_t total = 0
        for i in range(self._n_src):
            # ts, arrival, pay_off (8 bytes each) + barrier (4 bytes) = 28 bytes
            total += self._src[i].q.cap * (2 * sizeof(uint64_t) + sizeof(double) + sizeof(uint32_t))
            total += self._src[i].q.arena_cap
        return total

    @property
    def queued(self):
        """Fragments waiting in all queues."""
        return self._queued

    @property
    def high_water_mark(self):
        return self._hwm if self._has_hwm else None

    @property
    def last_flush(self):
        return self._last_flush

    @property
    def emitted_seq(self):
        """Sequence number the next emitted fragment will get (= fragments emitted so far)."""
        return self._out_seq + self._out_n

    @property
    def global_paused(self):
        return bool(self._global_paused)

    @property
    def source_ids(self):
        return [self._src[self._by_id[i]].id for i in range(self._n_src)]


cdef inline void memset_source(Source *s) noexcept nogil:
    cdef char *p = <char *>s
    cdef size_t i
    for i in range(sizeof(Source)):
        p[i] = 0


cdef Py_ssize_t _first_violation(const uint64_t *ts, const uint64_t *off, Py_ssize_t n,
                                 uint64_t max_len, Violation *what) noexcept nogil:
    """The first fragment of a batch that breaks a rule every batch must keep, or -1: a
    reserved timestamp (``ts`` may be NULL: not checked), payload offsets going backwards, a
    payload longer than ``max_len`` (``off`` may be NULL: no payloads). The one scan behind
    the core's own check and the service's check of a wire message."""
    cdef Py_ssize_t i
    cdef bint bad = False
    what[0] = VIOLATION_NONE
    # accumulate without branches (vectorises); look for the culprit only on failure
    if ts != NULL:
        for i in range(n):
            bad |= ts[i] == TS_INF
    if off != NULL:
        for i in range(n):
            bad |= (off[i + 1] < off[i]) | (off[i + 1] - off[i] > max_len)
    if not bad:
        return -1
    for i in range(n):
        if ts != NULL and ts[i] == TS_INF:
            what[0] = VIOLATION_RESERVED_TIMESTAMP
            return i
        if off != NULL:
            if off[i + 1] < off[i]:
                what[0] = VIOLATION_OFFSETS_BACKWARDS
                return i
            if off[i + 1] - off[i] > max_len:
                what[0] = VIOLATION_PAYLOAD_TOO_LARGE
                return i
    return -1


RULE_RESERVED_TIMESTAMP = VIOLATION_RESERVED_TIMESTAMP
RULE_OFFSETS_BACKWARDS = VIOLATION_OFFSETS_BACKWARDS
RULE_PAYLOAD_TOO_LARGE = VIOLATION_PAYLOAD_TOO_LARGE


def first_violation(const uint64_t[::1] timestamp, const uint64_t[::1] payload_offsets,
                    uint64_t max_payload):
    """``(rule, index)`` of the first fragment breaking a batch rule, or ``(0, -1)``; the rules
    are the ``RULE_*`` constants: reserved timestamp, payload offsets going backwards, payload
    above ``max_payload``.
    ``payload_offsets`` is empty when the batch has no payloads. For callers that phrase the
    error in their own terms (the service names wire fields)."""
    cdef Py_ssize_t n = timestamp.shape[0]
    cdef Violation what
    cdef Py_ssize_t index
    if payload_offsets.shape[0] and payload_offsets.shape[0] != n + 1:
        raise InterfaceError(
            f"payload_offsets has {payload_offsets.shape[0]} entries, expected {n + 1}")
    if n == 0:
        return 0, -1
    index = _first_violation(&timestamp[0],
                             &payload_offsets[0] if payload_offsets.shape[0] else NULL,
                             n, max_payload, &what)
    return <int>what, index


cdef int _check_batch(const uint32_t[::1] source, const uint64_t[::1] timestamp,
                      const uint32_t[::1] barrier, const uint64_t[::1] payload_offsets,
                      const uint8_t[::1] payload, kind=None) except -1:
    """Validate a whole batch before any of it is taken in; errors name the field."""
    cdef Py_ssize_t n = timestamp.shape[0], i
    if source.shape[0] != n:
        raise InterfaceError(f"source has {source.shape[0]} entries, timestamp has {n}")
    if barrier.shape[0] != n:
        raise InterfaceError(f"barrier has {barrier.shape[0]} entries, timestamp has {n}")
    if payload_offsets.shape[0] != n + 1:
        raise InterfaceError(
            f"payload_offsets has {payload_offsets.shape[0]} entries, expected {n + 1} "
            f"(one more than timestamp)")
    if n == 0:
        return 0
    if payload_offsets[n] > <uint64_t>payload.shape[0]:
        raise InterfaceError(
            f"payload_offsets[{n}]={payload_offsets[n]} is beyond the payload "
            f"({payload.shape[0]} bytes)")
    cdef const uint64_t *ts = &timestamp[0]
    cdef const uint64_t *off = &payload_offsets[0]
    cdef Violation what
    cdef Py_ssize_t index
    cdef const uint8_t[::1] kinds
    if kind is not None:
        kinds = kind
        for i in range(n):
            if kinds[i] == RECORD_FRAGMENT and ts[i] == TS_INF:
                raise InterfaceError(f"timestamp[{i}] is 2**64-1, reserved for +infinity")
            if kinds[i] > RECORD_END:
                raise InterfaceError(f"kind[{i}]={kinds[i]} is not a record kind")
        index = _first_violation(NULL, off, n, MAX_PAYLOAD, &what)
    else:
        index = _first_violation(ts, off, n, MAX_PAYLOAD, &what)
    if what == VIOLATION_RESERVED_TIMESTAMP:
        raise InterfaceError(f"timestamp[{index}] is 2**64-1, reserved for +infinity")
    if what == VIOLATION_OFFSETS_BACKWARDS:
        raise InterfaceError(
            f"payload_offsets[{index + 1}] is below payload_offsets[{index}]")
    if what == VIOLATION_PAYLOAD_TOO_LARGE:
        raise InterfaceError(f"payload of fragment {index} is 4 GiB or more")
    return 0
