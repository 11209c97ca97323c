"""The run report of the Spark job: three plots (rates over time, lateness distribution,
multiplicity) as PNG and a small self-contained HTML page showing them with the summary.

matplotlib runs with the Agg backend (no display: a Spark driver pod has none).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from orderer.spark.summary import RunSummary

__all__ = ["REPORT_FILES", "write_report"]

REPORT_FILES = ("rates.png", "lateness.png", "multiplicity.png", "index.html")


def _rates(summary: RunSummary, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 4))
    edges = summary.rate_edges
    for source, rates in sorted(summary.rates.items()):
        axes.stairs(rates, edges, label=f"source {source}")
    axes.set_xlabel("time from the first fragment (s, by timestamp)")
    axes.set_ylabel("fragments / s")
    axes.set_title(f"Rates over time, run {summary.data['run']}")
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
    axes.set_title(f"Lateness distribution ({lateness.size} late fragments)")
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
    axes.set_title(f"Multiplicity ({summary.data['events']} events)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def write_report(summary: RunSummary, directory: Path) -> list[Path]:
    """Write the plots and ``index.html`` into ``directory``; returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    _rates(summary, directory / "rates.png")
    _lateness(summary, directory / "lateness.png")
    _multiplicity(summary, directory / "multiplicity.png")
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
<h2>Barriers</h2><table><tr><th>offset</th><th>source</th><th>type</th><th>timestamp</th></tr>
{barriers}</table>
</body></html>
"""
    (directory / "index.html").write_text(page, encoding="utf-8")
    return [directory / name for name in REPORT_FILES]
