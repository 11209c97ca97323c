# Arrival-log rows joined from batches and markers (a part that core.pyx includes), for the
# service's orderer.service.intake.arrival_records.
# Why here: the service joins its intake passes into one arrival-log record batch on a writer
# thread while the event loop's thread and the orderer's are busy; joined with numpy, each of
# twenty-odd calls may wait there for the GIL. Here the columns are made with the GIL, then
# every row is copied into them in one section without it.


cdef struct _RowGroup:
    # one batch, or one marker (one row, held in the group's own fields), as pointers into
    # buffers that stay referenced while the GIL is released
    double t
    uint8_t kind
    bint sequenced
    uint64_t first              # sequence of the group's first row; 0 when not sequenced
    Py_ssize_t n
    const uint32_t *source
    const uint64_t *value
    const uint32_t *barrier
    const uint64_t *offsets     # n + 1 of them, from any start (a slice of a larger batch)
    const uint8_t *payload      # the bytes offsets[0]:offsets[n] lie at these offsets
    uint32_t marker_source
    uint64_t marker_value


cdef struct _ArrivalColumns:
    # where the rows are written (numpy arrays made for them); sequence, sequenced: NULL
    # when the records have no such column
    uint8_t *kind
    double *t
    uint32_t *source
    uint64_t *value
    uint32_t *barrier
    uint64_t *payload_offsets
    uint8_t *payload
    uint64_t *sequence
    uint8_t *sequenced


cdef uint32_t _MARKER_BARRIER = 0
cdef uint64_t _MARKER_OFFSETS[2]    # a marker's empty payload (C statics start zeroed)


cdef cnp.ndarray _held_column(object values, int typenum, list held):
    """``values`` as a contiguous 1-d array of ``typenum``: itself when it is one (a batch's
    fields are), else a copy, kept in ``held`` until the rows are copied from it."""
    cdef cnp.ndarray column = cnp.PyArray_FROMANY(values, typenum, 1, 1,
                                                  cnp.NPY_ARRAY_CARRAY_RO)
    if column is not values:
        held.append(column)
    return column


cdef void _fill_arrival_rows(const _RowGroup *groups, Py_ssize_t k,
                             _ArrivalColumns *out) noexcept nogil:
    """Every group's rows, one after the other; payload offsets from 0, the sequence of a row
    its group's first plus its place in the group (uint64 arithmetic, as numpy's)."""
    cdef Py_ssize_t i, j, n, row = 0
    cdef uint64_t byte = 0, shift, size
    cdef const _RowGroup *g
    out.payload_offsets[0] = 0
    for i in range(k):
        g = &groups[i]
        n = g.n
        if n == 0:
            continue
        memset(out.kind + row, g.kind, n)
        for j in range(n):
            out.t[row + j] = g.t
        memcpy(out.source + row, g.source, n * sizeof(uint32_t))
        memcpy(out.value + row, g.value, n * sizeof(uint64_t))
        memcpy(out.barrier + row, g.barrier, n * sizeof(uint32_t))
        # wraps when the group's offsets start above the bytes before it, and wraps back
        shift = byte - g.offsets[0]
        for j in range(n):
            out.payload_offsets[row + 1 + j] = g.offsets[j + 1] + shift
        size = g.offsets[n] - g.offsets[0]
        if size and out.payload != NULL:
            memcpy(out.payload + byte, g.payload + g.offsets[0], size)
        byte += size
        if out.sequence != NULL:
            for j in range(n):
                out.sequence[row + j] = g.first + <uint64_t>j
        if out.sequenced != NULL:
            memset(out.sequenced + row, g.sequenced, n)
        row += n


def arrival_rows(list groups):
    """Arrival-log rows of ``groups`` in their order, as ``(kind, t, source, value, barrier,
    payload_offsets, payload, sequence, sequenced)``, the fields of ``ArrivalRecords``.

    A group is a batch, ``(t, first_sequence or None, source, timestamp, barrier,
    payload_offsets, payload)``, its fragments' rows (sequence: ``first_sequence`` plus the
    row's place in the batch, from 0 when None); or a marker, ``(t, kind, source, value)``,
    one row with no barrier, an empty payload and no sequence. ``sequence`` is None when no
    row carries one, ``sequenced`` (which rows do) None when all do.

    A batch's columns must agree in length and its payload hold the bytes its offsets span
    (its interior offsets are copied as they are: the core's batch rules checked them).

    One batch alone keeps its payload where it is: the ``payload`` returned is a view of the
    batch's (the bytes its offsets span), not a copy; Arrow's writer writes it from there."""
    cdef Py_ssize_t k = len(groups), i, n, total = 0
    cdef uint64_t start, stop, payload_bytes = 0
    cdef bint any_sequenced = False, all_sequenced = True, lone
    cdef tuple group
    cdef cnp.ndarray source, value, barrier, offsets, payload
    cdef _RowGroup *g
    cdef _ArrivalColumns out
    cdef _RowGroup *parts = <_RowGroup *>PyMem_RawMalloc((k if k else 1) * sizeof(_RowGroup))
    if parts == NULL:
        raise MemoryError()
    held = []  # copies of columns that were not contiguous arrays of their type
    try:
        for i in range(k):
            group = groups[i]
            g = &parts[i]
            if len(group) == 4:
                g.t, g.kind, g.marker_source, g.marker_value = group
                g.sequenced = False
                g.first = 0
                g.n = 1
                g.source = &g.marker_source
                g.value = &g.marker_value
                g.barrier = &_MARKER_BARRIER
                g.offsets = _MARKER_OFFSETS
                g.payload = NULL
            else:
                g.t, first, group_source, timestamp, group_barrier, group_offsets, blob = group
                g.kind = RECORD_FRAGMENT
                g.sequenced = first is not None
                g.first = first if g.sequenced else 0
                source = _held_column(group_source, cnp.NPY_UINT32, held)
                value = _held_column(timestamp, cnp.NPY_UINT64, held)
                barrier = _held_column(group_barrier, cnp.NPY_UINT32, held)
                offsets = _held_column(group_offsets, cnp.NPY_UINT64, held)
                payload = _held_column(blob, cnp.NPY_UINT8, held)
                n = value.shape[0]
                if (source.shape[0] != n or barrier.shape[0] != n
                        or offsets.shape[0] != n + 1):
                    raise InternalOrdererError(
                        f"arrival rows: a batch of {n} timestamps with {source.shape[0]} "
                        f"sources, {barrier.shape[0]} barriers, {offsets.shape[0]} payload "
                        f"offsets")
                g.n = n
                g.source = <const uint32_t *>cnp.PyArray_DATA(source)
                g.value = <const uint64_t *>cnp.PyArray_DATA(value)
                g.barrier = <const uint32_t *>cnp.PyArray_DATA(barrier)
                g.offsets = <const uint64_t *>cnp.PyArray_DATA(offsets)
                g.payload = <const uint8_t *>cnp.PyArray_DATA(payload)
                start, stop = g.offsets[0], g.offsets[n]
                if start > stop or stop > <uint64_t>payload.shape[0]:
                    raise InternalOrdererError(
                        f"arrival rows: payload offsets {start}..{stop} of a batch with "
                        f"{payload.shape[0]} payload bytes")
                payload_bytes += stop - start
            total += g.n
            if g.n:
                any_sequenced |= g.sequenced
                all_sequenced &= g.sequenced

        kind = _column(total, cnp.NPY_UINT8, False)
        t = _column(total, cnp.NPY_FLOAT64, False)
        source = _column(total, cnp.NPY_UINT32, False)
        value = _column(total, cnp.NPY_UINT64, False)
        barrier = _column(total, cnp.NPY_UINT32, False)
        offsets = _column(total + 1, cnp.NPY_UINT64, False)
        lone = k == 1 and len(groups[0]) != 4
        if lone:  # a view of the batch's own bytes
            payload = _held_column(groups[0][6], cnp.NPY_UINT8, held)[
                parts[0].offsets[0]:parts[0].offsets[parts[0].n]]
        else:
            payload = _column(<Py_ssize_t>payload_bytes, cnp.NPY_UINT8, False)
        sequence = _column(total, cnp.NPY_UINT64, False) if any_sequenced else None
        sequenced = None if all_sequenced else _column(total, cnp.NPY_BOOL, False)
        out.kind = <uint8_t *>cnp.PyArray_DATA(kind)
        out.t = <double *>cnp.PyArray_DATA(t)
        out.source = <uint32_t *>cnp.PyArray_DATA(source)
        out.value = <uint64_t *>cnp.PyArray_DATA(value)
        out.barrier = <uint32_t *>cnp.PyArray_DATA(barrier)
        out.payload_offsets = <uint64_t *>cnp.PyArray_DATA(offsets)
        out.payload = NULL if lone else <uint8_t *>cnp.PyArray_DATA(payload)
        out.sequence = (NULL if sequence is None
                        else <uint64_t *>cnp.PyArray_DATA(<cnp.ndarray>sequence))
        out.sequenced = (NULL if sequenced is None
                         else <uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>sequenced))
        with nogil:
            _fill_arrival_rows(parts, k, &out)
        return kind, t, source, value, barrier, offsets, payload, sequence, sequenced
    finally:
        PyMem_RawFree(parts)
