"""What the live page serves: the runs' totals as published after each micro-batch, rendered
when the page asks for them.

Why rendered on request and not at publication: rendering every histogram as JSON is work on
the job's own thread after every micro-batch, whether anyone looks or not. A publication keeps
a copy of the run's totals (dictionaries of counts: a copy is far cheaper than a rendering),
and the first request after it renders the run's documents (its index and every histogram, as
JSON bytes) once, under the lock the job's thread publishes under: a request never waits for
Spark, never sees half a micro-batch, and a page nobody opens costs the job nothing.

The documents (the page's JavaScript reads them, and so can a script):

- ``runs``: the runs the job built or is building, the latest last.
- a run's index: its micro-batches, events, fragments, late fragments and fraction, rates
  (fragments and events per second of wall-clock time over the last micro-batches), sources,
  stages and their rows, and its histograms (name, title, dimensions).
- a histogram: its axes (edges, or categories for the sources), ``counts`` in range (a list per
  x bin for a 2D one), ``underflow`` and ``overflow`` (a 2D one: ``outside``, the rows in a flow
  bin of either axis; the coincidence matrix has none), ``entries`` (every value counted, the
  flows too) and ``batch``, the micro-batch it is as of.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import boost_histogram as bh
import numpy as np

from orderer.spark.live.totals import RunTotals
from orderer.spark.stages.stage_histograms import cells, file_name, shaped
from orderer.stages.api import Histogram, Histogram2D
from orderer.stages.plan import Plan

__all__ = ["RATE_WINDOW", "Board"]

RATE_WINDOW = 10.0
"""Seconds of wall-clock time the rates are taken over (the micro-batches of the last ones)."""


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _regular(axis: bh.axis.Regular, label: str) -> dict[str, Any]:
    return {"label": label, "edges": [float(e) for e in axis.edges], "categories": None}


def _categories(values: list[int], label: str) -> dict[str, Any]:
    return {"label": label, "edges": None, "categories": [str(v) for v in values]}


def _one_d(
    name: str, title: str, run: RunTotals, x: dict[str, Any], flow: np.ndarray, log: bool
) -> dict[str, Any]:
    """A 1D histogram's document from its counts with the flows (underflow first)."""
    return {
        "name": name,
        "title": title,
        "run": run.run,
        "batch": run.batch,
        "dimensions": 1,
        "x": x,
        "y": None,
        "counts": [int(v) for v in flow[1:-1]],
        "underflow": int(flow[0]),
        "overflow": int(flow[-1]),
        "entries": int(flow.sum()),
        "log": log,
    }


@dataclass
class _RunView:
    totals: RunTotals
    """A copy of the run's totals as of its last publication."""
    history: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=600))
    """(publication time, fragments, events) of the last publications, for the rates."""
    index: bytes | None = None
    """The rendered documents (None: not rendered since the last publication)."""
    histograms: dict[str, bytes] = field(default_factory=dict)


class Board:
    """The runs' rendered documents, published by the job's thread, read by the page's."""

    def __init__(self, plan: Plan | None = None, clock: Any = time.monotonic) -> None:
        self._plan = plan
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, _RunView] = {}
        self._ended: set[str] = set()
        self._runs_document = _dump({"runs": []})

    # ------------------------------------------------------------------ reading (page thread)

    def runs(self) -> bytes:
        with self._lock:
            return self._runs_document

    def index(self, run: str) -> bytes | None:
        with self._lock:
            view = self._runs.get(run)
            return None if view is None else self._rendered(view).index

    def histogram(self, run: str, name: str) -> bytes | None:
        with self._lock:
            view = self._runs.get(run)
            return None if view is None else self._rendered(view).histograms.get(name)

    def _rendered(self, view: _RunView) -> _RunView:
        """``view`` with its documents rendered (the caller holds the lock)."""
        if view.index is None:
            histograms = self._histograms(view.totals)
            view.index = _dump(self._index(view.totals, view.history, histograms))
            view.histograms = {name: _dump(document) for name, document in histograms.items()}
        return view

    # ------------------------------------------------------------------ publishing (job thread)

    def publish(self, totals: RunTotals) -> None:
        """The run's totals as of their micro-batch (copied: the caller goes on adding to
        them); rendered when next asked for."""
        copy = totals.copy()
        with self._lock:
            view = self._runs.get(copy.run)
            history = view.history if view is not None else deque(maxlen=600)
            history.append((self._clock(), copy.fragment_count, copy.events))
            self._runs[copy.run] = _RunView(copy, history)
            self._render_runs()

    def ended(self, run: str) -> None:
        """The run ended and was read to its end: its page says so."""
        with self._lock:
            self._ended.add(run)
            view = self._runs.get(run)
            if view is not None:
                view.index = None  # rendered again, saying so
            self._render_runs()

    def _render_runs(self) -> None:
        self._runs_document = _dump({
            "runs": [
                {"run": run, "state": "ended" if run in self._ended else "running"}
                for run in self._runs
            ]
        })  # fmt: skip

    # ------------------------------------------------------------------ documents

    def _index(
        self,
        totals: RunTotals,
        history: deque[tuple[float, int, int]],
        histograms: dict[str, dict[str, Any]],
    ) -> dict[str, Any]:
        now, fragments, events = history[-1]
        window = [point for point in history if now - point[0] <= RATE_WINDOW]
        start = window[0] if len(window) > 1 else (history[-2] if len(history) > 1 else None)
        seconds = None if start is None else now - start[0]
        fragment_rate = events_rate = None
        if start is not None and seconds:
            fragment_rate = round((fragments - start[1]) / seconds, 3)
            events_rate = round((events - start[2]) / seconds, 3)
        late = totals.late_fragments
        return {
            "run": totals.run,
            "state": "ended" if totals.run in self._ended else "running",
            "batch": totals.batch,
            "micro_batches": totals.batches,
            "events": totals.events,
            "barrier_rows": totals.barrier_rows,
            "events_with_late": totals.events_with_late,
            "fragments": fragments,
            "late_fragments": late,
            "late_fraction": round(late / fragments, 6) if fragments else 0.0,
            "rates": {"fragments_per_second": fragment_rate, "events_per_second": events_rate},
            "sources": [
                {"source": source, "fragments": n, "late": flagged}
                for source, (n, flagged) in totals.sources.items()
            ],
            "stages": [
                {"name": name, "rows": stage.rows} for name, stage in totals.stages.items()
            ],
            "histograms": [
                {"name": name, "title": document["title"], "dimensions": document["dimensions"]}
                for name, document in histograms.items()
            ],
        }

    def _histograms(self, totals: RunTotals) -> dict[str, dict[str, Any]]:
        """Every histogram the job draws, as documents, by name (the report's names)."""
        out: dict[str, dict[str, Any]] = {}
        multiplicity = totals.multiplicity
        top = max(multiplicity, default=0)
        counts = np.zeros(top + 3, np.int64)  # 0..top, and the flows (always empty)
        for m, n in multiplicity.items():
            counts[m + 1] = n
        axis = bh.axis.Regular(top + 1, -0.5, top + 0.5)
        out["multiplicity"] = _one_d(
            "multiplicity", f"Multiplicity ({totals.events} events)", totals,
            _regular(axis, "fragments per event"), counts, False,
        )  # fmt: skip
        spectrum, coincidences = totals.pair_histograms({"run": totals.run})
        summed = spectrum.view(flow=True).sum(axis=(0, 1)) if spectrum.axes[0].size else None
        difference = spectrum.axes[2]
        out["dt_spectrum"] = _one_d(
            "dt_spectrum", "Timestamp differences within events (all source pairs)", totals,
            _regular(difference, "timestamp - first fragment's timestamp (ticks)"),
            summed if summed is not None else np.zeros(difference.size + 2, np.int64), True,
        )  # fmt: skip
        sources = list(totals.sources)
        matrix = coincidences.values() if sources else np.zeros((0, 0), np.int64)
        out["coincidences"] = {
            "name": "coincidences",
            "title": "Coincidences: events holding both sources",
            "run": totals.run,
            "batch": totals.batch,
            "dimensions": 2,
            "x": _categories(sources, "source"),
            "y": _categories(sources, "source"),
            "counts": [[int(v) for v in row] for row in matrix],
            "underflow": 0,
            "overflow": 0,
            "entries": int(matrix.sum()),
            "log": False,
        }
        taken: set[str] = set()
        for step in self._plan.stages if self._plan is not None else ():
            stage = step.stage
            counted = totals.stages.get(stage.name)
            for histogram in stage.histograms:
                name = file_name(stage.name, histogram.key, taken)
                flow = None if counted is None else counted.histograms.get(histogram.key)
                if flow is None:
                    flow = shaped(histogram, np.zeros(cells(histogram), np.int64))
                title = f"Stage {stage.name}: {histogram.key}"
                if isinstance(histogram, Histogram2D):
                    out[name] = _two_d(name, title, totals, histogram, flow)
                    continue
                out[name] = _one_d(
                    name, title, totals, _regular(_axis(histogram), histogram.axis_label), flow,
                    histogram.log,
                )  # fmt: skip
        return out


def _axis(histogram: Histogram) -> bh.axis.Regular:
    return bh.axis.Regular(int(histogram.bins), float(histogram.low), float(histogram.high))


def _two_d(
    name: str, title: str, run: RunTotals, histogram: Histogram2D, flow: np.ndarray
) -> dict[str, Any]:
    """A 2D histogram's document from its counts with the flows: ``counts`` in range, a list
    per x bin; ``outside`` the rows in a flow bin of either axis."""
    inside = flow[1:-1, 1:-1]
    return {
        "name": name,
        "title": title,
        "run": run.run,
        "batch": run.batch,
        "dimensions": 2,
        "x": _regular(_axis(histogram.x), histogram.x.axis_label),
        "y": _regular(_axis(histogram.y), histogram.y.axis_label),
        "counts": [[int(v) for v in row] for row in inside],
        "underflow": None,
        "overflow": None,
        "outside": int(flow.sum() - inside.sum()),
        "entries": int(flow.sum()),
        "log": histogram.log,
    }
