"""The running totals of a run, kept by the stages sink after each micro-batch and published to
the live page's board.

Exactly once, as the stages' states: micro-batch ``b``'s totals are the totals of the micro-batch
before it plus ``b``'s counts, written to ``CHECKPOINT/evb-live/totals-<b>.json`` before the sink
marks ``b`` done. A micro-batch run again after a restart starts from the same earlier totals,
so it is never added twice; a resumed query publishes the checkpoint's latest totals at once and
goes on from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orderer.spark.live.board import Board
from orderer.spark.live.counts import count_batch
from orderer.spark.live.partials import collect, gathered, gathering
from orderer.spark.live.totals import RunTotals
from orderer.spark.output.files import Directory
from orderer.stages.plan import Plan

__all__ = ["LiveRun"]

_PREFIX, _SUFFIX = "totals-", ".json"


class LiveRun:
    """A run's running totals (a :class:`~orderer.spark.stages.sink.BatchObserver`); ``directory``
    None: a batch job (one micro-batch, nothing kept)."""

    def __init__(
        self,
        spark: Any,
        board: Board,
        run: str,
        dt: int | None,
        plan: Plan | None,
        directory: str | None,
    ) -> None:
        self._board = board
        self._run = run
        self._dt = dt
        self._plan = plan
        self._files = None if directory is None else Directory(spark, directory)
        self._last: RunTotals | None = None
        self._watched: tuple[int, Any] | None = None
        """The micro-batch being written, and the observation of its events' counts."""
        self._gathering: Any = None
        """What gathers the counts (:func:`~orderer.spark.live.partials.gathering`), made at the
        first micro-batch."""

    def start(self) -> None:
        """Publish what the checkpoint holds (a resumed query), or an empty run."""
        kept = self._kept()
        self._last = self._read(kept[-1]) if kept else None
        self._board.publish(self._last or RunTotals(self._run, self._dt))

    def end(self) -> None:
        """The run ended and was read to its end."""
        self._board.ended(self._run)

    def watch(self, batch_id: int, events: Any) -> Any:
        """``events`` (the data source's, with ``liveCounts``) without their counts' column,
        which the job that writes them gathers (:func:`~orderer.spark.live.partials.collect`)."""
        if self._gathering is None:
            self._gathering = gathering()
        events, observation = collect(events, f"evb-live-{self._run}-{batch_id}", self._gathering)
        self._watched = (batch_id, observation)
        return events

    def __call__(self, batch_id: int, results: Mapping[str, Any]) -> None:
        assert self._watched is not None and self._watched[0] == batch_id, "watch() first"
        blobs = gathered(self._watched[1])
        self._watched = None
        totals = self._before(batch_id)
        self._last = None  # until this batch's totals are whole and written
        totals.add(batch_id, count_batch(blobs, results, self._plan))
        if self._files is not None:
            self._files.write(f"{_PREFIX}{batch_id:012d}{_SUFFIX}", [totals.to_json().encode()])
            for older in [b for b in self._kept() if b < batch_id][:-1]:  # one before b kept
                self._files.remove(f"{_PREFIX}{older:012d}{_SUFFIX}")
        self._last = totals
        self._board.publish(totals)

    def _before(self, batch_id: int) -> RunTotals:
        """The totals of the last micro-batch before ``batch_id`` (none: zero), for the caller
        to add to: those in memory when they are that batch's (not copied: the caller forgets
        them until its own are written, so that a failure in between reads them again from the
        checkpoint), else the checkpoint's."""
        earlier = [b for b in self._kept() if b < batch_id]
        if not earlier:
            return RunTotals(self._run, self._dt)
        if self._last is not None and self._last.batch == earlier[-1]:
            return self._last
        return self._read(earlier[-1])

    def _kept(self) -> list[int]:
        if self._files is None:
            return []
        return sorted(
            int(name.removeprefix(_PREFIX).removesuffix(_SUFFIX))
            for name in self._files.names()
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX)
        )

    def _read(self, batch_id: int) -> RunTotals:
        assert self._files is not None
        return RunTotals.from_json(self._files.read_text(f"{_PREFIX}{batch_id:012d}{_SUFFIX}"))
