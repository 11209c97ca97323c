"""The service's own threads, named so that ``top -H``, ``/proc/PID/task/*/comm`` and the
benchmark's per-thread figures say which is which.

Why names: the service spreads its work over the event loop's thread, the orderer's thread
(:mod:`~orderer.service.ingest`) and one writer thread per log
(:mod:`~orderer.service.group_commit`); a thread that runs out of CPU bounds the whole pod, and
Python names its threads only for itself (every one shows as ``python`` to the kernel).
"""

from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["name_this_thread", "single_thread"]

_PR_SET_NAME = 15
_libc: ctypes.CDLL | None = None


def name_this_thread(name: str) -> None:
    """Give the calling thread ``name`` for Python and for the kernel (at most 15 bytes there);
    nothing happens where the kernel call is not to be had."""
    global _libc
    threading.current_thread().name = name
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)  # the process's own symbols: the C library's among them
        _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def single_thread(name: str) -> ThreadPoolExecutor:
    """An executor of one named thread: what it runs runs in order, on one thread (a log is
    written by one thread at a time, and its CPU shows under one name)."""
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=name, initializer=name_this_thread, initargs=(name,)
    )
