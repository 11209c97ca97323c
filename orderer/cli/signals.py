"""SIGTERM stops a command as Ctrl-C (SIGINT) does.

Why: Kubernetes stops a container with SIGTERM, then SIGKILL once the grace period is over, and
a process that never set a SIGTERM handler is not stopped by SIGTERM at all when it is the
container's PID 1 (the kernel drops signals whose action is the default for PID 1). Every
long-running command (``evb forward`` as the forwarder Deployment's PID 1, ``evb tail
--follow``, ``evb top``, ``evb send``) already stops cleanly on KeyboardInterrupt: its
``finally`` blocks and asyncio's cancellation run, and :func:`orderer.cli.main` turns it into an
exit status. So SIGTERM raises :class:`Terminated`, a KeyboardInterrupt, and the status is
:data:`EXIT_TERMINATED` (128 + 15, as a shell reports a process ended by SIGTERM) rather than
SIGINT's 130. ``evb serve`` and ``evb spark-job`` install their own SIGTERM handlers (a
graceful stop of the server; the job's stop flag), which replace this one while they run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

EXIT_TERMINATED = 128 + signal.SIGTERM
"""The exit status of a command stopped by SIGTERM."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as on Ctrl-C (every ``except KeyboardInterrupt`` applies)."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` inside the block; the previous handler is put back
    afterwards (``main`` also runs inside test processes). Signal handlers belong to the main
    thread: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
