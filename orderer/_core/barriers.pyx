# Barriers (a part that core.pyx includes).
# A pending barrier resolved when complete, incomplete (a source dead or ended), timed out,
# or at the end of run; counted complete/incomplete and homogeneous/heterogeneous, with the
# missing sources logged with the output offset of the barrier's first fragment and the type
# each source sent (docs/ordering.md, "Barriers", "Dead sources"). Under reset_on_begin_run, a
# complete begin-run barrier restarts the clocks ("Runs one after another").

DEF BEGIN_RUN = 1                    # the barrier type of a run's start (NSCLDAQ's BEGIN_RUN)


cdef bint _resolve_barriers(OrdererCore self, double now, bint drain) except -1 nogil:
    """Step 5: resolve a pending barrier if complete, incomplete or timed out."""
    cdef Py_ssize_t i
    cdef size_t pay = 0
    cdef Source *s
    cdef bint pending = False, all_have = True, alive_all_have = True, complete
    cdef double oldest = INFINITY
    for i in range(self._n_src):
        s = &self._src[i]
        if _front_is_barrier(s):
            pending = True
            pay += _pay_size(&s.q, s.q.head)
            if s.q.arrival[s.q.head] < oldest:
                oldest = s.q.arrival[s.q.head]
        else:
            all_have = False
            if not s.ended and not _is_dead(self, s, now):
                alive_all_have = False
    if not pending:
        return False
    complete = all_have
    if not (complete or drain or alive_all_have or oldest + self._barrier_timeout <= now):
        return False
    with gil:  # rare (begin and end of run, sync points), and it logs Python objects
        _emit_barrier(self, now, complete, pay)
    return True


cdef int _emit_barrier(OrdererCore self, double now, bint complete, size_t pay) except -1:
    """Emit the resolved barrier's fragments in source id order, count it, and log it with
    the sources it missed."""
    cdef Py_ssize_t i, j, n_out
    cdef Source *s
    cdef Queue *q
    cdef bint homogeneous = True, first = True
    cdef uint32_t kind = 0
    cdef uint64_t ts
    _reserve_out(self, self._n_src, pay)
    n_out = self._out_n
    offset = self._out_seq + n_out
    missing = []
    types = {}
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
        types[s.id] = q.barrier[q.head]
        self._out_ts[n_out] = ts
        self._out_source[n_out] = s.id
        self._out_barrier[n_out] = q.barrier[q.head]
        self._out_late[n_out] = 0
        self._out_t[n_out] = now
        if self._track_arrival:
            self._out_arrival[n_out] = q.arrival[q.head]
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
    self._barrier_log.append((offset, now, complete, homogeneous, types, tuple(missing)))
    if self._reset_on_begin_run and complete and homogeneous and kind == BEGIN_RUN:
        _reset_clocks(self)
    return 0


cdef void _reset_clocks(OrdererCore self) noexcept nogil:
    """A new run's clocks start again: forget the high-water mark, every source's previous
    timestamp and watermark (NSCLDAQ's resetTimestamps), all of the old run's clock."""
    cdef Py_ssize_t i
    self._has_hwm = False
    self._hwm = 0
    for i in range(self._n_src):
        self._src[i].has_prev = False
        self._src[i].prev_ts = 0
        self._src[i].has_watermark = False
        self._src[i].watermark = 0
