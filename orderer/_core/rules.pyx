# Batch rules (a part that core.pyx includes).
# The rules every batch must keep (a reserved timestamp, payload offsets going backwards,
# a payload too large), with one message each, and the whole check of a batch before any of
# it is taken in. Callers outside the core (the service's check of a wire message, the
# client) raise the same messages through check_fragment_rules.


cdef Py_ssize_t _first_violation(const uint64_t *ts, const uint64_t *off, Py_ssize_t n,
                                 uint64_t max_len, Violation *what) noexcept nogil:
    """The first fragment of a batch that breaks a rule every batch must keep, or -1: a
    reserved timestamp (``ts`` may be NULL: not checked), payload offsets going backwards, a
    payload longer than ``max_len`` (``off`` may be NULL: no payloads). The one scan behind
    every check of these rules."""
    cdef Py_ssize_t i
    cdef bint bad = False
    what[0] = VIOLATION_NONE
    # accumulate without branches (vectorises); look for the culprit only on failure
    if ts != NULL:
        for i in range(n):
            bad |= ts[i] == TS_INF
    if off != NULL:
        for i in range(n):
            bad |= (off[i + 1] < off[i]) | (off[i + 1] - off[i] > max_len)
    if not bad:
        return -1
    for i in range(n):
        if ts != NULL and ts[i] == TS_INF:
            what[0] = VIOLATION_RESERVED_TIMESTAMP
            return i
        if off != NULL:
            if off[i + 1] < off[i]:
                what[0] = VIOLATION_OFFSETS_BACKWARDS
                return i
            if off[i + 1] - off[i] > max_len:
                what[0] = VIOLATION_PAYLOAD_TOO_LARGE
                return i
    return -1


cdef object _rule_error(Violation rule, Py_ssize_t index, const uint64_t *off,
                        uint64_t max_len):
    """The one message of each batch rule, naming the field and the fragment: every check of
    these rules (the core's, the service's of a wire message, the client's) raises it."""
    if rule == VIOLATION_RESERVED_TIMESTAMP:
        return InterfaceError(f"timestamps: fragment {index} has 2**64-1, reserved for +infinity")
    if rule == VIOLATION_OFFSETS_BACKWARDS:
        return InterfaceError(
            f"payload_offsets: fragment {index} ends at {off[index + 1]}, "
            f"before it starts at {off[index]}")
    return InterfaceError(
        f"payload: fragment {index} has {off[index + 1] - off[index]} bytes, "
        f"above the limit of {max_len}")


cdef object _offsets_length_error(Py_ssize_t entries, Py_ssize_t n):
    return InterfaceError(
        f"payload_offsets has {entries} entries, expected {n + 1} (one more than timestamp)")


cdef int _check_fragment_rules(const uint64_t *ts, const uint64_t *off, Py_ssize_t n,
                               uint64_t max_len) except -1:
    """Raise the message of the first fragment breaking a batch rule (see _first_violation)."""
    cdef Violation what
    cdef Py_ssize_t index = _first_violation(ts, off, n, max_len, &what)
    if what != VIOLATION_NONE:
        raise _rule_error(what, index, off, max_len)
    return 0


def check_fragment_rules(const uint64_t[::1] timestamp, const uint64_t[::1] payload_offsets,
                         uint64_t max_payload):
    """Raise :class:`InterfaceError` with the rule's one message at the first fragment breaking
    a rule every batch must keep: a reserved timestamp (2**64-1), payload offsets going
    backwards, a payload above ``max_payload`` bytes. ``payload_offsets`` is empty when the
    batch has no payloads, else one longer than ``timestamp``."""
    cdef Py_ssize_t n = timestamp.shape[0], entries = payload_offsets.shape[0]
    if entries and entries != n + 1:
        raise _offsets_length_error(entries, n)
    if n:
        _check_fragment_rules(&timestamp[0], &payload_offsets[0] if entries else NULL, n,
                              max_payload)


cdef int _check_batch(const uint32_t[::1] source, const uint64_t[::1] timestamp,
                      const uint32_t[::1] barrier, const uint64_t[::1] payload_offsets,
                      const uint8_t[::1] payload, kind=None) except -1:
    """Validate a whole batch before any of it is taken in; errors name the field."""
    cdef Py_ssize_t n = timestamp.shape[0], i
    if source.shape[0] != n:
        raise InterfaceError(f"source has {source.shape[0]} entries, timestamp has {n}")
    if barrier.shape[0] != n:
        raise InterfaceError(f"barrier has {barrier.shape[0]} entries, timestamp has {n}")
    if payload_offsets.shape[0] != n + 1:
        raise _offsets_length_error(payload_offsets.shape[0], n)
    if n == 0:
        return 0
    if payload_offsets[n] > <uint64_t>payload.shape[0]:
        raise InterfaceError(
            f"payload_offsets[{n}]={payload_offsets[n]} is beyond the payload "
            f"({payload.shape[0]} bytes)")
    cdef const uint64_t *ts = &timestamp[0]
    cdef const uint64_t *off = &payload_offsets[0]
    cdef const uint8_t[::1] kinds
    if kind is None:
        return _check_fragment_rules(ts, off, n, MAX_PAYLOAD)
    # a replay: only fragment records carry a timestamp
    kinds = kind
    for i in range(n):
        if kinds[i] == RECORD_FRAGMENT and ts[i] == TS_INF:
            raise _rule_error(VIOLATION_RESERVED_TIMESTAMP, i, off, MAX_PAYLOAD)
        if kinds[i] > RECORD_END and kinds[i] != RECORD_SOURCE_STATE:
            raise InterfaceError(f"kind[{i}]={kinds[i]} is not a record kind")
        if kinds[i] == RECORD_SOURCE_STATE and ts[i] > 1:
            raise InterfaceError(
                f"value[{i}]={ts[i]} of a source-state record is not 1 (dead) or 0 (revive)")
    return _check_fragment_rules(NULL, off, n, MAX_PAYLOAD)
