# Time and deadlines (a part that core.pyx includes).
# The core never reads a clock: every call brings its time, which may not go backwards, and
# the deadlines (startup delay, window rule, barrier and source timeouts) before it run
# first, each at its own time (docs/ordering.md, "Time and deadlines").


cdef double _next_deadline(OrdererCore self) noexcept nogil:
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
                d = _silent_since(s) + self._source_timeout
                if d > after and d < best:
                    best = d
    return best


cdef int _advance(OrdererCore self, double t, bint inclusive) except -1 nogil:
    """Run every deadline before ``t`` (or at ``t`` too) at its own time, in order."""
    cdef double d
    while True:
        d = _next_deadline(self)
        if d < t or (inclusive and d == t):
            _flush(self, d)
        else:
            return 0


cdef _check_time(OrdererCore self, double now):
    if now != now:
        raise InterfaceError("time is NaN")
    if now < self._last_flush or now < self._last_now:
        raise InterfaceError(
            f"time went backwards: {now} is before {max(self._last_flush, self._last_now)}")
    self._last_now = now
