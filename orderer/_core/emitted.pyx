# Emitted fragments (a part that core.pyx includes).
# The output buffer of emitted fragments (columns plus payload bytes) until the caller
# takes them: grown on demand, handed over without a copy when large, shrunk after a burst.
# Memory blocks handed to numpy are freed with the arrays.


cdef class _OwnedBlock:
    """A PyMem raw block that the core handed to a numpy array; freed with the array."""
    cdef void *ptr

    def __dealloc__(self):
        PyMem_RawFree(self.ptr)


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


cdef int _resize_out(OrdererCore self, Py_ssize_t cap) except -1 nogil:
    """Room for ``cap`` emitted fragments in each output column."""
    _grow(<void **>&self._out_ts, cap * sizeof(uint64_t))
    _grow(<void **>&self._out_source, cap * sizeof(uint32_t))
    _grow(<void **>&self._out_barrier, cap * sizeof(uint32_t))
    _grow(<void **>&self._out_late, cap * sizeof(uint8_t))
    _grow(<void **>&self._out_t, cap * sizeof(double))
    _grow(<void **>&self._out_arrival, cap * sizeof(double))
    _grow(<void **>&self._out_pay_end, cap * sizeof(uint64_t))
    self._out_cap = cap
    return 0


cdef int _reserve_out(OrdererCore self, Py_ssize_t n, size_t pay) except -1 nogil:
    cdef Py_ssize_t cap
    cdef size_t pcap
    if self._out_n + n > self._out_cap:
        cap = self._out_cap * 2
        if cap < self._out_n + n:
            cap = self._out_n + n
        _resize_out(self, cap)
    if self._out_pay_len + pay > self._out_pay_cap:
        pcap = self._out_pay_cap * 2
        if pcap < self._out_pay_len + pay:
            pcap = self._out_pay_len + pay
        _grow(<void **>&self._out_pay, pcap)
        self._out_pay_cap = pcap
    return 0


cdef tuple _take_emitted(OrdererCore self):
    """Everything emitted since the last call, as columns (numpy arrays) plus ``first_seq``,
    in the order of EmittedBatch's fields (its ``arrival`` last)."""
    cdef Py_ssize_t n = self._out_n
    if n >= _HANDOVER:
        return _hand_over_emitted(self)
    cdef cnp.ndarray ts = np.empty(n, dtype=np.uint64)
    cdef cnp.ndarray source = np.empty(n, dtype=np.uint32)
    cdef cnp.ndarray barrier = np.empty(n, dtype=np.uint32)
    cdef cnp.ndarray late = np.empty(n, dtype=np.bool_)
    cdef cnp.ndarray t = np.empty(n, dtype=np.float64)
    cdef cnp.ndarray arrival = np.empty(n if self._track_arrival else 0, dtype=np.float64)
    cdef cnp.ndarray offsets = np.empty(n + 1, dtype=np.uint64)
    cdef cnp.ndarray payload = np.empty(self._out_pay_len, dtype=np.uint8)
    cdef uint64_t first_seq = self._out_seq
    # the copies without the GIL: the service takes the output on the orderer's thread while
    # the event loop's thread and the log writers run Python
    cdef void *ts_to = cnp.PyArray_DATA(ts)
    cdef void *source_to = cnp.PyArray_DATA(source)
    cdef void *barrier_to = cnp.PyArray_DATA(barrier)
    cdef void *late_to = cnp.PyArray_DATA(late)
    cdef void *t_to = cnp.PyArray_DATA(t)
    cdef void *arrival_to = cnp.PyArray_DATA(arrival)
    cdef uint64_t *offsets_to = <uint64_t *>cnp.PyArray_DATA(offsets)
    cdef void *payload_to = cnp.PyArray_DATA(payload)
    with nogil:
        if n:
            memcpy(ts_to, self._out_ts, n * sizeof(uint64_t))
            memcpy(source_to, self._out_source, n * sizeof(uint32_t))
            memcpy(barrier_to, self._out_barrier, n * sizeof(uint32_t))
            memcpy(late_to, self._out_late, n * sizeof(uint8_t))
            memcpy(t_to, self._out_t, n * sizeof(double))
            if self._track_arrival:
                memcpy(arrival_to, self._out_arrival, n * sizeof(double))
            memcpy(offsets_to + 1, self._out_pay_end, n * sizeof(uint64_t))
        offsets_to[0] = 0
        if self._out_pay_len:
            memcpy(payload_to, self._out_pay, self._out_pay_len)
    self._out_seq += n
    self._out_n = 0
    self._out_pay_len = 0
    _shrink_out(self, n)
    return (first_seq, t, source, ts, barrier, late, offsets, payload,
            arrival if self._track_arrival else None)


cdef tuple _hand_over_emitted(OrdererCore self):
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
    cdef void *arrival = self._out_arrival
    cdef void *payload = self._out_pay
    cdef Py_ssize_t pay_len = self._out_pay_len
    self._out_ts = NULL
    self._out_source = NULL
    self._out_barrier = NULL
    self._out_late = NULL
    self._out_t = NULL
    self._out_arrival = NULL
    self._out_pay = NULL
    self._out_cap = 0
    self._out_pay_cap = 0
    PyMem_RawFree(self._out_pay_end)
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
        _adopt(arrival, n, cnp.NPY_FLOAT64) if self._track_arrival else _owned_empty(arrival),
    )


cdef object _owned_empty(void *ptr):
    """None, freeing ``ptr`` (an output buffer handed over but not tracked)."""
    PyMem_RawFree(ptr)
    return None


cdef int _shrink_out(OrdererCore self, Py_ssize_t used) except -1 nogil:
    """Give back output buffers that a burst (an end of run, a drained backlog) grew."""
    cdef Py_ssize_t cap
    if self._out_cap > 262144 and used < self._out_cap // 4:
        cap = max(2 * used, 1024)
        _resize_out(self, cap)
    if self._out_pay_cap > (1 << 24):
        _grow(<void **>&self._out_pay, 1 << 16)
        self._out_pay_cap = 1 << 16
    return 0
