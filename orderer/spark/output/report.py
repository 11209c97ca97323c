"""The run report of the Spark job: five plots as PNG (rates over time with the barriers
marked, lateness distribution, multiplicity, the spectrum of timestamp differences within
events per source pair, the coincidence matrix of the sources), the two histograms behind the
last two as data, and a small self-contained HTML page showing them with the summary.

Every plot's title names how the events were built (``dt`` and the timestamp policy): a report
is read to choose ``dt``, and two reports of one run built two ways look alike otherwise.

With ``--stages``, a "Stages" part: each stage's rows and results, and every histogram a stage
declares (:mod:`orderer.spark.stages.stage_histograms`) as a plot, ``stage_<stage>_<column>.png`` (a
2D one, ``stage_<stage>_<x>_<y>.png``, as a colour map), and as data,
``stage_<stage>_<column>.pkl``.

The histograms as data: ``dt_spectrum.pkl`` and ``coincidences.pkl`` are pickled
``boost_histogram.Histogram`` objects (``pickle.load``; the ``hist`` package takes them as they
are), their axes named (``first``, ``other``, ``dt``; ``i``, ``j``) and their ``metadata`` the
run, ``dt``, the timestamp policy and the tick rate. Unpickle only files you trust.

matplotlib runs with the Agg backend (no display: a Spark driver pod has none).
"""

from __future__ import annotations

import html
import json
import pickle
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from orderer.spark.output.summary import RunSummary

__all__ = ["REPORT_FILES", "building", "spectrum_curves", "write_report"]

REPORT_FILES = (
    "rates.png",
    "lateness.png",
    "multiplicity.png",
    "dt_spectrum.png",
    "coincidences.png",
    "dt_spectrum.pkl",
    "coincidences.pkl",
    "index.html",
)

SPECTRUM_CURVES = 8
"""Source pairs drawn one by one in the spectrum, the largest first; the rest are summed."""

ANNOTATED_SOURCES = 12
"""Up to this many sources the coincidence matrix shows its counts in the cells."""


def building(summary: RunSummary) -> str:
    """How the events were built, for the titles: ``dt`` in ticks and in time, and the
    timestamp policy."""
    glom = summary.data.get("glom") or {}
    policy = glom.get("timestamp_policy") or "earliest"
    dt = glom.get("dt")
    if dt is None:
        return f"no building (one event per fragment), timestamp policy {policy}"
    scale, unit = _unit(dt / summary.data["tick_rate"])
    return f"dt {dt} ticks ({dt / summary.data['tick_rate'] * scale:.4g} {unit}), " \
        f"timestamp policy {policy}"


def _unit(seconds: float) -> tuple[float, str]:
    """A time unit that shows ``seconds`` with a few digits: (factor, name)."""
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if seconds >= 1 / scale:
            return scale, unit
    return 1e9, "ns"


def _title(axes: Any, what: str, summary: RunSummary) -> None:
    axes.set_title(f"{what}, run {summary.data['run']}\n{building(summary)}", fontsize="medium")


def _rates(summary: RunSummary, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 4))
    edges = summary.rate_edges
    for source, rates in sorted(summary.rates.items()):
        axes.stairs(rates, edges, label=f"source {source}")
    barriers = summary.data["barriers"]
    if barriers:  # where the barrier fragments are, on the same time axis
        seconds = (np.array([b["timestamp"] for b in barriers], np.int64) - summary.origin)
        axes.vlines(seconds / summary.data["tick_rate"], 0, 1, transform=axes.get_xaxis_transform(),
                    colors="black", linestyles="dotted", linewidth=1,
                    label=f"barriers ({len(barriers)})")
    axes.set_xlabel("time from the first fragment (s, by timestamp)")
    axes.set_ylabel("fragments / s")
    _title(axes, "Rates over time", summary)
    if summary.rates:
        axes.legend(fontsize="small", ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _lateness(summary: RunSummary, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 4))
    lateness = summary.lateness * 1e3
    if lateness.size:
        axes.hist(lateness, bins=50, color="tab:orange")
        axes.set_yscale("log")
    else:
        axes.text(0.5, 0.5, "no late fragments", ha="center", va="center",
                  transform=axes.transAxes)
    axes.set_xlabel("lateness: high-water mark - timestamp (ms)")
    axes.set_ylabel("late fragments")
    _title(axes, f"Lateness distribution ({lateness.size} late fragments)", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _multiplicity(summary: RunSummary, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 4))
    histogram = summary.data["multiplicity"]["histogram"]
    values = [int(v) for v in histogram]
    axes.bar(values, [histogram[str(v)] for v in values], color="tab:green")
    axes.set_xlabel("fragments per event")
    axes.set_ylabel("events")
    _title(axes, f"Multiplicity ({summary.data['events']} events)", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def spectrum_curves(summary: RunSummary) -> list[tuple[str, np.ndarray]]:
    """The spectrum's curves as plotted: the ``SPECTRUM_CURVES`` source pairs with the most
    fragments, by name ("first -> other"), then the rest summed, if any."""
    histogram = summary.spectrum
    values = histogram.values()
    firsts, others = list(histogram.axes[0]), list(histogram.axes[1])
    totals = values.sum(axis=2)
    pairs = sorted(
        (-int(totals[i, j]), int(firsts[i]), int(others[j]), i, j)
        for i, j in zip(*np.nonzero(totals), strict=True)
    )
    curves = [(f"{first} -> {other}", values[i, j]) for _, first, other, i, j in
              pairs[:SPECTRUM_CURVES]]
    rest = pairs[SPECTRUM_CURVES:]
    if rest:
        summed = np.sum([values[i, j] for *_, i, j in rest], axis=0)
        curves.append((f"{len(rest)} other pairs", summed))
    return curves


def _spectrum(summary: RunSummary, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axis = summary.spectrum.axes[2]
    curves = spectrum_curves(summary)
    for name, values in curves:
        axes.stairs(values, axis.edges, label=name)
    dt = (summary.data.get("glom") or {}).get("dt")
    if dt is not None:
        axes.axvline(dt, color="tab:red", linestyle="--", label=f"±dt = {dt} ticks")
        axes.axvline(-dt, color="tab:red", linestyle="--")
    if curves:
        axes.set_yscale("log")
        axes.legend(fontsize="small", ncol=2, title="first source -> source")
    else:
        axes.text(0.5, 0.5, "no event with more than one fragment", ha="center", va="center",
                  transform=axes.transAxes)
    margin = 0.03 * (axis.edges[-1] - axis.edges[0])  # the dt lines clear of the frame
    axes.set_xlim(axis.edges[0] - margin, axis.edges[-1] + margin)
    axes.set_xlabel("timestamp - the event's first fragment's timestamp (ticks)")
    axes.set_ylabel("fragments")
    _title(axes, f"Timestamp differences within events ({int(summary.spectrum.sum())} "
           "fragments)", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _coincidences(summary: RunSummary, path: Path) -> None:
    histogram = summary.coincidences
    sources = [int(s) for s in histogram.axes[0]]
    figure, axes = plt.subplots(figsize=(6.5, 5.5))
    if sources:
        counts = histogram.values()
        image = axes.imshow(counts, cmap="viridis", origin="lower")
        figure.colorbar(image, ax=axes, label="events")
        axes.set_xticks(range(len(sources)), [str(s) for s in sources], fontsize="small")
        axes.set_yticks(range(len(sources)), [str(s) for s in sources], fontsize="small")
        if len(sources) <= ANNOTATED_SOURCES:
            bright = counts.max() / 2
            for (i, j), count in np.ndenumerate(counts):
                axes.text(j, i, str(int(count)), ha="center", va="center", fontsize="x-small",
                          color="black" if count > bright else "white")
    else:
        axes.text(0.5, 0.5, "no events", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel("source")
    axes.set_ylabel("source")
    _title(axes, "Coincidences: events holding both sources", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _stage_histogram(summary: RunSummary, stage: str, column: str, entry: dict[str, Any],
                     path: Path) -> None:
    """A histogram a stage declared (:mod:`orderer.spark.stages.stage_histograms`), as drawn."""
    histogram = summary.stage_histograms[entry["plot"].removesuffix(".png")]
    if histogram.ndim == 2:
        _stage_histogram_2d(summary, stage, column, entry, histogram, path)
        return
    figure, axes = plt.subplots(figsize=(8, 4))
    values = histogram.values()
    axes.stairs(values, histogram.axes[0].edges, color="tab:purple")
    if entry["log"] and values.any():
        axes.set_yscale("log")
    if not values.any():
        axes.text(0.5, 0.5, "nothing in the range", ha="center", va="center",
                  transform=axes.transAxes)
    axes.set_xlabel(entry["label"])
    axes.set_ylabel("rows")
    _title(axes, f"Stage {stage}: {column} ({entry['entries']} rows, {entry['underflow']} below "
           f"and {entry['overflow']} above the range)", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _stage_histogram_2d(summary: RunSummary, stage: str, key: str, entry: dict[str, Any],
                        histogram: Any, path: Path) -> None:
    """A 2D histogram a stage declared, as a colour map (logarithmic with ``log``)."""
    from matplotlib.colors import LogNorm

    figure, axes = plt.subplots(figsize=(7, 5.5))
    values = histogram.values()
    x, y = histogram.axes[0].edges, histogram.axes[1].edges
    if values.any():
        norm = LogNorm(vmin=1, vmax=max(int(values.max()), 1)) if entry["log"] else None
        mesh = axes.pcolormesh(x, y, np.where(values > 0, values, np.nan).T if entry["log"]
                               else values.T, cmap="viridis", norm=norm)
        figure.colorbar(mesh, ax=axes, label="rows")
    else:
        axes.text(0.5, 0.5, "nothing in the range", ha="center", va="center",
                  transform=axes.transAxes)
    axes.set_xlabel(entry["x"]["label"])
    axes.set_ylabel(entry["y"]["label"])
    _title(axes, f"Stage {stage}: {key} ({entry['entries']} rows, {entry['outside']} outside "
           "the range)", summary)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _stages(summary: RunSummary, directory: Path) -> tuple[str, list[Path]]:
    """The report's part on the ``--stages`` (none: nothing): their results, and the plot and
    the pickled boost-histogram of every histogram they declared."""
    stages = summary.data.get("stages") or {}
    if not stages:
        return "", []
    written: list[Path] = []
    rows, plots = [], []
    for stage, entry in stages.items():
        rows.append(f"<tr><td>{html.escape(stage)}</td><td>{html.escape(entry['class'])}</td>"
                    f"<td>{entry['rows']}</td><td>{html.escape(entry['path'])}</td></tr>")
        for column, histogram in (entry.get("histograms") or {}).items():
            plot, data = directory / histogram["plot"], directory / histogram["data"]
            _stage_histogram(summary, stage, column, histogram, plot)
            with data.open("wb") as file:
                pickle.dump(summary.stage_histograms[data.stem], file,
                            protocol=pickle.HIGHEST_PROTOCOL)
            written += [plot, data]
            what = html.escape(f"{stage}: {column}")
            plots.append(
                f"<h3>{what}</h3><img src=\"{html.escape(plot.name)}\" alt=\"histogram of "
                f"{what}\"><p>As data: <a href=\"{html.escape(data.name)}\">"
                f"{html.escape(data.name)}</a> (axis <code>{html.escape(column)}</code>)</p>"
            )
    page = (
        "<h2>Stages</h2><p>The results of the analysis stages (<code>--stages</code>), and the "
        "histograms they declare, over the run's whole results.</p>\n<table><tr><th>stage</th>"
        "<th>class</th><th>rows</th><th>results</th></tr>\n" + "\n".join(rows) + "</table>\n"
        + "\n".join(plots)
    )
    return page, written


def write_report(summary: RunSummary, directory: Path) -> list[Path]:
    """Write the plots and ``index.html`` into ``directory``; returns the files (the stages'
    histograms after :data:`REPORT_FILES`)."""
    directory.mkdir(parents=True, exist_ok=True)
    _rates(summary, directory / "rates.png")
    _lateness(summary, directory / "lateness.png")
    _multiplicity(summary, directory / "multiplicity.png")
    _spectrum(summary, directory / "dt_spectrum.png")
    _coincidences(summary, directory / "coincidences.png")
    for name, histogram in (("dt_spectrum.pkl", summary.spectrum),
                            ("coincidences.pkl", summary.coincidences)):
        with (directory / name).open("wb") as file:
            pickle.dump(histogram, file, protocol=pickle.HIGHEST_PROTOCOL)
    stages, stage_files = _stages(summary, directory)
    data = summary.data
    rows = "".join(
        f"<tr><td>{html.escape(source)}</td><td>{v['fragments']}</td><td>{v['late']}</td>"
        f"<td>{v['rate_hz']}</td></tr>"
        for source, v in data["sources"].items()
    )
    barriers = "".join(
        f"<tr><td>{b['offset']}</td><td>{b['source']}</td><td>{b['type']}</td>"
        f"<td>{b['timestamp']}</td></tr>"
        for b in data["barriers"]
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>evb run {html.escape(data['run'])}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}
img{{max-width:100%}}</style></head><body>
<h1>evb run {html.escape(data['run'])}</h1>
<p>Events built with {html.escape(building(summary))}.</p>
<p>{data['events']} events and {data['barrier_rows']} barrier rows from {data['fragments']}
fragments over {data['duration_seconds']} s; mean multiplicity {data['multiplicity']['mean']};
{data['late']['fragments']} late fragments (max lateness
{data['late']['max_lateness_seconds'] * 1e3:.3f} ms). Glom: {html.escape(json.dumps(data['glom']))}.
</p>
<h2>Sources</h2><table><tr><th>source</th><th>fragments</th><th>late</th><th>rate (Hz)</th></tr>
{rows}</table>
<h2>Rates over time</h2><img src="rates.png" alt="rates over time">
<h2>Lateness</h2><img src="lateness.png" alt="lateness distribution">
<h2>Multiplicity</h2><img src="multiplicity.png" alt="multiplicity histogram">
<h2>Timestamp differences within events</h2>
<p>Each fragment after its event's first one, by its timestamp minus the first one's, per
(first source, source). The events keep only differences within &plusmn;dt: counts still high at
the dashed lines mean dt cuts into a coincidence peak.</p>
<img src="dt_spectrum.png" alt="spectrum of timestamp differences within events">
<h2>Coincidences</h2><p>Events in which both sources have a fragment (the diagonal: events
holding the source).</p><img src="coincidences.png" alt="coincidence matrix of the sources">
{stages}
<h2>Histograms as data</h2><p>Pickled <code>boost_histogram.Histogram</code> objects
(<code>pickle.load</code>; <code>hist</code> takes them as they are), with the run, dt, the
timestamp policy and the tick rate in their <code>metadata</code>:</p><ul>
<li><a href="dt_spectrum.pkl">dt_spectrum.pkl</a>: axes <code>first</code> (source) &times;
<code>other</code> (source) &times; <code>dt</code> (ticks)</li>
<li><a href="coincidences.pkl">coincidences.pkl</a>: axes <code>i</code> &times; <code>j</code>
(sources)</li></ul>
<h2>Barriers</h2><table><tr><th>offset</th><th>source</th><th>type</th><th>timestamp</th></tr>
{barriers}</table>
</body></html>
"""
    (directory / "index.html").write_text(page, encoding="utf-8")
    return [directory / name for name in REPORT_FILES] + stage_files
