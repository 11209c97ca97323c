# The protobuf wire format of a SubmitRequest (a part that core.pyx includes).
# Why the service reads it here and not through the protobuf runtime: a Submit message is
# thousands of fragments in a few packed bytes fields, and the runtime's parse makes Python
# objects and copies of them on the event loop's thread for every message. This reader walks
# the raw bytes without the GIL and only notes where each field lies (a Span); the columns are
# made from those spans by batch_fields.pyx, which holds every rule of a batch.
#
# It decodes as the protobuf runtime does, so that a client sees no difference: the last
# occurrence of a scalar or bytes field wins, a second occurrence of the oneof member already
# set is merged into it, another member clears it, a known field number with another wire type
# is an unknown field, unknown fields (groups included) are skipped; a varint of more than ten
# bytes, a tag or a length of more than five, field number 0 (but inside a skipped group, where
# the runtime takes it as any unknown field), a stray end of group, wire types 6
# and 7, a length past the end and nesting deeper than the runtime's limit are malformed
# (tests/core/test_submit_wire.py holds it to the runtime on random and hostile data).

DEF WIRE_DEPTH_LIMIT = 100   # the protobuf runtime's default nesting limit (upb, C++)


cdef Py_ssize_t _wire_varint(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end,
                             uint64_t *value, WireFault *fault) noexcept nogil:
    """The position after the varint at ``pos`` (its value in ``value``), or -1 with ``fault``
    set: past the end, or more than ten bytes. Bits beyond 64 are dropped, as the runtime drops
    them."""
    cdef uint64_t v = 0, byte
    cdef Py_ssize_t start = pos
    cdef int i
    for i in range(10):
        if pos >= end:
            break
        byte = p[pos]
        pos += 1
        v |= (byte & 0x7F) << (7 * i)
        if not (byte & 0x80):
            value[0] = v
            return pos
    fault.at, fault.why = start, "invalid varint"
    return -1


cdef Py_ssize_t _wire_tag(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint32_t *field,
                          uint32_t *wire, WireFault *fault) noexcept nogil:
    """The position after the tag at ``pos``, or -1 with ``fault`` set: a tag is a varint of at
    most five bytes that fits 32 bits, and field number 0 does not exist."""
    return _wire_any_tag(p, pos, end, field, wire, fault, False)


cdef Py_ssize_t _wire_any_tag(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint32_t *field,
                              uint32_t *wire, WireFault *fault, bint field_zero) noexcept nogil:
    """:func:`_wire_tag`, where ``field_zero`` lets field number 0 pass: inside a group being
    skipped the runtime (upb) reads it as any unknown field."""
    cdef uint64_t v = 0, byte
    cdef int i
    for i in range(5):
        if pos >= end:
            fault.at, fault.why = pos, "truncated tag"
            return -1
        byte = p[pos]
        pos += 1
        v |= (byte & 0x7F) << (7 * i)
        if not (byte & 0x80):
            if v > 0xFFFFFFFFU or ((v >> 3) == 0 and not field_zero):
                fault.at, fault.why = pos, "invalid tag"
                return -1
            field[0] = <uint32_t>(v >> 3)
            wire[0] = <uint32_t>(v & 7)
            return pos
    fault.at, fault.why = pos, "invalid tag"
    return -1


cdef Py_ssize_t _wire_span(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Span *span,
                           WireFault *fault) noexcept nogil:
    """The position after the length-delimited field whose length is at ``pos``, or -1. The
    length is a varint of at most five bytes (the runtime's limit)."""
    cdef uint64_t size = 0, byte
    cdef Py_ssize_t start = pos
    cdef int i
    for i in range(6):
        if i == 5 or start >= end:
            fault.at, fault.why = pos, "invalid length"
            return -1
        byte = p[start]
        start += 1
        size |= (byte & 0x7F) << (7 * i)
        if not (byte & 0x80):
            break
    if size > <uint64_t>(end - start):
        fault.at, fault.why = pos, "length past the end"
        return -1
    span.data = p + start
    span.size = <Py_ssize_t>size
    return start + <Py_ssize_t>size


cdef Py_ssize_t _wire_skip(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint32_t field,
                           uint32_t wire, int depth, WireFault *fault) noexcept nogil:
    """The position after the value of an unknown field (its tag read already), or -1. A group
    is skipped to its matching end, nested groups too, ``depth`` levels at most (the levels
    left under the runtime's limit: the message itself took one, a member of the oneof one)."""
    cdef uint64_t ignored
    cdef Span span
    cdef uint32_t inner_field, inner_wire
    cdef Py_ssize_t after
    if wire == WIRE_VARINT:
        return _wire_varint(p, pos, end, &ignored, fault)
    if wire == WIRE_I64 or wire == WIRE_I32:
        after = pos + (8 if wire == WIRE_I64 else 4)
        if after > end:
            fault.at, fault.why = pos, "truncated fixed-size value"
            return -1
        return after
    if wire == WIRE_LEN:
        return _wire_span(p, pos, end, &span, fault)
    if wire == WIRE_START_GROUP:
        if depth <= 0:
            fault.at, fault.why = pos, "nested too deep"
            return -1
        while True:
            pos = _wire_any_tag(p, pos, end, &inner_field, &inner_wire, fault, True)
            if pos < 0:
                return -1
            if inner_wire == WIRE_END_GROUP:
                if inner_field != field:
                    fault.at, fault.why = pos, "end of group of another field"
                    return -1
                return pos
            pos = _wire_skip(p, pos, end, inner_field, inner_wire, depth - 1, fault)
            if pos < 0:
                return -1
    if wire == WIRE_END_GROUP:
        fault.at, fault.why = pos, "end of group without its start"
    else:
        fault.at, fault.why = pos, "invalid wire type"
    return -1


cdef Py_ssize_t _wire_batch(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, BatchFields *out,
                            int depth, WireFault *fault) noexcept nogil:
    """Merges the FragmentBatch in ``[pos, end)`` into ``out``: ``end``, or -1."""
    cdef uint32_t field, wire
    cdef uint64_t value
    while pos < end:
        pos = _wire_tag(p, pos, end, &field, &wire, fault)
        if pos < 0:
            return -1
        if wire == WIRE_VARINT and (field == 1 or field == 7):
            pos = _wire_varint(p, pos, end, &value, fault)
            if pos < 0:
                return -1
            if field == 1:
                out.source = <uint32_t>value
            else:
                out.first_sequence = value
        elif wire == WIRE_LEN and 2 <= field <= 6:
            pos = _wire_span(p, pos, end, (
                &out.sources if field == 2 else
                &out.timestamps if field == 3 else
                &out.barrier_types if field == 4 else
                &out.payload if field == 5 else
                &out.payload_offsets), fault)
        else:
            pos = _wire_skip(p, pos, end, field, wire, depth, fault)
        if pos < 0:
            return -1
    return pos


cdef Py_ssize_t _wire_marker(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end,
                             SubmitFields *out, int depth, WireFault *fault) noexcept nogil:
    """Merges the Watermark or EndOfSource in ``[pos, end)`` into ``out`` (field 1 the source,
    field 2 the watermark, which EndOfSource does not have): ``end``, or -1."""
    cdef uint32_t field, wire
    cdef uint64_t value
    while pos < end:
        pos = _wire_tag(p, pos, end, &field, &wire, fault)
        if pos < 0:
            return -1
        if wire == WIRE_VARINT and (
                field == 1 or (field == 2 and out.item == SUBMIT_WATERMARK)):
            pos = _wire_varint(p, pos, end, &value, fault)
            if pos < 0:
                return -1
            if field == 1:
                out.source = <uint32_t>value
            else:
                out.watermark = value
        else:
            pos = _wire_skip(p, pos, end, field, wire, depth, fault)
        if pos < 0:
            return -1
    return pos


cdef int _wire_submit(const uint8_t *p, Py_ssize_t size, SubmitFields *out,
                      WireFault *fault) noexcept nogil:
    """The SubmitRequest in ``p[:size]`` into ``out``: 0, or -1 with ``fault`` set."""
    cdef uint32_t field, wire
    cdef Py_ssize_t pos = 0
    cdef Span member
    memset(out, 0, sizeof(SubmitFields))
    while pos < size:
        pos = _wire_tag(p, pos, size, &field, &wire, fault)
        if pos < 0:
            return -1
        if wire == WIRE_LEN and 1 <= field <= 3:
            pos = _wire_span(p, pos, size, &member, fault)
            if pos < 0:
                return -1
            if <SubmitItem>field != out.item:  # another member of the oneof: it starts afresh
                memset(out, 0, sizeof(SubmitFields))
                out.item = <SubmitItem>field
            if field == SUBMIT_BATCH:
                if _wire_batch(member.data, 0, member.size, &out.batch,
                               WIRE_DEPTH_LIMIT - 1, fault) < 0:
                    fault.at += member.data - p
                    return -1
            elif _wire_marker(member.data, 0, member.size, out, WIRE_DEPTH_LIMIT - 1,
                              fault) < 0:
                fault.at += member.data - p
                return -1
        else:
            pos = _wire_skip(p, pos, size, field, wire, WIRE_DEPTH_LIMIT, fault)
            if pos < 0:
                return -1
    return 0
