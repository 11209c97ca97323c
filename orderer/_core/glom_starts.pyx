# Where glom's events start (a part that core.pyx includes), for
# orderer.building.glom.event_starts. Why here: the rule is a chain (each event's first fragment
# decides where the event ends), so it is one pass in C over the timestamps, without the GIL: the
# Spark driver runs it over every micro-batch's timestamps to plan, every executor over its
# partition to build, and the sliced replay over whole runs' outputs.

cdef extern from "<stdint.h>":
    uint64_t UINT64_MAX_ "UINT64_MAX"


cdef Py_ssize_t _event_starts(const uint64_t *ts, const uint8_t *is_barrier, Py_ssize_t n,
                              uint64_t dt, Py_ssize_t span, int64_t *starts) noexcept nogil:
    """The starts into ``starts`` (room for ``n``); returns how many. An event starting at a
    fragment ``i`` takes the fragments after it while they are no barrier, at most ``span``
    fragments in all, and within ``dt`` of ``ts[i]`` either way (exact uint64 arithmetic,
    clamped at 0 and 2**64 - 1); a barrier is an event of its own."""
    cdef Py_ssize_t i = 0, j, limit, k = 0
    cdef uint64_t first, low, high
    while i < n:
        starts[k] = i
        k += 1
        if is_barrier[i]:
            i += 1
            continue
        first = ts[i]
        low = first - dt if first > dt else 0
        high = first + dt if first <= UINT64_MAX_ - dt else UINT64_MAX_
        limit = i + span if span < n - i else n
        j = i + 1
        while j < limit and not is_barrier[j] and low <= ts[j] <= high:
            j += 1
        i = j
    return k


def event_starts_of(const uint64_t[::1] timestamp, const uint8_t[::1] is_barrier,
                    uint64_t dt, Py_ssize_t span):
    """Indices where an event starts (int64, ascending, 0 first); ``span`` >= 1 is the most
    fragments of an event. The checks and the no-build cases are the caller's
    (:func:`orderer.building.glom.event_starts`)."""
    cdef Py_ssize_t n = timestamp.shape[0], k
    if is_barrier.shape[0] != n:
        raise ValueError(f"{n} timestamps but {is_barrier.shape[0]} barrier flags")
    if span < 1:
        raise ValueError(f"span must be >= 1, not {span}")
    cdef cnp.ndarray starts = np.empty(n, dtype=np.int64)
    if n == 0:
        return starts
    cdef int64_t *out = <int64_t *> cnp.PyArray_DATA(starts)
    with nogil:
        k = _event_starts(&timestamp[0], &is_barrier[0], n, dt, span, out)
    return starts[:k].copy() if k < n else starts
