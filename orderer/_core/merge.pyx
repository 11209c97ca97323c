# Merge and late fragments (a part that core.pyx includes).
# The popped prefixes of the source queues merged by (timestamp, source id) with the loser
# tree of merge.h, emitted in order, late fragments flagged or dropped against the
# high-water mark (docs/ordering.md, "Merge and late fragments").

cdef extern from "merge.h":
    bint EVB_DEBUG_CHECKS "EVB_DEBUG"
    ctypedef uint64_t evb_key_t
    Py_ssize_t evb_build_tree(Py_ssize_t *tree, Py_ssize_t *win, const evb_key_t *key,
                              Py_ssize_t k) noexcept nogil
    Py_ssize_t evb_advance(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                           const Py_ssize_t *end, const uint64_t **tsp, Py_ssize_t w,
                           Py_ssize_t k) noexcept nogil
    Py_ssize_t evb_merge_plain(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                               const Py_ssize_t *end, const uint64_t **tsp,
                               const double **arrp, const uint32_t *ids, Py_ssize_t w,
                               Py_ssize_t k, Py_ssize_t count, uint64_t *out_ts,
                               uint32_t *out_source, double *out_arrival,
                               Py_ssize_t n_out) noexcept nogil


cdef int _merge_emit(OrdererCore self, double now, Py_ssize_t k) except -1 nogil:
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
    cdef const double **arrp
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
    _reserve_out(self, total, pay_total)
    key = <evb_key_t *>PyMem_RawMalloc(
        k * (sizeof(evb_key_t) + 5 * sizeof(Py_ssize_t) + sizeof(uint32_t) + 2 * sizeof(void *)))
    if key == NULL:
        with gil:
            raise MemoryError()
    cur = <Py_ssize_t *>(key + k)
    end = cur + k
    dropped_now = end + k
    win = dropped_now + k  # 2k entries
    tsp = <const uint64_t **>(win + 2 * k)
    arrp = <const double **>(tsp + k)
    ids = <uint32_t *>(arrp + k)
    try:
        for i in range(k):
            s = &src[runs[i]]
            cur[i] = s.q.head
            end[i] = s.pop_end
            dropped_now[i] = 0
            tsp[i] = s.q.ts
            arrp[i] = s.q.arrival
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
                ts = key[w]
                s.late += 1
                if hwm - ts > s.max_lateness:
                    s.max_lateness = hwm - ts
                if drop:
                    s.dropped += 1
                    dropped_now[w] += 1
                    _pay_discard(&s.q, cur[w])
                else:
                    self._out_late[n_out] = 1
                    n_out = _emit_queued(self, &s.q, cur[w], ts, ids[w], n_out)
                w = evb_advance(tree, key, cur, end, tsp, w, k)
                j += 1
        first_fast = n_out
        # on time: not late, each raises the high-water mark
        if with_payload:
            while j < total:
                n_out = _emit_queued(self, &src[runs[w]].q, cur[w], key[w], ids[w], n_out)
                w = evb_advance(tree, key, cur, end, tsp, w, k)
                j += 1
        else:
            n_out = evb_merge_plain(tree, key, cur, end, tsp, arrp, ids, w, k, total - j,
                                    out_ts, out_source,
                                    self._out_arrival if self._track_arrival else NULL, n_out)
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
                with gil:
                    raise InternalOrdererError("merge did not consume a popped prefix")
            # every popped fragment is emitted except the dropped ones (counted above)
            s.emitted += (s.pop_end - s.q.head) - dropped_now[i]
            self._queued -= s.pop_end - s.q.head
            s.q.head = s.pop_end
            if s.q.head == s.q.tail:
                _queue_emptied(&s.q)
    finally:
        PyMem_RawFree(key)
    return 0


cdef inline Py_ssize_t _emit_queued(OrdererCore self, Queue *q, Py_ssize_t pos, uint64_t ts,
                                    uint32_t source_id, Py_ssize_t n_out) noexcept nogil:
    """Append queued fragment ``pos`` (timestamp ``ts`` of source ``source_id``) to the output,
    its payload moved out of the queue's arena; room reserved by the caller. Returns the new
    output length."""
    self._out_ts[n_out] = ts
    self._out_source[n_out] = source_id
    if self._track_arrival:
        self._out_arrival[n_out] = q.arrival[pos]
    _pay_move(q, pos, self._out_pay, &self._out_pay_len)
    self._out_pay_end[n_out] = self._out_pay_len
    return n_out + 1
