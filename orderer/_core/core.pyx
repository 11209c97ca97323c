# cython: language_level=3
"""The orderer's hot path: per-source queues, frontier and mark rule, window rule, k-way merge,
late policy, barriers, deadlines, counters and flow control, as docs/ordering.md states them.

Called only by :mod:`orderer.api` (and ``evb replay`` through it). Every public method takes the
time explicitly; the core never reads a clock, so the same code runs live and in replay.
Fragments come in and go out as columnar arrays; no Python object is made per fragment.
Taking fragments in, flushes and deadlines run without the GIL (memory from PyMem's raw
allocator, sources found by a binary search; only a resolved barrier or a change of flow
control takes the GIL back, to log Python objects), so ``submit_batches`` lets other threads
run meanwhile.

One extension module built from the parts included below, one job each (the way asyncpg
builds its protocol from included .pyx files). ``OrdererCore`` (calls.pyx) holds the state,
declared C-typed in core.pxd together with the signature of every step; the steps are C
functions over that state, called directly. The loser tree of the merge is plain C, in merge.h.
"""

from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove, memset
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc

import numpy as np

cimport numpy as cnp

from orderer.errors import InterfaceError, InternalOrdererError

cnp.import_array()

cdef extern from "<stdint.h>":
    uint64_t TS_INF "UINT64_MAX"      # +infinity frontier; never a valid timestamp
    uint64_t NO_PAYLOAD "UINT64_MAX"  # pay_off of a fragment without payload

DEF MIN_QUEUE_CAP = 64
DEF PAY_PREFIX = 4                   # bytes of the length stored before each payload
cdef uint64_t MAX_PAYLOAD = 0xFFFFFFFFU  # a payload's length is stored in 4 bytes

include "queue.pyx"      # a source's queue: arrays sorted by timestamp, payload arena
include "sources.pyx"    # the source table; fragments, watermarks, ends taken in
include "flush.pyx"      # the flush: frontiers, mark rule, window rule; end of run
include "merge.pyx"      # merge of the popped prefixes, late fragments
include "barriers.pyx"   # barriers: complete, incomplete, timed out
include "deadlines.pyx"  # time and deadlines
include "flow.pyx"       # flow control: pause and resume
include "emitted.pyx"    # emitted fragments until taken
include "rules.pyx"      # batch rules, checked before a batch is taken in
include "calls.pyx"      # OrdererCore and its coarse calls
include "nscldaq.pyx"    # the walk of NSCLDAQ ring items and event-builder fragments
include "submit_wire.pyx"   # the protobuf wire format of a SubmitRequest, read without the GIL
include "batch_fields.pyx"  # a FragmentBatch's fields into checked columns; decode_submit
include "arrival_rows.pyx"  # arrival-log rows joined from batches and markers, without the GIL
include "glom_starts.pyx"   # where glom's events start, for event building (orderer.building)
include "payload_gather.pyx"  # payloads gathered by row from the arrival log, for its readers
