# A FragmentBatch's fields into columns, with every rule of a batch from a client (a part that
# core.pyx includes), and decode_submit, the service's one call per Submit message.
# Why here: the service receives a Submit message as raw bytes and this makes of it the columns
# the rest of the service takes (or the error naming the field), in one call that reads, checks
# and copies without the GIL. orderer/wire/submit.py is its only caller; the protobuf path of
# orderer/wire/convert.py (batch_from_pb) goes through it too, so each rule is written once, here
# and in rules.pyx (the rules the core itself keeps).

from libc.stdlib cimport qsort

cdef extern from "<stdint.h>":
    uint64_t U64_MAX "UINT64_MAX"

cdef enum:
    NOGIL_MIN_BYTES = 4096   # smaller messages (a watermark, a few fragments): the GIL's
                             # release and retake would cost more than the work


ITEM_BATCH = SUBMIT_BATCH
ITEM_WATERMARK = SUBMIT_WATERMARK
ITEM_END_OF_SOURCE = SUBMIT_END_OF_SOURCE


cdef class SubmitLimits:
    """What the service accepts beyond the wire format (``BatchLimits`` in C): the largest
    payload of one fragment, and with ``declared`` the only sources accepted."""

    def __cinit__(self, uint64_t max_payload, declared=None):
        cdef uint32_t[::1] view
        self.max_payload = max_payload
        self.n_declared = -1
        self.declared = NULL
        if declared is not None:
            ordered = sorted(declared)
            self._declared = np.asarray(ordered, dtype=np.uint32)
            self.n_declared = len(ordered)
            if self.n_declared:
                view = self._declared
                self.declared = &view[0]
            self.hint = f"the server accepts only {ordered}"

    cdef bint _is_declared(self, uint32_t source) noexcept nogil:
        """Whether ``source`` may send (binary search of the sorted declared sources)."""
        cdef Py_ssize_t low = 0, high = self.n_declared, middle
        if self.n_declared < 0:
            return True
        while low < high:
            middle = (low + high) // 2
            if self.declared[middle] < source:
                low = middle + 1
            else:
                high = middle
        return low < self.n_declared and self.declared[low] == source


cdef bint _least_undeclared(SubmitLimits limits, const uint8_t *sources, Py_ssize_t n,
                            uint32_t *least) noexcept nogil:
    """Whether a source of the packed column is not declared; the least such in ``least`` (the
    one the error names, whatever the order of the fragments)."""
    cdef Py_ssize_t i
    cdef uint32_t source
    cdef bint found = False
    for i in range(n):
        source = _le32(sources + 4 * i)
        if (not found or source < least[0]) and not limits._is_declared(source):
            least[0] = source
            found = True
    return found


cdef Py_ssize_t _packed_count(str field, const Span *span, Py_ssize_t itemsize,
                              Py_ssize_t count) except -2:
    """The number of values in a packed column, which must be ``count`` unless that is -1."""
    if span.size % itemsize:
        raise InterfaceError(
            f"{field}: {span.size} bytes is not a whole number of {itemsize}-byte values")
    cdef Py_ssize_t values = span.size // itemsize
    if count >= 0 and values != count:
        raise InterfaceError(
            f"{field}: {values} values for {count} fragments (arrays of different lengths)")
    return values


cdef inline cnp.ndarray _column(Py_ssize_t n, int typenum, bint zeros):
    """A new column of ``n`` values (zeroed when ``zeros``)."""
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    if zeros:
        return cnp.PyArray_ZEROS(1, dims, typenum, 0)
    return cnp.PyArray_EMPTY(1, dims, typenum, 0)


cdef Py_ssize_t _fill_columns(const BatchFields *f, Columns *out, Py_ssize_t n,
                              uint64_t max_payload, Violation *what) noexcept nogil:
    """Copies the checked fields but the payload (a view of the message) into the columns (the single source into each entry), then
    scans them for the rules every batch keeps (rules.pyx): the first fragment breaking one,
    or -1."""
    cdef Py_ssize_t i
    memcpy(out.timestamp, f.timestamps.data, f.timestamps.size)
    if f.sources.size:
        memcpy(out.source, f.sources.data, f.sources.size)
    else:
        for i in range(n):
            out.source[i] = f.source
    if f.barrier_types.size:
        memcpy(out.barrier, f.barrier_types.data, f.barrier_types.size)
    if f.payload_offsets.size == 0:
        return _first_violation(out.timestamp, NULL, n, max_payload, what)
    memcpy(out.payload_offsets, f.payload_offsets.data, f.payload_offsets.size)
    return _first_violation(out.timestamp, out.payload_offsets, n, max_payload, what)


cdef tuple _new_part(uint32_t source, uint64_t first, Py_ssize_t n, dict sequences):
    """``(sequence of the first fragment taken, fragments skipped)`` of a single-source batch:
    with ``sequences`` (next sequence expected by source), what the service already holds is
    skipped (a resend after a reconnect) and a batch that leaves a gap is refused."""
    if sequences is None:
        return first, 0
    expected = sequences.get(source, 0)
    if n and first > expected:
        raise InterfaceError(
            f"first_sequence: {first} leaves a gap; source {source} continues at {expected}",
            hint="resend from the last acknowledged sequence")
    if n and first + n > expected:
        return expected, expected - first
    return expected, n


cdef int _ascending(const void *a, const void *b) noexcept nogil:
    cdef uint32_t x = (<const uint32_t *>a)[0], y = (<const uint32_t *>b)[0]
    return (x > y) - (x < y)


cdef list _distinct(const uint32_t *source, Py_ssize_t n):
    """The sources of a column, ascending, each once (the streams a batch speaks for)."""
    cdef uint32_t *ordered = <uint32_t *>PyMem_RawMalloc(max(n, 1) * sizeof(uint32_t))
    cdef Py_ssize_t i, kept = 0
    if ordered == NULL:
        raise MemoryError()
    try:
        with nogil:
            memcpy(ordered, source, n * sizeof(uint32_t))
            qsort(ordered, n, sizeof(uint32_t), _ascending)
            for i in range(n):
                if kept == 0 or ordered[i] != ordered[kept - 1]:
                    ordered[kept] = ordered[i]
                    kept += 1
        return [ordered[i] for i in range(kept)]
    finally:
        PyMem_RawFree(ordered)


cdef tuple _batch_columns(const BatchFields *f, SubmitLimits limits, dict sequences,
                          bytes data, const uint8_t *base):
    """``(source, timestamp, barrier, payload_offsets, payload, single source, first sequence,
    next sequence, sources)`` of a checked batch: the first rule it breaks raises
    ``InterfaceError`` naming the field (the order of the checks is the order of the errors a
    client sees when a message breaks several rules). A multi-source batch has no single
    source, no sequence numbers. With ``sequences`` a single-source batch is deduplicated
    (:func:`_new_part`): its columns are the part not seen yet, the first sequence is that
    part's, the next sequence what the source's is once it is taken (the ack it is owed).
    ``sources`` are the batch's distinct sources, ascending.

    The payload is a view of ``data``, the message (whose bytes begin at ``base``), not a copy:
    the arrival log's join is its one copy in user space before the log's write."""
    cdef Py_ssize_t n = _packed_count("timestamps", &f.timestamps, 8, -1)
    cdef bint several = f.sources.size != 0
    cdef bint has_payload = f.payload_offsets.size != 0
    cdef uint32_t least = 0
    cdef bint undeclared = False
    cdef uint64_t first_offset, last_offset
    if several:
        _packed_count("sources", &f.sources, 4, n)
        if f.source:
            raise InterfaceError("source: set together with sources; give one or the other")
        if f.first_sequence:
            raise InterfaceError(
                "first_sequence: only single-source batches carry sequence numbers")
        if limits.n_declared >= 0:
            if f.sources.size >= NOGIL_MIN_BYTES:
                with nogil:
                    undeclared = _least_undeclared(limits, f.sources.data, n, &least)
            else:
                undeclared = _least_undeclared(limits, f.sources.data, n, &least)
            if undeclared:
                raise InterfaceError(
                    f"sources: {least} is not a declared source", hint=limits.hint)
    else:
        if n and f.first_sequence > U64_MAX - <uint64_t>(n - 1):
            raise InterfaceError(
                f"first_sequence: {f.first_sequence} + {n} fragments overflows uint64")
        if not limits._is_declared(f.source):
            raise InterfaceError(
                f"source: {f.source} is not a declared source", hint=limits.hint)
    if f.barrier_types.size:
        _packed_count("barrier_types", &f.barrier_types, 4, n)
    if has_payload:
        _packed_count("payload_offsets", &f.payload_offsets, 8, n + 1)
        first_offset = _le64(f.payload_offsets.data)
        if first_offset != 0:
            raise InterfaceError(f"payload_offsets: must start at 0, got {first_offset}")
        last_offset = _le64(f.payload_offsets.data + 8 * n)
        if last_offset != <uint64_t>f.payload.size:
            raise InterfaceError(
                f"payload_offsets: last offset {last_offset} is not the payload's length "
                f"{f.payload.size}")
    elif f.payload.size:
        raise InterfaceError("payload: given without payload_offsets")

    cdef cnp.ndarray source = _column(n, cnp.NPY_UINT32, False)
    cdef cnp.ndarray timestamp = _column(n, cnp.NPY_UINT64, False)
    cdef cnp.ndarray barrier = _column(n, cnp.NPY_UINT32, f.barrier_types.size == 0)
    cdef cnp.ndarray offsets = _column(n + 1, cnp.NPY_UINT64, not has_payload)
    cdef cnp.ndarray payload = (
        np.frombuffer(data, dtype=np.uint8, count=f.payload.size, offset=f.payload.data - base)
        if f.payload.size else _column(0, cnp.NPY_UINT8, False))
    cdef Columns out
    out.source = <uint32_t *>cnp.PyArray_DATA(source)
    out.timestamp = <uint64_t *>cnp.PyArray_DATA(timestamp)
    out.barrier = <uint32_t *>cnp.PyArray_DATA(barrier)
    out.payload_offsets = <uint64_t *>cnp.PyArray_DATA(offsets)
    cdef Violation what
    cdef Py_ssize_t culprit
    if f.timestamps.size + f.payload.size >= NOGIL_MIN_BYTES:
        with nogil:
            culprit = _fill_columns(f, &out, n, limits.max_payload, &what)
    else:
        culprit = _fill_columns(f, &out, n, limits.max_payload, &what)
    if what != VIOLATION_NONE:
        raise _rule_error(what, culprit, out.payload_offsets, limits.max_payload)
    if several:
        return (source, timestamp, barrier, offsets, payload, None, None, None,
                _distinct(out.source, n))
    first, skip = _new_part(f.source, f.first_sequence, n, sequences)
    following = <object>f.first_sequence + n if skip < n else first
    if skip:  # a resend: the part not seen yet, as views (payload offsets rebased to 0)
        start = int(offsets[skip])
        source, timestamp, barrier = source[skip:], timestamp[skip:], barrier[skip:]
        offsets, payload = offsets[skip:] - np.uint64(start), payload[start:]
    return (source, timestamp, barrier, offsets, payload, f.source, first, following,
            [f.source])


def decode_submit(bytes data not None, SubmitLimits limits not None, dict sequences=None):
    """One Submit message from its raw bytes: ``(ITEM_BATCH, columns)`` with the columns of
    ``_batch_columns`` (deduplicated against ``sequences``, which it only reads),
    ``(ITEM_WATERMARK, (source, watermark))`` or ``(ITEM_END_OF_SOURCE, (source, 0))``.
    Anything the service refuses, malformed wire data included, raises ``InterfaceError``
    naming what is wrong."""
    cdef SubmitFields fields
    cdef WireFault fault
    cdef Py_ssize_t size = len(data)
    cdef const char *start = data  # the bytes object's own buffer, not a copy
    cdef const uint8_t *p = <const uint8_t *>start
    cdef int status
    if size >= NOGIL_MIN_BYTES:
        with nogil:
            status = _wire_submit(p, size, &fields, &fault)
    else:
        status = _wire_submit(p, size, &fields, &fault)
    if status < 0:
        raise InterfaceError(
            f"SubmitRequest: not a valid protobuf message ({fault.why.decode()} at byte "
            f"{fault.at})")
    if fields.item == SUBMIT_BATCH:
        return SUBMIT_BATCH, _batch_columns(&fields.batch, limits, sequences, data, p)
    if fields.item == SUBMIT_NONE:
        raise InterfaceError("item: an empty SubmitRequest")
    if not limits._is_declared(fields.source):
        member = "watermark" if fields.item == SUBMIT_WATERMARK else "end_of_source"
        raise InterfaceError(f"{member}.source: {fields.source} is not a declared source")
    return <int>fields.item, (fields.source, fields.watermark)
