"""How the ``evb`` data source reaches what it reads: an orderer's channel security from the
source's options (:func:`channel_security`), a call that waits for a restarting orderer
(:func:`retried`), a data directory's ordered log (:func:`segment_files`), where a run of the
orderer's run table ends (:func:`run_end`, the option ``run``).

Why a module of its own: the one-orderer source (:mod:`~orderer.spark.source.datasource`,
:mod:`~orderer.spark.source.planning`, :mod:`~orderer.spark.source.readers`) and the reads of a
run over several orderers (:mod:`~orderer.spark.source.sliced_reads`,
:mod:`~orderer.spark.source.sliced_source`) both need them, and the one-orderer source hands a
comma list of targets or paths to the other: here, neither imports the other's module to reach
an orderer. Nothing here imports pyspark: the job takes these before Spark starts
(:mod:`orderer.spark.driver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from orderer.errors import AuthenticationError, ConfigError, ServiceUnavailable
from orderer.formats import log_format
from orderer.formats.log_format import ordered_segments
from orderer.stats import RunSpan

__all__ = ["Outage", "channel_security", "retried", "run_end", "segment_files"]

log = logging.getLogger("evb.spark")

_T = TypeVar("_T")

_FIRST_WAIT = 0.05
"""Seconds before the first retry of an orderer that did not answer; each further wait doubles,
up to :data:`_LONGEST_WAIT`."""
_LONGEST_WAIT = 1.0


class Outage:
    """How long one orderer has not answered, and the wait before the next try (an orderer
    killed and restarted on its data directory: a call in flight ends UNAVAILABLE, and one made
    while it dies or starts is told the connection closed, at once, not after its connect
    timeout)."""

    __slots__ = ("_since", "_wait", "target", "timeout")

    def __init__(self, target: str, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self._since: float | None = None
        self._wait = _FIRST_WAIT

    def answered(self) -> None:
        self._since, self._wait = None, _FIRST_WAIT

    def wait_or_raise(self, error: ServiceUnavailable) -> None:
        """Sleep before the next try; raise ``error`` once ``timeout`` seconds have passed
        without an answer, or at once when it refused the credentials (no wait cures that)."""
        if isinstance(error, AuthenticationError):
            raise error
        now = time.monotonic()
        if self._since is None:
            self._since = now
            log.warning("orderer %s unavailable, waiting up to %g s: %s",
                        self.target, self.timeout, error)
        if now - self._since > self.timeout:
            raise error
        time.sleep(self._wait)
        self._wait = min(2 * self._wait, _LONGEST_WAIT)


def retried(call: Callable[[], _T], target: str, timeout: float) -> _T:
    """``call()`` (one call to the orderer at ``target``) tried again while the orderer is
    unavailable, up to ``timeout`` seconds: the query waits at that orderer, it does not end.
    (A call's connect timeout alone does not cover a restart: a call broken off in flight, or
    refused while the orderer dies or starts, fails at once.)"""
    outage = Outage(target, timeout)
    while True:
        try:
            return call()
        except ServiceUnavailable as error:
            outage.wait_or_raise(error)


def channel_security(options: tuple[tuple[str, str], ...]) -> Any:
    """The client's ChannelSecurity from the source's security options; None for plaintext."""
    if not options:
        return None
    from orderer.client import ChannelSecurity

    given = dict(options)
    return ChannelSecurity.from_files(
        ca=given.get("tlsCa"),
        cert=given.get("tlsCert"),
        key=given.get("tlsKey"),
        token_file=given.get("tokenFile"),
        tls=given.get("tls", "").lower() in ("1", "true", "yes"),
    )


def segment_files(path: Path) -> list[Path]:
    """The ordered log's segments: ``path`` is the data directory or its ``ordered/``."""
    segments = ordered_segments(path)
    if not segments:
        raise ConfigError("path", str(path), "holds no ordered log (ordered-*.arrow)")
    data_dir = segments[0].parent.parent
    written = log_format.ordered_format_of(segments[0].parent)
    if written is log_format.ORDERED_SCHEMA and not log_format.log_segments(
        data_dir / log_format.ARRIVALS, log_format.ARRIVALS
    ):
        raise ConfigError(
            "path",
            str(path),
            f"has an ordered log but no arrival log ({data_dir / log_format.ARRIVALS} holds no "
            "arrivals-*.arrow): the payloads are there; give the whole data directory",
        )
    return segments


def run_end(runs: Sequence[RunSpan], run: int) -> int | None:
    """Where ``run`` ends in a run table (``GetStats.runs``); None while it goes on. A run the
    table does not hold is a ConfigError naming the option ``run`` and the runs it holds."""
    for span in runs:
        if span.run == run:
            return span.end_offset
    known = ", ".join(str(span.run) for span in runs) or "none"
    raise ConfigError("run", run, f"is not in the orderer's run table (runs: {known})")
