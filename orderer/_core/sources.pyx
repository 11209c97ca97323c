# Sources and what arrives from them (a part that core.pyx includes).
# The source table (index by source id, kept sorted by id for the merge), arrivals and
# watermarks, and taking fragments into a source's queue: one at a time, or a run in bulk
# when that provably emits what a flush after each fragment would (docs/ordering.md, "Sources
# and their queues", "Frontiers"). Counts received, duplicates and out-of-order fragments,
# and keeps the last out-of-order arrivals; dead or alive, marked or revived ("Dead sources").

DEF DISORDER_KEPT = 10               # out-of-order arrivals kept per source (core.pxd's ring)


cdef Py_ssize_t _find_source(OrdererCore self, uint32_t source_id) noexcept nogil:
    """Index of a known source in ``_src``, or -1: a binary search of ``_by_id`` (sorted by
    id), so that taking fragments in never needs the GIL."""
    cdef Py_ssize_t lo = 0, hi = self._n_src, mid
    cdef uint32_t found
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        found = self._src[self._by_id[mid]].id
        if found == source_id:
            return self._by_id[mid]
        if found < source_id:
            lo = mid + 1
        else:
            hi = mid
    return -1


cdef Py_ssize_t _source_index(OrdererCore self, uint32_t source_id) except -1 nogil:
    cdef Py_ssize_t index
    if self._cached_index >= 0 and self._cached_id == source_id:
        return self._cached_index
    index = _find_source(self, source_id)
    if index < 0:
        _add_source(self, source_id)
        index = self._n_src - 1
    self._cached_id = source_id
    self._cached_index = index
    return index


cdef int _add_source(OrdererCore self, uint32_t source_id) except -1 nogil:
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
    s.q.arena = <uint8_t *>PyMem_RawMalloc(256)
    if s.q.arena == NULL:
        with gil:
            raise MemoryError()
    s.q.arena_cap = 256
    s.frontier_none = True
    self._n_src = n + 1
    # keep _by_id sorted by source id (insertion step; sources are few and rarely added)
    i = n
    while i > 0 and self._src[self._by_id[i - 1]].id > source_id:
        self._by_id[i] = self._by_id[i - 1]
        i -= 1
    self._by_id[i] = n
    return 0


cdef inline void memset_source(Source *s) noexcept nogil:
    cdef char *p = <char *>s
    cdef size_t i
    for i in range(sizeof(Source)):
        p[i] = 0


cdef int _note_arrival(OrdererCore self, Source *s, double now) except -1 nogil:
    s.has_arrival = True
    s.last_arrival = now
    s.marked_dead = False  # any record from a source makes it live again
    return 0


cdef inline double _silent_since(const Source *s) noexcept nogil:
    """Start of a source's silence clock (it has sent something): the later of its last
    arrival and its last revive."""
    if s.revived and s.revived_at > s.last_arrival:
        return s.revived_at
    return s.last_arrival


cdef bint _is_dead(OrdererCore self, Source *s, double now) noexcept nogil:
    """Marked dead, or silent for ``source_timeout`` since the later of its last arrival and
    its last revive; a source that never sent anything is never dead by timeout."""
    if s.marked_dead:
        return True
    return s.has_arrival and _silent_since(s) + self._source_timeout <= now


cdef int _set_source_state(OrdererCore self, Source *s, bint dead, double now) except -1 nogil:
    """Mark a source dead (it stops holding barriers back) or revive it (its silence clock
    starts again at ``now``); not an arrival from the source. The caller flushes."""
    if dead:
        s.marked_dead = True
    else:
        s.marked_dead = False
        s.revived = True
        s.revived_at = now
    return 0


cdef int _note_disorder(OrdererCore self, Source *s, const uint64_t *ts, Py_ssize_t n,
                        bint has_prev, uint64_t prev, double now) except -1 nogil:
    """Keep the last out-of-order arrivals of a run that has some, in the source's ring: only
    the last DISORDER_KEPT of the run are looked for, from its end, so a long disordered run
    costs one scan. Plain C: a shuffled source must not pay a Python object per fragment."""
    cdef Py_ssize_t i = n - 1, found = 0, k
    cdef Py_ssize_t at[DISORDER_KEPT]
    cdef uint64_t before[DISORDER_KEPT]
    while i >= 0 and found < DISORDER_KEPT:
        if i == 0 and not has_prev:
            break
        before[found] = ts[i - 1] if i > 0 else prev
        if ts[i] < before[found]:
            at[found] = i
            found += 1
        i -= 1
    for k in range(found - 1, -1, -1):  # oldest first
        i = s.disorder_next
        s.disorder_prev[i] = before[k]
        s.disorder_ts[i] = ts[at[k]]
        s.disorder_t[i] = now
        s.disorder_next = (i + 1) % DISORDER_KEPT
        if s.disorder_n < DISORDER_KEPT:
            s.disorder_n += 1
    return 0


cdef list _disorder_list(const Source *s):
    """The source's last out-of-order arrivals, oldest first, as dicts."""
    cdef Py_ssize_t k, i
    cdef Py_ssize_t start = (s.disorder_next - s.disorder_n + DISORDER_KEPT) % DISORDER_KEPT
    out = []
    for k in range(s.disorder_n):
        i = (start + k) % DISORDER_KEPT
        out.append({"previous": s.disorder_prev[i], "timestamp": s.disorder_ts[i],
                    "t": s.disorder_t[i]})
    return out


cdef int _watermark(OrdererCore self, Py_ssize_t index, double now,
                    uint64_t watermark) except -1 nogil:
    cdef Source *s = &self._src[index]
    if not s.has_watermark or watermark > s.watermark:
        s.watermark = watermark
        s.has_watermark = True
    return _note_arrival(self, s, now)


cdef int _insert_one(OrdererCore self, Source *s, uint64_t ts, uint32_t barrier, double now,
                     const uint8_t *pay, uint32_t pay_len) except -1 nogil:
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


cdef int _insert_run(OrdererCore self, Source *s, const uint64_t *ts, const uint32_t *barrier,
                     Py_ssize_t n, double now, const uint64_t *pay_off,
                     const uint8_t *payload) except -1 nogil:
    """Insert a run of one source: ordinary fragments with non-decreasing timestamps, or
    a single barrier. Once the run reaches the queue's tail the rest is appended in bulk."""
    cdef Queue *q = &s.q
    cdef Py_ssize_t i, j, rest, tail
    cdef size_t pay_total
    cdef uint64_t t
    # counters: duplicates and out_of_order against the previous fragment in arrival order
    cdef uint64_t prev = ts[0], dups = 0, disorder = 0
    cdef bint had_prev = s.has_prev
    if had_prev:
        prev = s.prev_ts
        dups = ts[0] == prev
        disorder = ts[0] < prev
    for i in range(1, n):
        dups += ts[i] == ts[i - 1]
        disorder += ts[i] < ts[i - 1]
    s.duplicates += dups
    s.out_of_order += disorder
    if disorder:
        _note_disorder(self, s, ts, n, had_prev, prev, now)
    s.prev_ts = ts[n - 1]
    s.has_prev = True
    s.received += n
    s.ended = False
    if q.tail == q.head:
        q.arrival_floor = now
    _note_arrival(self, s, now)
    if not self._has_first:
        self._has_first = True
        self._first_arrival = now
    i = 0
    while i < n and not (q.tail == q.head or q.ts[q.tail - 1] <= ts[i]):
        _insert_one(self, s, ts[i], barrier[i], now, payload + pay_off[i],
                         <uint32_t>(pay_off[i + 1] - pay_off[i]))
        i += 1
    if i == n:
        return 0
    if n - i == 1 and barrier[i]:
        return _insert_one(self, s, ts[i], barrier[i], now, payload + pay_off[i],
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


cdef int _submit_range(OrdererCore self, double now, const uint32_t *source, const uint64_t *ts,
                       const uint32_t *barrier, const uint64_t *pay_off, const uint8_t *payload,
                       Py_ssize_t start, Py_ssize_t stop) except -1 nogil:
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
        index = _source_index(self, sid)
        while i < j:
            s = &self._src[index]
            take = _whole_prefix(self, index, now, ts + i, j - i) if j - i > 1 else 1
            _insert_run(self, s, ts + i, barrier + i, take, now, pay_off + i, payload)
            i += take
            _flush(self, now)
    return 0


cdef Py_ssize_t _whole_prefix(OrdererCore self, Py_ssize_t index, double now, const uint64_t *ts,
                              Py_ssize_t n) except -1 nogil:
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
    - The source is the one everybody waits for (empty, not ended), no queue holds a barrier
      and no queued fragment can have waited the window: each fragment at or below the
      others' lowest frontier M releases the others' data up to it, then the source is
      empty again. Merging the strictly increasing prefix at or below M in one go gives the
      same order (equal timestamps would interleave with other sources differently) and the
      same late flags. A watermark W changes nothing when the run starts at or above it:
      emptied again, the source's frontier is W, at or below the fragment just popped, so
      the mark stays where that fragment's flush left it and nothing more moves (without a
      watermark it is *none*, and the window rule, which has nothing to pop, decides). This
      is every source of a run over several orderers (each has sent crossing watermarks):
      fragment by fragment, one flush each, its orderer's core cost 2 to 3 times as much
      per fragment as one orderer's.
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
    if s.ended or (s.has_watermark and ts[0] < s.watermark):
        return 1
    laggard = True
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
