"""A run's running totals: every micro-batch's counts added up, as the live page shows them.

Why sums of counts: counting is additive, so the totals after the last micro-batch equal, bin
for bin, what the end of the run counts from the events as written (the summary's multiplicity,
spectrum and coincidence matrix, the stages' declared histograms), as long as each micro-batch
is added once. The sink adds a micro-batch to the totals of the one before it and keeps the sum
in the query's checkpoint beside the stages' states (:mod:`orderer.spark.live.observer`), so a
micro-batch run again after a restart replaces its own sum instead of adding twice, and a
resumed query goes on from the checkpoint's totals rather than from zero.

The checkpoint's form is JSON (:meth:`RunTotals.to_json`): readable by hand, and free of pickled
code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boost_histogram as bh
import numpy as np
import pyarrow as pa

from orderer.spark.live.counts import BatchCounts
from orderer.spark.output.coincidence import spectrum_axis, to_histograms

__all__ = ["RunTotals", "StageTotals"]


@dataclass
class StageTotals:
    """One stage's results so far: rows, and each declared histogram's counts by column
    (``bins + 2``, the underflow first)."""

    rows: int = 0
    histograms: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class RunTotals:
    """The counts of every micro-batch of a run up to :attr:`batch`."""

    run: str
    dt: int | None
    batch: int = -1
    """The last micro-batch counted (-1: none)."""
    batches: int = 0
    shapes: dict[tuple[int, int, bool], int] = field(default_factory=dict)
    fragments: dict[tuple[int, bool], int] = field(default_factory=dict)
    pairs: dict[tuple[int, int, int, int], int] = field(default_factory=dict)
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    stages: dict[str, StageTotals] = field(default_factory=dict)

    def add(self, batch_id: int, counts: BatchCounts) -> None:
        """Micro-batch ``batch_id``'s counts added (the caller adds each once, in order)."""
        for key, n in counts.shapes.items():
            self.shapes[key] = self.shapes.get(key, 0) + n
        for fragment_key, n in counts.fragments.items():
            self.fragments[fragment_key] = self.fragments.get(fragment_key, 0) + n
        for pair_key, n in counts.pairs.items():
            self.pairs[pair_key] = self.pairs.get(pair_key, 0) + n
        if counts.first_timestamp is not None:
            first = self.first_timestamp
            self.first_timestamp = (
                counts.first_timestamp if first is None else min(first, counts.first_timestamp)
            )
        if counts.last_timestamp is not None:
            last = self.last_timestamp
            self.last_timestamp = (
                counts.last_timestamp if last is None else max(last, counts.last_timestamp)
            )
        for name, stage in counts.stages.items():
            if stage.replaces:  # an aggregation: the finished table of the run so far
                self.stages[name] = StageTotals(
                    stage.rows, {c: v.copy() for c, v in stage.histograms.items()}
                )
                continue
            totals = self.stages.setdefault(name, StageTotals())
            totals.rows += stage.rows
            for column, values in stage.histograms.items():
                before = totals.histograms.get(column)
                totals.histograms[column] = values.copy() if before is None else before + values
        self.batch = batch_id
        self.batches += 1

    def copy(self) -> RunTotals:
        """A copy that later :meth:`add` calls do not change (the arrays are shared: ``add``
        replaces them, never writes into them)."""
        return RunTotals(
            self.run,
            self.dt,
            self.batch,
            self.batches,
            dict(self.shapes),
            dict(self.fragments),
            dict(self.pairs),
            self.first_timestamp,
            self.last_timestamp,
            {n: StageTotals(s.rows, dict(s.histograms)) for n, s in self.stages.items()},
        )

    # ------------------------------------------------------------------ as the summary says

    @property
    def events(self) -> int:
        """Event rows (barrier rows aside), as the summary's ``events``."""
        return sum(n for (_, barrier, _), n in self.shapes.items() if barrier == 0)

    @property
    def barrier_rows(self) -> int:
        return sum(n for (_, barrier, _), n in self.shapes.items() if barrier != 0)

    @property
    def events_with_late(self) -> int:
        """Rows holding a late fragment (barrier rows too), as the summary's."""
        return sum(n for (_, _, late), n in self.shapes.items() if late)

    @property
    def fragment_count(self) -> int:
        return sum(self.fragments.values())

    @property
    def late_fragments(self) -> int:
        return sum(n for (_, late), n in self.fragments.items() if late)

    @property
    def multiplicity(self) -> dict[int, int]:
        """Events by fragments per event, as the summary's ``multiplicity.histogram``."""
        histogram: dict[int, int] = {}
        for (multiplicity, barrier, _), n in self.shapes.items():
            if barrier == 0:
                histogram[multiplicity] = histogram.get(multiplicity, 0) + n
        return dict(sorted(histogram.items()))

    @property
    def sources(self) -> dict[int, tuple[int, int]]:
        """(fragments, late fragments) by source."""
        out: dict[int, tuple[int, int]] = {}
        for (source, late), n in sorted(self.fragments.items()):
            total, flagged = out.get(source, (0, 0))
            out[source] = (total + n, flagged + (n if late else 0))
        return out

    def pair_histograms(self, metadata: dict[str, Any]) -> tuple[bh.Histogram, bh.Histogram]:
        """The spectrum and the coincidence matrix so far, as the summary makes them."""
        keys = sorted(self.pairs)
        columns = list(zip(*keys, strict=True)) if keys else [(), (), (), ()]
        table = pa.table(
            {
                "kind": pa.array(columns[0], pa.int32()),
                **{k: pa.array(v, pa.int64()) for k, v in zip("abc", columns[1:], strict=True)},
                "value": pa.array([self.pairs[k] for k in keys], pa.int64()),
            }
        )
        return to_histograms(table, list(self.sources), spectrum_axis(self.dt), metadata)

    # ------------------------------------------------------------------ checkpoint

    def to_json(self) -> str:
        return json.dumps(
            {
                "run": self.run,
                "dt": self.dt,
                "batch": self.batch,
                "batches": self.batches,
                "shapes": [[*k, n] for k, n in sorted(self.shapes.items())],
                "fragments": [[*k, n] for k, n in sorted(self.fragments.items())],
                "pairs": _columns(self.pairs),
                "first_timestamp": self.first_timestamp,
                "last_timestamp": self.last_timestamp,
                "stages": {
                    name: {
                        "rows": stage.rows,
                        "histograms": {c: v.tolist() for c, v in stage.histograms.items()},
                    }
                    for name, stage in self.stages.items()
                },
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> RunTotals:
        data = json.loads(text)
        return cls(
            run=data["run"],
            dt=data["dt"],
            batch=int(data["batch"]),
            batches=int(data["batches"]),
            shapes={(int(m), int(b), bool(late)): int(n) for m, b, late, n in data["shapes"]},
            fragments={(int(s), bool(late)): int(n) for s, late, n in data["fragments"]},
            pairs=_from_columns(data["pairs"]),
            first_timestamp=data["first_timestamp"],
            last_timestamp=data["last_timestamp"],
            stages={
                name: StageTotals(
                    int(stage["rows"]),
                    {c: np.asarray(v, np.int64) for c, v in stage["histograms"].items()},
                )
                for name, stage in data["stages"].items()
            },
        )


def _columns(pairs: dict[tuple[int, int, int, int], int]) -> dict[str, list[int]]:
    """The pair counts as columns (``kind, a, b, c, n``): thousands of them each micro-batch,
    written faster so than as a list of rows."""
    keys = list(zip(*pairs, strict=True)) if pairs else [(), (), (), ()]
    return {
        **{name: list(column) for name, column in zip(("kind", "a", "b", "c"), keys, strict=True)},
        "n": list(pairs.values()),
    }


def _from_columns(data: Any) -> dict[tuple[int, int, int, int], int]:
    """:func:`_columns`' pairs back; a list of rows ``kind, a, b, c, n`` (what totals files
    written before the columns hold) too."""
    if isinstance(data, list):
        return {(int(k), int(a), int(b), int(c)): int(n) for k, a, b, c, n in data}
    keys = zip(data["kind"], data["a"], data["b"], data["c"], strict=True)
    return dict(zip(keys, data["n"], strict=True))
