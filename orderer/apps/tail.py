"""The work behind ``evb tail``: a live server's ordered output printed as ``evb replay`` output
lines (with payloads if asked) or as NSCLDAQ event-builder fragments, up to what is durable or,
following, until the run ended.

Why a module of its own: :mod:`orderer.cli` only parses arguments and maps errors to exit
statuses; the end-to-end tests call these functions without a shell. They read through the
client library (:mod:`orderer.client`) like any consumer would.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import IO

from orderer.batch import EmittedBatch
from orderer.client import (
    DEFAULT_CONNECT_TIMEOUT,
    ChannelSecurity,
    OrderedStreamReader,
    get_stats,
)
from orderer.errors import EvbError
from orderer.formats.json_lines import write_emitted
from orderer.nscldaq.format import pack_fragments

__all__ = ["tail", "tail_nscldaq"]


def tail(
    target: str,
    out: IO[str],
    *,
    from_offset: int = 0,
    until: int | None = None,
    follow: bool = False,
    payload: bool = False,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> int:
    """Print the ordered output from ``from_offset`` as ``evb replay`` OUT lines; without
    ``follow`` or ``until``, up to what is durable now; with ``follow``, until the run ended
    and all of it was printed. Returns how many lines were printed."""
    printed = 0
    for batch in _ordered(target, from_offset, until, follow, security, connect_timeout):
        write_emitted(batch, out, payload=payload)
        out.flush()
        printed += len(batch)
    return printed


def _ordered(
    target: str,
    from_offset: int,
    until: int | None,
    follow: bool,
    security: ChannelSecurity | None,
    connect_timeout: float | None,
) -> Iterator[EmittedBatch]:
    """The ordered output from ``from_offset``; without ``follow`` or ``until``, up to what is
    durable now."""
    if until is None and not follow:
        stats = get_stats(
            target, barrier_log_limit=1, security=security, connect_timeout=connect_timeout
        )
        until = stats.next_offset
    if until is not None and from_offset >= until:
        return
    reader = OrderedStreamReader(
        target, from_offset, until=until, security=security, connect_timeout=connect_timeout
    )
    if until is not None:
        yield from reader
        return
    with _stopped_at_run_end(reader, target, security, connect_timeout):
        yield from reader


RUN_END_POLL = 0.5
"""Seconds between two questions of ``evb tail --follow`` whether the run has ended."""


@contextlib.contextmanager
def _stopped_at_run_end(
    reader: OrderedStreamReader,
    target: str,
    security: ChannelSecurity | None,
    connect_timeout: float | None,
) -> Iterator[None]:
    """``evb tail --follow`` stops once the run ended and everything of it was printed, as a
    shift crew expects (and as the Spark job and ``evb forward`` do): ``GetStats`` says
    ``run_ended`` only once the run's last output is durable, and its ``next_offset`` is then
    the run's end, where the reader stops. A thread asks, since the stream says nothing of the
    end. A server that does not answer is the reader's to report."""
    stop = threading.Event()

    def watch() -> None:
        while True:
            try:
                stats = get_stats(
                    target, barrier_log_limit=1, security=security, connect_timeout=connect_timeout
                )
            except EvbError:
                stats = None
            if stats is not None and stats.run_ended:
                reader.stop_at(stats.next_offset)
                return
            if stop.wait(RUN_END_POLL):
                return

    # not joined: a question under way ends by itself within the connect timeout
    threading.Thread(target=watch, name="evb-tail-run-end", daemon=True).start()
    try:
        yield
    finally:
        stop.set()


def tail_nscldaq(
    target: str,
    out: IO[bytes],
    *,
    from_offset: int = 0,
    until: int | None = None,
    follow: bool = False,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> int:
    """``evb tail --nscldaq``: the ordered output as NSCLDAQ event-builder fragments (header
    {timestamp, source, payload size, barrier} then the payload), the stream NSCLDAQ's glom
    reads; fragments sent with ``evb send --nscldaq`` carry their ring items back byte for
    byte. Returns how many fragments were written."""
    written = 0
    for batch in _ordered(target, from_offset, until, follow, security, connect_timeout):
        out.write(
            pack_fragments(
                batch.timestamp, batch.source, batch.barrier, batch.payload_offsets, batch.payload
            )
        )
        out.flush()
        written += len(batch)
    return written
