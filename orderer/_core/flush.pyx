# The flush (a part that core.pyx includes).
# Rounds of frontiers, mark rule or window rule, merge, and barriers until nothing moves
# (docs/ordering.md, "The flush"); the drain at the end of run ("End of run").


cdef int _flush(OrdererCore self, double now) except -1 nogil:
    """One flush (docs/ordering.md, "The flush"): rounds until nothing moves."""
    if now > self._last_flush:
        self._last_flush = now
    cdef bint popped, resolved
    if self._has_first and self._first_arrival + self._startup_delay <= now:
        while True:
            popped = _pop_round(self, now, POP_BY_RULES)
            resolved = _resolve_barriers(self, now, False)
            if not popped and not resolved:
                break
        self._settled = now
    _update_flow(self)
    return 0


cdef int _drain(OrdererCore self, double now) except -1 nogil:
    """End of run: drain every queue without waiting, resolving barriers as they come."""
    cdef bint popped, resolved
    if now > self._last_flush:
        self._last_flush = now
    while self._queued:
        popped = _pop_round(self, now, POP_DRAIN)
        resolved = _resolve_barriers(self, now, True)
        if not popped and not resolved:
            with gil:
                raise InternalOrdererError("end of run made no progress with fragments queued")
    _update_flow(self)
    return 0


cdef bint _pop_round(OrdererCore self, double now, PopMode mode) except -1 nogil:
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
    _merge_emit(self, now, k)
    return True
