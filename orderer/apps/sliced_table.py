"""The table ``evb replay --orderers N --slice-ticks T`` prints: one row a setting, how the
merged output of N time-sliced orderers differs from one orderer's (docs/scale-out.md, "The
simulation and its sweeps").

Why here and not beside the simulation (:mod:`orderer.replay.sliced`): the replay computes typed
results (:class:`~orderer.replay.sliced.SlicedRun`) and writes ``--stats`` from them; how they are
drawn for a reader is the command's, as :mod:`orderer.apps.demo` draws its replay's counters.

Called by ``evb replay --orderers`` (:mod:`orderer.apps.replay`).
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from orderer.replay.sliced import SlicedRun

__all__ = ["print_summary", "summary_table"]

_HEADS = (
    "setting",
    "moved",
    "late",
    "late flags\ndiffer",
    "events\ndiffer",
    "straddling\n(built whole)",
    "differ if each\nslice alone",
    "barriers\ndiffer",
    "split\nbarriers",
    "busiest orderer\n(share x N)",
    "watermarks\nper fragment",
    "releases",
)


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def summary_table(run: SlicedRun, dt: int | None) -> Table:
    """One row a setting: how the merged output of N orderers differs from one orderer's;
    ``dt``: the glom window the events were built with (named in the title)."""
    single = run.single
    late = single.late / single.fragments if single.fragments else 0.0
    resolutions = single.barrier_resolutions
    events = "" if single.events is None else f", {single.events:,} events (dt {dt})"
    table = Table(
        title=f"evb replay: N sliced orderers against one (docs/scale-out.md)\none orderer: "
        f"{single.fragments:,} fragments, {single.late:,} late ({late:.2%}){events}, "
        f"barriers {resolutions.complete:,} complete / {resolutions.incomplete:,} "
        "incomplete",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for head in _HEADS:
        table.add_column(head, justify="left" if head == "setting" else "right")
    for setting in run.settings:
        d, routing = setting.differences, setting.routing
        loads = routing.fragments
        busiest = max(loads) * len(loads) / sum(loads) if sum(loads) else 1.0
        ev = d.events
        table.add_row(
            setting.slicing.label.replace(",", "\n"),
            _count(d.moved),
            _count(d.late.sliced),
            _count(d.late.differ),
            _count(None if ev is None else ev.differ),
            _count(None if ev is None else ev.straddling),
            _count(None if ev is None else ev.differ_if_built_alone),
            _count(d.barriers.differ),
            _count(d.barriers.split),
            f"{busiest:.3f}",
            f"{routing.watermarks / max(1, sum(loads)):.3f}",
            _count(routing.releases),
        )
    return table


def print_summary(run: SlicedRun, dt: int | None, console: Console | None = None) -> None:
    """The table on ``console``; not on a terminal, 170 columns wide (rich's 80 would cut the
    numbers short), as ``evb replay``'s sweep table."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=170)
    console.print(summary_table(run, dt))
