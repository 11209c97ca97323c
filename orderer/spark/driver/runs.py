"""Following an orderer from run to run (``evb spark-job --follow-runs``): which run to build
next, when to stop, and the run table they are decided from.

One EventBuilder serves a sequence of runs (docs/ordering.md, "Runs one after another"); its
``GetStats.runs`` is the run table: each run's number and output offsets ``[start_offset,
end_offset)``, the end known once the next run began or the current one ended. The job builds
the runs one at a time, each as its own streaming query over exactly its own offsets (the
source's option ``run`` ends the read where that run ends and closes its last event there), so
an event never spans two runs however the micro-batches fall, and each run keeps the layout,
the checkpoint and the sink log a single run has (``events/run=<number>/``, ``runs/<number>/``).

Why a query per run rather than one query with a ``run`` column: the file sink's log belongs
to one directory, a run's summary needs the run's events alone, and a run resumed from its
checkpoint after a restart must build exactly as it began; per run, all three hold as they do
for a single run. The cost is a query start (about a second) between two runs.

A run is done when its summary exists (``runs/<number>/summary.json``, written only once the
run ended and the job had consumed it to its end): a restarted job goes on with the first run
that is not. The job stops when told (SIGTERM), when a run's query stops, or with
``--until-run N`` once every run up to N is done and the table holds N or a later run.

A run spread over N orderers (``--target a,b,c``) is begun and ended at every orderer, so each
orderer's run table holds the same runs: :func:`orderers_table` is their view as one table (a
run is in it once begun at every orderer; it has ended once ended at every one), each run with
its offsets at each orderer (:class:`OrderersRun`), and :func:`follow` follows it as it follows
one orderer's.

This module imports neither Spark nor the job: :mod:`orderer.spark.driver.job` gives
:func:`follow` its way to build a run. Where a run ends in a run table is the source's
(:func:`orderer.spark.source.access.run_end`: its option ``run``).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol, TypeVar

from orderer.errors import ConfigError, ServiceUnavailable
from orderer.job_config import JobConfig
from orderer.stats import RunSpan, Stats

__all__ = [
    "OrderersRun",
    "RunSpan",
    "StopSignal",
    "check_arguments",
    "finished",
    "follow",
    "next_run",
    "orderers_table",
    "table",
]


class Numbered(Protocol):
    """A run of a run table, as following it needs it: its number."""

    @property
    def run(self) -> int: ...


_Run = TypeVar("_Run", bound=Numbered)


@dataclass(frozen=True, slots=True)
class OrderersRun:
    """One run of a run spread over N orderers: its output at orderer ``k`` is ``[starts[k],
    ends[k])``, an end None while the run goes on there."""

    run: int
    starts: tuple[int, ...]
    ends: tuple[int | None, ...]

    @property
    def ended(self) -> bool:
        """Ended at every orderer (each one's end is known)."""
        return all(end is not None for end in self.ends)


def orderers_table(tables: Sequence[Sequence[RunSpan]]) -> list[OrderersRun]:
    """The run tables of the N orderers of one run (orderer ``k``'s at ``k``) as one table, in
    order: the runs begun at every orderer (a run an orderer has not begun yet is left out until
    it has; the numbers only increase, so the runs of one table are a prefix of another's)."""
    runs: list[OrderersRun] = []
    for spans in zip(*tables, strict=False):  # the runs every orderer has begun
        numbers = {span.run for span in spans}
        if len(numbers) != 1:
            listed = ", ".join(str(span.run) for span in spans)
            raise ConfigError(
                "--target", None, f"the orderers' run tables differ (runs {listed} in one "
                "place, in the orderers' order): begin and end each run at every orderer"
            )
        runs.append(OrderersRun(
            spans[0].run, tuple(s.start_offset for s in spans), tuple(s.end_offset for s in spans)
        ))  # fmt: skip
    return runs


def table(stats: Stats) -> list[RunSpan]:
    """The run table of a ``GetStats`` (:class:`~orderer.stats.RunSpan`: a run's output is
    ``[start_offset, end_offset)``, ``end_offset`` None while it goes on), in order."""
    return list(stats.runs)




def next_run(
    runs: Sequence[_Run], done: Callable[[int], bool], until: int | None
) -> _Run | None:
    """The first run of the table that is not done (and not above ``until``); None: none yet."""
    for span in runs:
        if (until is None or span.run <= until) and not done(span.run):
            return span
    return None


def finished(runs: Sequence[Numbered], done: Callable[[int], bool], until: int | None) -> bool:
    """Whether ``--until-run until`` is reached: every run up to it done, and the table holds it
    or a later run (a later one: the numbers skipped it, and no run up to it can come any more,
    run numbers only increase)."""
    if until is None:
        return False
    if not any(span.run >= until for span in runs):
        return False
    return all(done(span.run) for span in runs if span.run <= until)


def follow(
    runs: Callable[[], list[_Run]],
    done: Callable[[int], bool],
    build: Callable[[_Run], bool],
    *,
    until: int | None,
    stopped: Callable[[], bool],
    poll: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Build run after run: ``build(span)`` builds one whole run (True) or gives up when told to
    stop or when its query stopped (False: the job stops too); between runs the run table is
    looked at every ``poll`` seconds until the next run begins."""
    while not stopped():
        try:
            spans = runs()
        except ServiceUnavailable as error:  # the orderer restarts: wait for it
            print(f"evb spark-job: orderer unavailable, waiting: {error}", file=sys.stderr)
            sleep(poll)
            continue
        if finished(spans, done, until):
            return
        span = next_run(spans, done, until)
        if span is None:
            sleep(poll)
        elif not build(span):
            return


class StopSignal:
    """SIGTERM asks the job to stop (a SparkApplication's driver pod being deleted): the flag is
    looked at between two polls, the query is stopped (its checkpoint keeps what it committed)
    and the run in progress gets no summary; the previous handler is back on exit."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: Any = None

    def requested(self) -> bool:
        return self._event.is_set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def check_arguments(config: JobConfig) -> None:
    """The follow flags' mistakes, as ConfigErrors naming the flag."""
    if config.until_run is not None:
        if not config.follow_runs:
            raise ConfigError("--until-run", config.until_run, "needs --follow-runs")
        if not 0 <= config.until_run < 2**64:
            raise ConfigError("--until-run", config.until_run, "must be a run number >= 0")
    if not config.follow_runs:
        return
    if config.target is None:
        raise ConfigError("--follow-runs", None, "needs --target (a live orderer's runs)")
    if config.run is not None:
        raise ConfigError(
            "--run", config.run, "cannot be given with --follow-runs: the run numbers name the runs"
        )
