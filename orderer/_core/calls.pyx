# OrdererCore, the state of one orderer, and its coarse calls (a part that core.pyx includes).
# Each public call checks its input and its time, runs the deadlines before it, then the
# steps of the other parts; the state itself is declared in core.pxd.


cdef struct _Batch:
    # one batch of submit_batches, as pointers into its (held) buffers
    const uint32_t *source
    const uint64_t *ts
    const uint32_t *barrier
    const uint64_t *pay_off
    const uint8_t *payload
    Py_ssize_t n


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
        self._out_arrival = NULL
        self._out_pay_end = NULL
        self._out_pay = NULL

    def __init__(self, double build_window, double startup_delay, double barrier_timeout,
                 double source_timeout, bint drop_late, uint64_t global_xoff, uint64_t global_xon,
                 uint64_t queue_xoff, uint64_t queue_xon, bint reset_on_begin_run=False):
        self._cached_index = -1
        self._flow_changes = []
        self._barrier_log = []
        self._last_flush = -INFINITY
        self._last_now = -INFINITY
        self._settled = -INFINITY
        self._mark_none = True
        self.configure(build_window, startup_delay, barrier_timeout, source_timeout, drop_late,
                       global_xoff, global_xon, queue_xoff, queue_xon, reset_on_begin_run)
        _reserve_out(self, 1024, 4096)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._src != NULL:
            for i in range(self._n_src):
                PyMem_RawFree(self._src[i].q.ts)
                PyMem_RawFree(self._src[i].q.arrival)
                PyMem_RawFree(self._src[i].q.barrier)
                PyMem_RawFree(self._src[i].q.pay_off)
                PyMem_RawFree(self._src[i].q.arena)
            PyMem_RawFree(self._src)
        PyMem_RawFree(self._by_id)
        PyMem_RawFree(self._runs)
        PyMem_RawFree(self._tree)
        PyMem_RawFree(self._out_ts)
        PyMem_RawFree(self._out_source)
        PyMem_RawFree(self._out_barrier)
        PyMem_RawFree(self._out_late)
        PyMem_RawFree(self._out_t)
        PyMem_RawFree(self._out_arrival)
        PyMem_RawFree(self._out_pay_end)
        PyMem_RawFree(self._out_pay)

    # ------------------------------------------------------------ configuration

    def configure(self, double build_window, double startup_delay, double barrier_timeout,
                  double source_timeout, bint drop_late, uint64_t global_xoff,
                  uint64_t global_xon, uint64_t queue_xoff, uint64_t queue_xon,
                  bint reset_on_begin_run=False):
        """Set the parameters; takes effect at the next flush (live reconfiguration)."""
        self._reset_on_begin_run = reset_on_begin_run
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
        _source_index(self, source_id)

    # ------------------------------------------------------------ public, coarse calls

    def submit(self, double now, const uint32_t[::1] source, const uint64_t[::1] timestamp,
               const uint32_t[::1] barrier, const uint64_t[::1] payload_offsets,
               const uint8_t[::1] payload):
        """Fragments arriving at ``now``: deadlines before ``now`` run first, then the fragments
        go in, each (run) followed by a flush. The whole batch is checked before anything is
        taken in, so a bad batch changes nothing."""
        cdef Py_ssize_t n = timestamp.shape[0]
        _check_batch(source, timestamp, barrier, payload_offsets, payload)
        _check_time(self, now)
        if n == 0:
            return
        _advance(self, now, False)
        _submit_range(self, now, &source[0], &timestamp[0], &barrier[0], &payload_offsets[0],
                           &payload[0] if payload.shape[0] else <const uint8_t *>NULL, 0, n)

    def submit_batches(self, double now, list batches):
        """Batches arriving together at ``now``, each a tuple (source, timestamp, barrier,
        payload_offsets, payload): exactly ``submit`` of each in turn. Every batch is checked
        before any is taken in, so a bad one changes nothing.

        Why: the taking in runs without the GIL, so the service runs it on a thread of its own
        while its event loop goes on reading the network; one call for all the batches of an
        intake pass, so that thread waits for the GIL once, not once per batch."""
        cdef Py_ssize_t k = len(batches), i, n, total = 0
        cdef const uint32_t[::1] source
        cdef const uint64_t[::1] timestamp
        cdef const uint32_t[::1] barrier
        cdef const uint64_t[::1] payload_offsets
        cdef const uint8_t[::1] payload
        cdef _Batch *parts = <_Batch *>PyMem_RawMalloc((k if k else 1) * sizeof(_Batch))
        if parts == NULL:
            raise MemoryError()
        held = []  # the buffers stay acquired while the GIL is released
        try:
            for i in range(k):
                source, timestamp, barrier, payload_offsets, payload = batches[i]
                _check_batch(source, timestamp, barrier, payload_offsets, payload)
                held.append((source, timestamp, barrier, payload_offsets, payload))
                n = timestamp.shape[0]
                parts[i].n = n
                total += n
                if n:
                    parts[i].source = &source[0]
                    parts[i].ts = &timestamp[0]
                    parts[i].barrier = &barrier[0]
                    parts[i].pay_off = &payload_offsets[0]
                    parts[i].payload = (&payload[0] if payload.shape[0]
                                        else <const uint8_t *>NULL)
            _check_time(self, now)
            if total == 0:
                return
            with nogil:
                _advance(self, now, False)
                for i in range(k):
                    if parts[i].n:
                        _submit_range(self, now, parts[i].source, parts[i].ts, parts[i].barrier,
                                      parts[i].pay_off, parts[i].payload, 0, parts[i].n)
        finally:
            PyMem_RawFree(parts)

    def watermark(self, double now, uint32_t source_id, uint64_t watermark):
        """Source promises nothing older than ``watermark`` will come; it only moves up."""
        _check_time(self, now)
        _advance(self, now, False)
        s = _source_index(self, source_id)
        _watermark(self, s, now, watermark)
        _flush(self, now)

    def end_source(self, double now, uint32_t source_id):
        """Source said end of stream; a later fragment from it re-opens it."""
        _check_time(self, now)
        _advance(self, now, False)
        s = _source_index(self, source_id)
        self._src[s].ended = True
        _note_arrival(self, &self._src[s], now)
        _flush(self, now)

    def set_source_state(self, double now, uint32_t source_id, bint dead):
        """Mark a source dead or revive it (docs/ordering.md, "Dead sources"), then flush: a
        pending barrier that only the source held back resolves at once. Returns whether the
        source was known; an unknown one becomes known, like a declared source."""
        _check_time(self, now)
        _advance(self, now, False)
        known = _find_source(self, source_id) >= 0
        s = _source_index(self, source_id)
        _set_source_state(self, &self._src[s], dead, now)
        _flush(self, now)
        return known

    def run_deadlines(self, double now):
        """Live timer: run every deadline up to and including ``now`` at its own time."""
        _check_time(self, now)
        _advance(self, now, True)

    def flush(self, double now):
        """One flush at ``now`` after the deadlines before it."""
        _check_time(self, now)
        _advance(self, now, False)
        _flush(self, now)

    def end_of_run(self, double now):
        """Drain everything now (end of a replay file, or an explicit end of run)."""
        _check_time(self, now)
        _advance(self, now, False)
        _drain(self, now)

    def next_deadline(self):
        """Time of the next deadline after the last flush, or +inf."""
        return _next_deadline(self)

    def replay(self, const uint8_t[::1] kind, const double[::1] t, const uint32_t[::1] source,
               const uint64_t[::1] value, const uint32_t[::1] barrier,
               const uint64_t[::1] payload_offsets, const uint8_t[::1] payload):
        """Take in a whole replay: records sorted by ``t`` (value is the timestamp of a fragment,
        the watermark of a watermark record, 1 (dead) or 0 (revive) of a source-state record).
        Same code as the live calls, without a Python
        round-trip per record."""
        cdef Py_ssize_t n = t.shape[0], i = 0, j
        cdef double now
        cdef Source *s
        cdef const uint8_t *pay = &payload[0] if payload.shape[0] else <const uint8_t *>NULL
        # the columns' lengths before any of them is read (no bounds checks below)
        if kind.shape[0] != n:
            raise InterfaceError(f"kind has {kind.shape[0]} entries, t has {n}")
        if value.shape[0] != n:
            raise InterfaceError(f"value has {value.shape[0]} entries, t has {n}")
        _check_batch(source, value, barrier, payload_offsets, payload, kind=kind)
        for i in range(1, n):
            if t[i] < t[i - 1]:
                raise InterfaceError(f"record {i}: t={t[i]} is before the previous t={t[i - 1]}")
        if n:
            _check_time(self, t[0])
        i = 0
        while i < n:
            now = t[i]
            _advance(self, now, False)
            if kind[i] == RECORD_FRAGMENT:
                j = i + 1
                while j < n and kind[j] == RECORD_FRAGMENT and t[j] == now:
                    j += 1
                _submit_range(self, now, &source[0], &value[0], &barrier[0], &payload_offsets[0],
                                   pay, i, j)
                i = j
                continue
            s = &self._src[_source_index(self, source[i])]
            if kind[i] == RECORD_WATERMARK:
                _watermark(self, s - self._src, now, value[i])
            elif kind[i] == RECORD_SOURCE_STATE:
                _set_source_state(self, s, value[i] == 1, now)
            else:
                s.ended = True
                _note_arrival(self, s, now)
            _flush(self, now)
            i += 1

    # ------------------------------------------------------------ reading out

    def take_emitted(self):
        """Everything emitted since the last call, as columns (numpy arrays) plus ``first_seq``."""
        return _take_emitted(self)

    def set_track_arrival(self, bint on):
        """Whether take_emitted gives each fragment's arrival time (else None): opt-in, for
        it costs the on-time merge a quarter of its speed. Only while nothing waits to be
        taken, so that every row taken has it or none does."""
        if self._out_n:
            raise InterfaceError("arrival tracking changes only when the output is taken")
        self._track_arrival = on

    def take_flow_changes(self):
        """Pause/resume transitions since the last call: a list of (source id, paused)."""
        changes = self._flow_changes
        self._flow_changes = []
        return changes

    def take_barrier_log(self):
        """Resolved barriers since the last call: (output offset of the first barrier fragment,
        time, complete, homogeneous, {source id: barrier type}, missing ids ascending)."""
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
        """Live view per source: queue depth and payload bytes, oldest and newest queued
        timestamps (the queue is sorted by timestamp: its two ends), watermark, ended, dead
        (marked or by timeout), marked dead, paused, last arrival, last out-of-order arrivals."""
        cdef Py_ssize_t i
        cdef Source *s
        cdef Queue *q
        out = {}
        for i in range(self._n_src):
            s = &self._src[self._by_id[i]]
            q = &s.q
            empty = q.tail == q.head
            out[s.id] = {
                "queued": q.tail - q.head,
                "queued_bytes": _queued_payload(q),
                "oldest_ts": None if empty else q.ts[q.head],
                "newest_ts": None if empty else q.ts[q.tail - 1],
                "watermark": s.watermark if s.has_watermark else None,
                "ended": bool(s.ended),
                "dead": bool(_is_dead(self, s, now)),
                "marked_dead": bool(s.marked_dead),
                "paused": bool(s.paused),
                "last_arrival": s.last_arrival if s.has_arrival else None,
                "out_of_order_last": _disorder_list(s),
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
