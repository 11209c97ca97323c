# Payloads gathered by row from the arrival log's record batches (a part that core.pyx
# includes), for orderer.formats.payloads.
# Why here: the ordered log holds each fragment's row in the arrival log instead of a second
# copy of its payload (each payload byte is written once), so every reader of the ordered stream
# with payloads (Subscribe, the Spark job's --path read) gathers them: a copy of each payload out
# of the memory-mapped arrival segments, in output order, which is a loop by nature. Two passes
# without the GIL: the lengths (and so the offsets), then the bytes.


cdef struct _Part:
    # one arrival-log record batch's payload column: n + 1 offsets (int64, from any start) and
    # the bytes they index, pointers into buffers that stay referenced while the GIL is released
    const int64_t *offsets
    const uint8_t *data
    Py_ssize_t rows


def gather_payloads(list parts, const int64_t[::1] which, const int64_t[::1] row,
                    bint fill=True):
    """Payloads of rows ``(which[i], row[i])``, ``row[i]`` of the record batch ``parts[which[i]]``
    (each part is ``(offsets, data)``: the n + 1 int64 offsets and the bytes of a large_binary
    column), in that order: ``(offsets, payload)``, n + 1 uint64 offsets from 0 and the bytes;
    with ``fill`` false only the offsets are made (what a reply would hold) and ``payload`` is
    None. A part or row out of range raises ``IndexError``."""
    cdef Py_ssize_t n = which.shape[0], k = len(parts), i, p
    cdef int64_t r
    cdef uint64_t size, total = 0
    if row.shape[0] != n:
        raise ValueError(f"{n} part indices but {row.shape[0]} rows")
    cdef _Part *table = <_Part *>PyMem_RawMalloc((k if k else 1) * sizeof(_Part))
    if table == NULL:
        raise MemoryError()
    cdef cnp.ndarray part_offsets, part_data
    cdef cnp.ndarray offsets = np.empty(n + 1, dtype=np.uint64)
    cdef uint64_t *out_offsets = <uint64_t *>cnp.PyArray_DATA(offsets)
    cdef uint8_t *out
    cdef Py_ssize_t bad = -1
    held = []
    try:
        for p in range(k):
            part_offsets = cnp.PyArray_FROMANY(parts[p][0], cnp.NPY_INT64, 1, 1,
                                               cnp.NPY_ARRAY_CARRAY_RO)
            part_data = cnp.PyArray_FROMANY(parts[p][1], cnp.NPY_UINT8, 1, 1,
                                            cnp.NPY_ARRAY_CARRAY_RO)
            held.append((part_offsets, part_data))
            table[p].offsets = <const int64_t *>cnp.PyArray_DATA(part_offsets)
            table[p].data = <const uint8_t *>cnp.PyArray_DATA(part_data)
            table[p].rows = part_offsets.shape[0] - 1
        out_offsets[0] = 0
        with nogil:
            for i in range(n):
                if which[i] < 0 or which[i] >= k or row[i] < 0 or row[i] >= table[which[i]].rows:
                    bad = i
                    break
                r = row[i]
                size = <uint64_t>(table[which[i]].offsets[r + 1] - table[which[i]].offsets[r])
                total += size
                out_offsets[i + 1] = total
        if bad >= 0:
            raise IndexError(f"payload {bad}: row {row[bad]} of part {which[bad]} does not exist "
                             f"({k} parts)")
        if not fill:
            return offsets, None
        payload = np.empty(total, dtype=np.uint8)
        out = <uint8_t *>cnp.PyArray_DATA(payload)
        with nogil:
            for i in range(n):
                size = out_offsets[i + 1] - out_offsets[i]
                if size:
                    r = row[i]
                    memcpy(out + out_offsets[i],
                           table[which[i]].data + table[which[i]].offsets[r], size)
        return offsets, payload
    finally:
        PyMem_RawFree(table)


cdef inline Py_ssize_t _batch_of(const int64_t *firsts, Py_ssize_t m, int64_t row,
                                 Py_ssize_t hint) noexcept nogil:
    """The last batch whose first row is <= ``row`` (``row`` >= firsts[0]), searched from
    ``hint`` outwards by doubling steps, then by halving: a row next to the last one costs a
    comparison or two, where a plain binary search costs log2(m) cache misses."""
    cdef Py_ssize_t low, high, step = 1, middle
    if firsts[hint] <= row:
        low = hint
        high = hint + 1
        while high < m and firsts[high] <= row:
            low = high
            high = high + step
            step *= 2
        if high > m:
            high = m
    else:
        high = hint
        low = hint - 1
        while low > 0 and firsts[low] > row:
            high = low
            low = low - step
            step *= 2
        if low < 0:
            low = 0
    # firsts[low] <= row < firsts[high] (high == m: past the last)
    while high - low > 1:
        middle = low + (high - low) // 2
        if firsts[middle] <= row:
            low = middle
        else:
            high = middle
    return low


def locate_rows(const int64_t[::1] rows, const int64_t[::1] firsts):
    """For each of ``rows`` (each >= ``firsts[0]``; ``firsts`` the ascending first rows of the
    record batches), which batch holds it: ``(part, in_batch, batches)``, the batches the rows
    touch numbered from 0 in the order first met (``batches[part[i]]`` holds row ``i``, as its
    row ``in_batch[i]``). Rows in output order lie close to one another in the arrival log, so
    each search starts where the last one ended."""
    cdef Py_ssize_t n = rows.shape[0], m = firsts.shape[0], i, b, hint = 0, k = 0
    cdef Py_ssize_t low = m, high = -1
    if m == 0 and n:
        raise ValueError("rows located in no record batch")
    cdef cnp.ndarray batch = np.empty(n, dtype=np.int64)
    cdef cnp.ndarray in_batch = np.empty(n, dtype=np.int64)
    cdef int64_t *batch_of = <int64_t *>cnp.PyArray_DATA(batch)
    cdef int64_t *row_in = <int64_t *>cnp.PyArray_DATA(in_batch)
    cdef int64_t *mark
    with nogil:
        for i in range(n):
            b = _batch_of(&firsts[0], m, rows[i], hint)
            hint = b
            batch_of[i] = b
            row_in[i] = rows[i] - firsts[b]
            if b < low:
                low = b
            if b > high:
                high = b
    if n == 0:
        return batch, in_batch, np.zeros(0, dtype=np.int64)
    cdef cnp.ndarray marks = np.full(high - low + 1, -1, dtype=np.int64)
    cdef cnp.ndarray touched = np.empty(high - low + 1, dtype=np.int64)
    mark = <int64_t *>cnp.PyArray_DATA(marks)
    cdef int64_t *seen = <int64_t *>cnp.PyArray_DATA(touched)
    with nogil:
        for i in range(n):
            b = batch_of[i] - low
            if mark[b] < 0:
                mark[b] = k
                seen[k] = batch_of[i]
                k += 1
            batch_of[i] = mark[b]
    return batch, in_batch, touched[:k]
