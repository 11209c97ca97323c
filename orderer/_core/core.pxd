# Declarations of the orderer's hot path: C-typed state of every source queue and of the
# orderer, and the signature of every step over that state. The parts that core.pyx includes
# hold the implementations; core.pyi types the Python side for callers and mypy.

from libc.stdint cimport uint8_t, uint32_t, uint64_t


cdef enum RecordKind:
    RECORD_FRAGMENT = 0
    RECORD_WATERMARK = 1
    RECORD_END = 2
    RECORD_SOURCE_STATE = 5    # value 1: marked dead, 0: revived (ArrivalKind.SOURCE_STATE)


cdef enum Violation:
    VIOLATION_NONE = 0
    VIOLATION_RESERVED_TIMESTAMP = 1
    VIOLATION_OFFSETS_BACKWARDS = 2
    VIOLATION_PAYLOAD_TOO_LARGE = 3


cdef enum WireType:
    # the wire types of the protobuf encoding (protobuf.dev/programming-guides/encoding)
    WIRE_VARINT = 0
    WIRE_I64 = 1
    WIRE_LEN = 2
    WIRE_START_GROUP = 3
    WIRE_END_GROUP = 4
    WIRE_I32 = 5


cdef enum SubmitItem:
    # which member of SubmitRequest's oneof `item` a message holds (its field number)
    SUBMIT_NONE = 0
    SUBMIT_BATCH = 1
    SUBMIT_WATERMARK = 2
    SUBMIT_END_OF_SOURCE = 3


cdef struct Span:
    # the bytes of one length-delimited field, inside the message being decoded
    const uint8_t *data
    Py_ssize_t size


cdef struct BatchFields:
    # a FragmentBatch as its wire format holds it (field numbers of proto/evb/v1/orderer.proto)
    uint32_t source            # 1
    Span sources               # 2, packed little-endian uint32
    Span timestamps            # 3, packed little-endian uint64
    Span barrier_types         # 4, packed little-endian uint32
    Span payload               # 5
    Span payload_offsets       # 6, packed little-endian uint64
    uint64_t first_sequence    # 7


cdef struct SubmitFields:
    # a SubmitRequest: the member of its oneof and that member's fields
    SubmitItem item
    BatchFields batch
    uint32_t source            # of the watermark or the end of source
    uint64_t watermark


cdef struct Columns:
    # where a batch's columns are written (numpy arrays made for it; the payload is a view of
    # the message, not a column)
    uint32_t *source
    uint64_t *timestamp
    uint32_t *barrier
    uint64_t *payload_offsets


cdef struct WireFault:
    # where and why a message is not valid protobuf wire data
    Py_ssize_t at
    const char *why


cdef enum PopMode:
    POP_BY_RULES = 0   # mark rule, else window rule (a normal flush)
    POP_DRAIN = 1      # end of run: everything up to a barrier, without waiting


cdef struct Queue:
    # Fragments waiting for the other sources, sorted by (timestamp, arrival order).
    # Structure of arrays, live between physical indices [head, tail); 28 bytes per fragment.
    uint64_t *ts
    double *arrival
    uint32_t *barrier
    uint64_t *pay_off          # payload in ``arena`` (4-byte length, bytes), or NO_PAYLOAD
    Py_ssize_t head
    Py_ssize_t tail
    Py_ssize_t cap
    Py_ssize_t first_barrier   # physical index of the first barrier in the queue, -1 if none
    Py_ssize_t n_barriers
    uint8_t *arena             # payload bytes of queued fragments, appended in arrival order
    size_t arena_len
    size_t arena_cap
    size_t arena_live          # bytes (length prefixes included) of queued fragments
    double arrival_floor       # no queued fragment arrived before this (set when it was empty)


cdef struct Source:
    uint32_t id
    Queue q
    bint has_watermark
    uint64_t watermark
    bint ended
    bint has_arrival           # anything (fragment, watermark, end) arrived from it
    double last_arrival
    bint has_prev
    uint64_t prev_ts           # timestamp of its previous fragment, in arrival order
    # manual control (docs/ordering.md, "Marking a source dead, reviving it")
    bint marked_dead           # marked dead, until its next record or a revive
    bint revived
    double revived_at          # last revive; the silence clock runs from this or last_arrival
    # counters of docs/ordering.md
    uint64_t received
    uint64_t emitted
    uint64_t late
    uint64_t dropped
    uint64_t duplicates
    uint64_t out_of_order
    uint64_t max_lateness
    uint64_t barriers
    uint64_t missing
    # flow control
    bint queue_xoff            # own queue above queue_xoff, until below queue_xon
    bint paused                # last pause state reported for this source
    # scratch of the current round
    bint frontier_none
    uint64_t frontier
    Py_ssize_t pop_end
    # last: rarely touched, kept off the cache lines of the fields above
    # the last out-of-order arrivals (10 = DISORDER_KEPT of sources.pyx), a ring: the oldest
    # of the disorder_n kept is at disorder_next - disorder_n (modulo 10)
    uint64_t disorder_prev[10]
    uint64_t disorder_ts[10]
    double disorder_t[10]
    Py_ssize_t disorder_n
    Py_ssize_t disorder_next


cdef class OrdererCore:
    cdef Source *_src
    cdef Py_ssize_t _n_src
    cdef Py_ssize_t _cap_src
    cdef Py_ssize_t *_by_id          # source indices sorted by source id
    cdef uint32_t _cached_id
    cdef Py_ssize_t _cached_index

    # parameters (seconds); source timeout off is +inf
    cdef double _build_window
    cdef double _startup_delay
    cdef double _barrier_timeout
    cdef double _source_timeout
    cdef bint _drop_late
    cdef bint _reset_on_begin_run    # a complete begin-run barrier restarts the clocks
    cdef uint64_t _global_xoff
    cdef uint64_t _global_xon
    cdef uint64_t _queue_xoff
    cdef uint64_t _queue_xon

    # orderer state
    cdef bint _has_first
    cdef double _first_arrival
    cdef double _last_flush
    cdef double _last_now            # latest time any call was made at
    cdef double _settled             # time of the last flush that ran the rules to the end
    cdef bint _has_hwm
    cdef uint64_t _hwm
    cdef uint64_t _queued
    cdef bint _global_paused
    cdef bint _mark_none
    cdef uint64_t _mark
    cdef uint64_t _complete
    cdef uint64_t _incomplete
    cdef uint64_t _homogeneous
    cdef uint64_t _heterogeneous
    cdef list _flow_changes
    cdef list _barrier_log

    # emitted fragments not yet taken
    cdef uint64_t _out_seq           # seq of the first fragment in the output buffer
    cdef Py_ssize_t _out_n
    cdef Py_ssize_t _out_cap
    cdef uint64_t *_out_ts
    cdef uint32_t *_out_source
    cdef uint32_t *_out_barrier
    cdef uint8_t *_out_late
    cdef double *_out_t
    cdef double *_out_arrival        # when each emitted fragment arrived (its delay: t - arrival)
    cdef bint _track_arrival         # whether _out_arrival is written (opt-in: it costs)
    cdef uint64_t *_out_pay_end
    cdef uint8_t *_out_pay
    cdef size_t _out_pay_len
    cdef size_t _out_pay_cap

    # merge scratch (k-way loser tree)
    cdef Py_ssize_t *_runs
    cdef Py_ssize_t *_tree
    cdef Py_ssize_t _scratch_cap


# The steps over an orderer's state, by the part that holds them: C functions, called directly.

# sources.pyx
cdef Py_ssize_t _find_source(OrdererCore self, uint32_t source_id) noexcept nogil
cdef Py_ssize_t _source_index(OrdererCore self, uint32_t source_id) except -1 nogil
cdef int _add_source(OrdererCore self, uint32_t source_id) except -1 nogil
cdef int _note_arrival(OrdererCore self, Source *s, double now) except -1 nogil
cdef int _note_disorder(OrdererCore self, Source *s, const uint64_t *ts, Py_ssize_t n,
                        bint has_prev, uint64_t prev, double now) except -1 nogil
cdef int _set_source_state(OrdererCore self, Source *s, bint dead, double now) except -1 nogil
cdef bint _is_dead(OrdererCore self, Source *s, double now) noexcept nogil
cdef int _watermark(OrdererCore self, Py_ssize_t index, double now,
                    uint64_t watermark) except -1 nogil
cdef int _insert_one(OrdererCore self, Source *s, uint64_t ts, uint32_t barrier, double now,
                     const uint8_t *pay, uint32_t pay_len) except -1 nogil
cdef int _insert_run(OrdererCore self, Source *s, const uint64_t *ts, const uint32_t *barrier,
                     Py_ssize_t n, double now, const uint64_t *pay_off,
                     const uint8_t *payload) except -1 nogil
cdef int _submit_range(OrdererCore self, double now, const uint32_t *source, const uint64_t *ts,
                       const uint32_t *barrier, const uint64_t *pay_off, const uint8_t *payload,
                       Py_ssize_t start, Py_ssize_t stop) except -1 nogil
cdef Py_ssize_t _whole_prefix(OrdererCore self, Py_ssize_t index, double now,
                              const uint64_t *ts, Py_ssize_t n) except -1 nogil

# flush.pyx
cdef int _flush(OrdererCore self, double now) except -1 nogil
cdef int _drain(OrdererCore self, double now) except -1 nogil
cdef bint _pop_round(OrdererCore self, double now, PopMode mode) except -1 nogil

# merge.pyx
cdef int _merge_emit(OrdererCore self, double now, Py_ssize_t k) except -1 nogil

# barriers.pyx
cdef bint _resolve_barriers(OrdererCore self, double now, bint drain) except -1 nogil
cdef int _emit_barrier(OrdererCore self, double now, bint complete, size_t pay) except -1
cdef void _reset_clocks(OrdererCore self) noexcept nogil

# deadlines.pyx
cdef double _next_deadline(OrdererCore self) noexcept nogil
cdef int _advance(OrdererCore self, double t, bint inclusive) except -1 nogil
cdef _check_time(OrdererCore self, double now)

# flow.pyx
cdef int _update_flow(OrdererCore self) except -1 nogil

# emitted.pyx
cdef int _resize_out(OrdererCore self, Py_ssize_t cap) except -1 nogil
cdef int _reserve_out(OrdererCore self, Py_ssize_t n, size_t pay) except -1 nogil
cdef int _shrink_out(OrdererCore self, Py_ssize_t used) except -1 nogil
cdef tuple _take_emitted(OrdererCore self)
cdef tuple _hand_over_emitted(OrdererCore self)

# submit_wire.pyx
cdef Py_ssize_t _wire_varint(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end,
                             uint64_t *value, WireFault *fault) noexcept nogil
cdef Py_ssize_t _wire_tag(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint32_t *field,
                          uint32_t *wire, WireFault *fault) noexcept nogil
cdef Py_ssize_t _wire_span(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Span *span,
                           WireFault *fault) noexcept nogil
cdef Py_ssize_t _wire_skip(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint32_t field,
                           uint32_t wire, int depth, WireFault *fault) noexcept nogil
cdef Py_ssize_t _wire_batch(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, BatchFields *out,
                            int depth, WireFault *fault) noexcept nogil
cdef Py_ssize_t _wire_marker(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end,
                             SubmitFields *out, int depth, WireFault *fault) noexcept nogil
cdef int _wire_submit(const uint8_t *p, Py_ssize_t size, SubmitFields *out,
                      WireFault *fault) noexcept nogil

# batch_fields.pyx
cdef class SubmitLimits:
    cdef readonly uint64_t max_payload
    cdef uint32_t *declared    # sorted, n_declared of them
    cdef Py_ssize_t n_declared # -1: every source is accepted
    cdef object _declared      # the array that owns ``declared``
    cdef object hint           # "the server accepts only [...]"
    cdef bint _is_declared(self, uint32_t source) noexcept nogil

cdef bint _least_undeclared(SubmitLimits limits, const uint8_t *sources, Py_ssize_t n,
                            uint32_t *least) noexcept nogil
cdef Py_ssize_t _packed_count(str field, const Span *span, Py_ssize_t itemsize,
                              Py_ssize_t count) except -2
cdef Py_ssize_t _fill_columns(const BatchFields *f, Columns *out, Py_ssize_t n,
                              uint64_t max_payload, Violation *what) noexcept nogil
cdef tuple _new_part(uint32_t source, uint64_t first, Py_ssize_t n, dict sequences)
cdef int _ascending(const void *a, const void *b) noexcept nogil
cdef list _distinct(const uint32_t *source, Py_ssize_t n)
cdef tuple _batch_columns(const BatchFields *f, SubmitLimits limits, dict sequences,
                          bytes data, const uint8_t *base)
