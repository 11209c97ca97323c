"""``evb demo``: a synthetic run through ``evb replay``, with a readable summary.

Shows in a few seconds, without a cluster or a detector, what the orderer does with the things that
go wrong in a real run: network jitter, a source that stalls, a source that comes back with a late
backlog, a heterogeneous barrier and a source that loses its end-run barrier. The run is written as
an ordinary replay input, so the user can rerun it with other parameters (the command is printed).

Called by ``evb demo`` (:mod:`orderer.cli`).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from orderer.config import OrdererConfig
from orderer.replay import synthetic
from orderer.replay.stream import replay_path

__all__ = ["demo_config", "demo_run", "run_demo"]

_BUILD_WINDOW = 2.0
_COLUMNS = (
    "received", "emitted", "late", "dropped", "duplicates", "out_of_order", "max_lateness",
    "barriers",
)


def demo_run(seed: int) -> synthetic.SyntheticRun:
    """Six sources at 200 fragments/s for 30 s, shipping batches of 10 with 50 ms jitter.

    Source 4 hangs from 5 s to 8 s (no data, output waits a build window); source 5 holds its
    data from 22 s to 26 s and then delivers it (a late backlog); source 1 sends type 4 at the
    first sync barrier (heterogeneous); source 6 loses its end-run barrier (incomplete).
    """
    return synthetic.SyntheticRun(
        n_sources=6,
        fragments_per_source=6_000,
        rate=200.0,
        tick_rate=1e8,
        jitter=0.05,
        batch_size=10,
        stalls=(
            synthetic.Stall(source=4, start=5.0, end=8.0),
            synthetic.Stall(source=5, start=22.0, end=26.0, backlog=True),
        ),
        sync_barriers=2,
        heterogeneous_barrier=True,
        incomplete_barrier=6,
        seed=seed,
    )


def demo_config(spec: synthetic.SyntheticRun) -> OrdererConfig:
    """A window of a few seconds (jitter is 50 ms, so it is only needed for stalls); every source
    declared, so that none is emitted before the others are known."""
    return OrdererConfig(build_window=_BUILD_WINDOW, startup_delay=2.0, sources=spec.source_ids)


def _source_table(counters: dict[str, Any], tick_rate: float) -> Table:
    """Counters down, sources across (a handful of sources fits an 80-column terminal)."""
    sources = counters["sources"]
    missing = counters["missing"]
    totals = counters["totals"]
    table = Table(title="Counters per source", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("source", style="bold")
    for source in sources:
        table.add_column(source, justify="right")
    table.add_column("total", justify="right", style="bold")

    def cell(name: str, value: int) -> str:
        text = f"{value / tick_rate:.3f}" if name == "max_lateness" else f"{value:,}"
        warn = name in ("late", "dropped", "max_lateness", "missing") and value
        return f"[yellow]{text}[/yellow]" if warn else text

    for name in _COLUMNS:
        label = "max lateness (s)" if name == "max_lateness" else name.replace("_", " ")
        row = [cell(name, per[name]) for per in sources.values()]
        row.append(cell(name, totals[name]) if name in totals else "")
        table.add_row(label, *row)
    table.add_row(
        "missing",
        *(cell("missing", missing.get(source, 0)) for source in sources),
        cell("missing", sum(missing.values())),
    )
    return table


def _barrier_table(counters: dict[str, Any]) -> Table:
    names = ("complete", "incomplete", "homogeneous", "heterogeneous")
    table = Table(title="Barriers", title_justify="left", box=box.SIMPLE_HEAD)
    for name in names:
        table.add_column(name, justify="right")
    table.add_row(*(str(counters["barriers"][name]) for name in names))
    return table


def _replay_command(run: Path, out: Path, stats: Path, config: OrdererConfig) -> str:
    sources = ",".join(str(s) for s in config.sources)
    return shlex.join([
        "evb", "replay", str(run), "--output", str(out), "--stats", str(stats),
        "--build-window", f"{config.build_window:g}", "--startup-delay",
        f"{config.startup_delay:g}", "--sources", sources,
    ])


def run_demo(output_dir: Path, seed: int) -> int:
    """Generate the demo run into ``output_dir``, replay it, print the summary; exit status 0."""
    console = Console()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    run_path = output_dir / "run.jsonl"
    out_path = output_dir / "emitted.jsonl"
    stats_path = output_dir / "stats.json"

    spec = demo_run(seed)
    config = demo_config(spec)
    records = synthetic.generate_records(spec)
    synthetic.write_jsonl(records, run_path)
    start = time.perf_counter()
    counters = replay_path(run_path, out_path, stats_path, config)
    elapsed = time.perf_counter() - start

    console.rule("[bold]evb demo: a synthetic run through the orderer")
    console.print(
        f"{spec.n_sources} sources, {spec.rate:g} fragments/s each for about "
        f"{spec.duration:g} s, batches of {spec.batch_size}, "
        f"{spec.jitter * 1e3:g} ms mean jitter, seed {seed}. "
        "Source 4 hangs from 5 s to 8 s; source 5 holds its data from 22 s to 26 s and then "
        "delivers it (a late backlog); source 1 sends type 4 at the first sync barrier "
        "(heterogeneous); source 6 loses its end-run barrier (incomplete)."
    )
    console.print(
        f"Replayed {len(records):,} records with build window {config.build_window:g} s and "
        f"startup delay {config.startup_delay:g} s in {elapsed:.2f} s."
    )
    console.print(_source_table(counters, spec.tick_rate))
    console.print(_barrier_table(counters))
    console.print(
        "Late fragments went out flagged (late policy 'emit'). Besides source 5's backlog they "
        "come from the stalls: while a source is silent the window rule releases each queue by "
        "arrival time, so a batch that arrives after a newer batch of another source is late."
    )
    console.print()
    for label, path in (("input", run_path), ("output", out_path), ("stats", stats_path)):
        console.print(f"{label + ':':8}{path}", soft_wrap=True)
    console.print("Rerun with other parameters:")
    console.print(
        "  " + _replay_command(run_path, out_path, stats_path, config), soft_wrap=True
    )
    return 0
