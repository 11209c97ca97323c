"""The report's histograms that help choose dt (orderer/spark/output/coincidence.py, report.py): the
spectrum of timestamp differences within events per (first source, source) and the coincidence
matrix, with exact bin contents for a small hand-made set of events, counted on the executors
and summed by Spark (PySpark local mode); the plots' titles and barrier markers; the pickled
histograms; and one real run of the job whose histogram totals match its built events."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import boost_histogram as bh
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.figure import Figure

from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.output import coincidence
from orderer.spark.output.coincidence import (
    SPECTRUM_BINS,
    pair_partials,
    spectrum_axis,
    to_histograms,
)
from orderer.spark.output.report import REPORT_FILES, building, spectrum_curves, write_report
from orderer.spark.output.summary import SUMMARY_SCHEMA, summarize
from tests.spark.logdata import write_ordered_log
from tests.spark.oracle import random_stream

DT = 5
TICK_RATE = 1e3
FRAGMENT = pa.struct(
    [("offset", pa.int64()), ("source", pa.int64()), ("timestamp", pa.int64()),
     ("late", pa.bool_())]
)


def _events(rows: list[tuple[int, list[tuple[int, int]]]], first_offset: int = 0) -> pa.Table:
    """Event rows of SUMMARY_SCHEMA from (barrier type, [(source, timestamp), ...])."""
    offset, table = first_offset, []
    for barrier, fragments in rows:
        listed = [
            {"offset": offset + k, "source": s, "timestamp": t, "late": t < fragments[0][1]}
            for k, (s, t) in enumerate(fragments)
        ]
        table.append({
            "event": offset, "timestamp": fragments[0][1], "multiplicity": len(fragments),
            "barrier": barrier, "late": sum(f["late"] for f in listed), "fragments": listed,
        })
        offset += len(fragments)
    return pa.Table.from_pylist(table, schema=pa.schema([
        ("event", pa.int64()), ("timestamp", pa.int64()), ("multiplicity", pa.int32()),
        ("barrier", pa.int64()), ("late", pa.int32()), ("fragments", pa.list_(FRAGMENT)),
    ]))


# (first source, other source, difference) of every non-first fragment of the ordinary events
HAND_MADE = _events([
    (0, [(1, 100), (2, 103), (3, 98), (2, 100), (1, 105)]),  # 1->2: 3, 0; 1->3: -2; 1->1: 5
    (0, [(2, 200), (1, 195)]),  # 2->1: -5 (the window's lower edge)
    (0, [(4, 300)]),  # one fragment: nothing in the spectrum
    (7, [(1, 400)]),  # a barrier row: not an event
    (0, [(3, 500), (2, 501), (2, 502)]),  # 3->2: 1, 2
])
EXPECTED_SPECTRUM = {(1, 2, 3): 1, (1, 2, 0): 1, (1, 3, -2): 1, (1, 1, 5): 1, (2, 1, -5): 1,
                     (3, 2, 1): 1, (3, 2, 2): 1}
EXPECTED_COINCIDENCES = {  # events holding both; the diagonal: events holding the source
    (1, 1): 2, (2, 2): 3, (3, 3): 2, (4, 4): 1, (1, 2): 2, (1, 3): 1, (2, 3): 2,
}
SOURCES = [1, 2, 3, 4]


def _spectrum_dict(histogram: bh.Histogram) -> dict[tuple[int, int, int], int]:
    """Non-empty cells by (first source, other source, difference in ticks); one-tick bins."""
    assert histogram.axes[2].widths == pytest.approx(1.0)
    view = histogram.view(flow=True)
    assert view[:, :, 0].sum() == view[:, :, -1].sum() == 0  # nothing outside [-dt, dt]
    centres = histogram.axes[2].centers
    return {
        (int(histogram.axes[0][i]), int(histogram.axes[1][j]), round(float(centres[k]))):
            int(histogram.values()[i, j, k])
        for i, j, k in zip(*np.nonzero(histogram.values()), strict=True)
    }


def _coincidence_dict(histogram: bh.Histogram) -> dict[tuple[int, int], int]:
    sources = [int(s) for s in histogram.axes[0]]
    values = histogram.values()
    return {(sources[i], sources[j]): int(values[i, j])
            for i, j in zip(*np.nonzero(values), strict=True) if i <= j}


def _partials_of(events: pa.Table, axis: bh.axis.Regular) -> pa.Table:
    """The executors' pass over each batch, then the sum Spark's groupBy makes."""
    ordinary = events.filter(pa.compute.equal(events.column("barrier"), 0)).select(["fragments"])
    parts = list(pair_partials(axis)(iter(ordinary.to_batches(max_chunksize=2))))
    summed = pa.Table.from_batches(parts).group_by(["kind", "a", "b", "c"]).aggregate(
        [("value", "sum")]
    )
    return summed.rename_columns({"value_sum": "value"})


def test_the_executors_counts_give_the_exact_spectrum_and_coincidences() -> None:
    """Batches of two events each, summed: every bin as counted by hand."""
    spectrum, matrix = to_histograms(
        _partials_of(HAND_MADE, spectrum_axis(DT)), SOURCES, spectrum_axis(DT), {"dt": DT}
    )
    assert spectrum.axes[2].size == 2 * DT + 1
    assert _spectrum_dict(spectrum) == EXPECTED_SPECTRUM
    assert _coincidence_dict(matrix) == EXPECTED_COINCIDENCES
    assert np.array_equal(matrix.values(), matrix.values().T)
    assert (spectrum.metadata["dt"], matrix.metadata["dt"]) == (DT, DT)


def test_the_coincidences_in_blocks_of_events_equal_the_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An incidence matrix of one event per block (the bound on the executors' memory)."""
    monkeypatch.setattr(coincidence, "_CELLS", 1)
    _, matrix = to_histograms(
        _partials_of(HAND_MADE, spectrum_axis(DT)), SOURCES, spectrum_axis(DT), {}
    )
    assert _coincidence_dict(matrix) == EXPECTED_COINCIDENCES


def test_the_difference_axis_follows_dt() -> None:
    """The window [-dt, dt] is inside the axis, edges included, for any dt; one-tick bins up to
    SPECTRUM_BINS of them, then SPECTRUM_BINS wider ones."""
    for dt, bins in ((0, 1), (100, 201), (150_000, SPECTRUM_BINS), (None, 1)):
        axis = spectrum_axis(dt)
        window = dt or 0
        assert axis.size == bins
        assert list(axis.index(np.array([-window, 0, window]))) == [0, bins // 2, bins - 1]
        assert axis.index(window + 1) == bins and axis.index(-window - 1) == -1
        assert (axis.name, axis.label) == ("dt", "timestamp - first fragment's timestamp (ticks)")


def _summary(spark: Any, tmp_path: Path, glom: dict[str, Any]) -> Any:
    """The hand-made events in two Parquet files, summarized by Spark."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for k, part in enumerate((HAND_MADE.slice(0, 2), HAND_MADE.slice(2))):
        pq.write_table(part, tmp_path / f"part-{k}.parquet")
    frame = spark.read.schema(SUMMARY_SCHEMA).parquet(str(tmp_path))
    return summarize(frame, run="hand", tick_rate=TICK_RATE, glom=glom)


def test_spark_sums_the_partitions_into_the_exact_histograms(spark: Any, tmp_path: Path) -> None:
    summary = _summary(spark, tmp_path, {"dt": DT, "timestamp_policy": "latest"})
    assert _spectrum_dict(summary.spectrum) == EXPECTED_SPECTRUM
    assert _coincidence_dict(summary.coincidences) == EXPECTED_COINCIDENCES
    assert [list(a) for a in summary.coincidences.axes] == [SOURCES, SOURCES]
    assert summary.data["dt_spectrum"] == {"fragments": 7, "bins": 11, "bin_width_ticks": 1.0}
    assert summary.spectrum.metadata == {
        "run": "hand", "dt": DT, "timestamp_policy": "latest", "tick_rate": TICK_RATE,
        "what": summary.spectrum.metadata["what"],
    }


def test_the_report_titles_markers_curves_and_pickles(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _summary(spark, tmp_path / "events", {"dt": DT, "timestamp_policy": "latest"})
    drawn: dict[str, Any] = {}
    save = Figure.savefig

    def recording(figure: Figure, path: Any, **kwargs: Any) -> None:
        axes = figure.axes[0]
        drawn[Path(path).name] = (axes.get_title(), [
            (c.get_label(), [float(s[0][0]) for s in c.get_segments()])
            for c in axes.collections
        ])
        save(figure, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    files = write_report(summary, tmp_path / "report")
    assert [f.name for f in files] == list(REPORT_FILES) and all(f.is_file() for f in files)

    # dt and the timestamp policy in every plot's title
    assert sorted(drawn) == sorted(n for n in REPORT_FILES if n.endswith(".png"))
    for name, (title, _) in drawn.items():
        assert "dt 5 ticks (5 ms), timestamp policy latest" in title, name
    # the barrier fragment (source 1 at ts 400) marked on the rates at (400 - 98) / 1000 s
    assert ("barriers (1)", [pytest.approx(0.302)]) in drawn["rates.png"][1]

    # the spectrum's curves: the largest pairs by name, the rest summed past SPECTRUM_CURVES
    curves = dict(spectrum_curves(summary))
    assert next(iter(curves)) == "1 -> 2" and curves["3 -> 2"].sum() == 2
    monkeypatch.setattr("orderer.spark.output.report.SPECTRUM_CURVES", 2)
    assert [name for name, _ in spectrum_curves(summary)] == ["1 -> 2", "3 -> 2", "3 other pairs"]

    # the histograms as data: they unpickle to what was plotted, axes named
    for name, histogram, names in (
        ("dt_spectrum.pkl", summary.spectrum, ["first", "other", "dt"]),
        ("coincidences.pkl", summary.coincidences, ["i", "j"]),
    ):
        with (tmp_path / "report" / name).open("rb") as file:
            loaded = pickle.load(file)
        assert isinstance(loaded, bh.Histogram) and loaded == histogram
        assert [a.name for a in loaded.axes] == names
        assert loaded.metadata["dt"] == DT
        assert f'href="{name}"' in (tmp_path / "report" / "index.html").read_text()


def test_the_titles_of_a_run_without_building(spark: Any, tmp_path: Path) -> None:
    summary = _summary(spark, tmp_path, {"dt": None, "timestamp_policy": "earliest"})
    assert building(summary) == "no building (one event per fragment), timestamp policy earliest"
    assert summary.spectrum.axes[2].size == 1


def test_the_job_writes_the_histograms_of_its_events(spark: Any, tmp_path: Path) -> None:
    """A real run of the job (--path, local mode): the files are there, and the spectrum holds
    every fragment after its event's first one, the coincidence diagonal every (event, source)."""
    data = write_ordered_log(tmp_path / "data", random_stream(6, 5000, barrier_share=0.01))
    out = tmp_path / "out"
    job.run(spark, JobConfig.from_argv(
        ["--path", str(data), "--dt", "60", "--output", str(out), "--run", "r", "--quiet"]
    ))
    report = out / "runs" / "r" / "report"
    assert all((report / name).is_file() for name in REPORT_FILES)
    events = pq.read_table(out / "events" / "run=r").to_pylist()
    ordinary = [e for e in events if e["barrier"] == 0]
    assert len(ordinary) < len(events)  # barriers were there, and are left out
    with (report / "dt_spectrum.pkl").open("rb") as file:
        spectrum = pickle.load(file)
    with (report / "coincidences.pkl").open("rb") as file:
        matrix = pickle.load(file)
    non_first = sum(e["multiplicity"] - 1 for e in ordinary)
    assert non_first > 0 and spectrum.sum(flow=True) == non_first == spectrum.sum()
    assert np.trace(matrix.values()) == sum(
        len({f["source"] for f in e["fragments"]}) for e in ordinary
    )
    summary = json.loads((out / "runs" / "r" / "summary.json").read_text())
    assert summary["dt_spectrum"]["fragments"] == non_first
    assert spectrum.metadata["dt"] == 60 and spectrum.axes[2].size == 121
