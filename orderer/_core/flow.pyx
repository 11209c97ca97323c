# Flow control (a part that core.pyx includes).
# Pause and resume of sources from the global and per-queue XOFF/XON thresholds
# (docs/ordering.md, "Flow control (an evb addition)").


cdef int _update_flow(OrdererCore self) except -1 nogil:
    cdef Py_ssize_t i, depth
    cdef Source *s
    cdef bint paused
    if self._global_paused:
        if self._queued < self._global_xon:
            self._global_paused = False
    elif self._queued > self._global_xoff:
        self._global_paused = True
    for i in range(self._n_src):
        s = &self._src[i]
        depth = s.q.tail - s.q.head
        if s.queue_xoff:
            if <uint64_t>depth < self._queue_xon:
                s.queue_xoff = False
        elif <uint64_t>depth > self._queue_xoff:
            s.queue_xoff = True
        # Under global XOFF the sources that hold the output back (empty, or at the mark)
        # keep sending: pausing them would stop the very data that lets queues drain.
        paused = s.queue_xoff or (
            self._global_paused and depth > 0 and not s.frontier_none
            and (self._mark_none or s.frontier > self._mark))
        if paused != s.paused:
            s.paused = paused
            with gil:  # a change is rare
                self._flow_changes.append((s.id, paused))
    return 0
