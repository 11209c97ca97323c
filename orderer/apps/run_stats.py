"""A run over several orderers (docs/scale-out.md) as ``evb stats`` and ``evb top`` show it: a
line for the run (its counters summed over the orderers) and a line for each orderer.

Why: each orderer's ``GetStats`` is a third of a run over three, and the question a shift crew
asks first is whether the run as a whole goes on and which orderer does not. ``--target`` names
the orderers (``a:50051,b:50051,c:50051``, in index order), or one orderer started with
``--peers`` names them all in its answer (:func:`orderer_targets`); each is checked to be the
orderer of that index, as the source client checks them. One orderer of a run of one is shown
as it always was: :mod:`orderer.apps.stats` and :mod:`orderer.apps.top` call nothing here for it.

The run's line sums what adds up over the orderers (fragments received, emitted, late, dropped,
queued, the ordered logs' lengths and the rates); its run is the lowest any orderer is at, and
it has ended once every orderer's run has. Drawing is pure (answers in, a rich renderable out),
with the console's tables (:mod:`orderer.apps.console`: split to the width, never a number
broken).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.text import Text

from orderer.apps.console import _Column, _count, _Style, _tables
from orderer.client import parse_targets
from orderer.client.roles import misplaced
from orderer.errors import InterfaceError
from orderer.stats import Stats

__all__ = [
    "OrdererView",
    "check_roles",
    "orderer_targets",
    "run_json",
    "run_table",
    "split_targets",
]


@dataclass(frozen=True)
class OrdererView:
    """One orderer's line: its last answer (None before any), why it does not answer now
    (None when it does) and its rates (fragments per second in and out; None without two
    answers)."""

    index: int
    target: str
    stats: Stats | None
    error: str | None = None
    rates: tuple[float, float] | None = None


def split_targets(target: str) -> list[str]:
    """``--target``'s addresses (one, or several separated by commas); refused with one line
    when one is empty or named twice, as the sources' client refuses them."""
    return parse_targets(target)


def orderer_targets(stats: Stats) -> list[str] | None:
    """The run's orderers an answer names (an orderer of a run over several started with
    ``--peers``), or None: one orderer, or one that does not name the others (shown alone, as
    before)."""
    role = stats.slicing
    if not role.sliced or len(role.peers) != role.orderers:
        return None
    return list(role.peers)


def check_roles(views: Sequence[OrdererView]) -> None:
    """Each answer is the orderer of its index in a run of that many, as the targets were
    given (one line naming the first that is not; :func:`orderer.client.roles.check_roles`)."""
    first = views[0].stats if views else None  # orderer 0 fixes the slice length
    for view in views:
        if view.stats is None:
            continue
        role = view.stats.slicing
        ticks = role.slice_ticks if first is None else first.slicing.slice_ticks
        why = misplaced(role, view.index, len(views), ticks)
        if why is not None:
            raise InterfaceError(f"target: {view.target} {why}")


def _state(stats: Stats | None, error: str | None) -> str:
    if error is not None:
        return "UNREACHABLE"
    if stats is None:
        return "connecting"
    return "run ended" if stats.run_ended else "running"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _role(views: Sequence[OrdererView]) -> str:
    answered = [v.stats for v in views if v.stats is not None]
    ticks = answered[0].slicing.slice_ticks if answered else None
    slices = "" if ticks is None else f", slices of {ticks} ticks"
    return f"a run over {len(views)} orderers{slices}"


def run_table(views: Sequence[OrdererView], *, plain: bool, width: int, rates: bool = False) -> Any:
    """The run's line and each orderer's: state, run, fragments received, emitted, late,
    dropped, queued and the ordered log's length (``next offset``); with ``rates`` the
    fragments per second in and out. Then each orderer's address."""
    style = _Style(plain, width)
    answered = [v.stats for v in views if v.stats is not None]
    every = len(answered) == len(views)
    run_state = (
        "UNREACHABLE"
        if not answered
        else "run ended"
        if every and all(s.run_ended for s in answered)
        else "running"
    )
    columns = [
        _Column("state", [_state(v.stats, v.error) for v in views], run_state, left=True),
        _Column(
            "run",
            [_count(None if v.stats is None else v.stats.run) for v in views],
            _count(min((s.run for s in answered), default=None)),
        ),
    ]
    for header, value in (
        ("received", lambda s: s.totals.received),
        ("emitted", lambda s: s.totals.emitted),
        ("late", lambda s: s.totals.late),
        ("dropped", lambda s: s.totals.dropped),
        ("queued", lambda s: s.queued),
        ("next offset", lambda s: s.next_offset),
    ):
        cells = [_count(None if v.stats is None else value(v.stats)) for v in views]
        total = sum(value(s) for s in answered)
        columns.append(_Column(header, cells, _count(total)))
    if rates:
        for k, header in enumerate(("in/s", "out/s")):
            cells = [_rate(None if v.rates is None else v.rates[k]) for v in views]
            known = [v.rates[k] for v in views if v.rates is not None]
            columns.append(_Column(header, cells, _rate(sum(known) if known else None)))
    first = _Column("orderer", [str(v.index) for v in views], "run")
    rows = _Style(plain, width, ["bold red" if v.error is not None else "" for v in views])
    where = "\n".join(
        f"orderer {v.index}: {v.target}" + ("" if v.error is None else f" ({v.error})")
        for v in views
    )
    return Group(
        Text(_role(views), style=style.of("bold")),
        *_tables(first, columns, rows),
        Text(where),
    )


def run_json(views: Sequence[OrdererView]) -> dict[str, Any]:
    """``evb stats --json`` of a run over several orderers: ``run`` (the summed line) and
    ``orderers``, each orderer's ``evb stats --json`` with its ``target``."""
    answered = [v.stats for v in views if v.stats is not None]
    totals = {
        name: sum(getattr(s.totals, name) for s in answered)
        for name in ("received", "emitted", "late", "dropped", "duplicates", "out_of_order")
    }
    return {
        "run": {
            "orderers": len(views),
            "totals": totals,
            "queued": sum(s.queued for s in answered),
            "next_offset": sum(s.next_offset for s in answered),
            "run": min((s.run for s in answered), default=None),
            "run_ended": bool(answered) and all(s.run_ended for s in answered),
        },
        "orderers": [
            {"target": v.target, **(v.stats.to_json() if v.stats is not None else {})}
            for v in views
        ],
    }
