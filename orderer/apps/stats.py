"""The work behind ``evb stats``: a live server's statistics asked once and written as tables
or as JSON (the tables are drawn by :mod:`orderer.apps.console`, which ``evb top`` shares).

A run over several orderers (``--target a,b,c``, or one orderer started with ``--peers``) is
shown as the run's line and each orderer's (:mod:`orderer.apps.run_stats`), then each orderer's
own sections; one orderer of a run of one is shown as it always was.
"""

from __future__ import annotations

import json
from typing import IO, Any

from rich.console import Group
from rich.text import Text

from orderer.apps.console import DEFAULT_RECENT, stats_table, write
from orderer.apps.run_stats import (
    OrdererView,
    check_roles,
    orderer_targets,
    run_json,
    run_table,
    split_targets,
)
from orderer.client import DEFAULT_CONNECT_TIMEOUT, ChannelSecurity, get_stats
from orderer.errors import ServiceUnavailable
from orderer.stats import Stats

__all__ = ["print_stats", "write_run", "write_stats"]


def print_stats(
    target: str,
    out: IO[str],
    *,
    as_json: bool = False,
    barriers: int | None = None,
    timeout: float = 10.0,
    security: ChannelSecurity | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
) -> Stats:
    """``evb stats``: the statistics as tables, or as JSON (:meth:`~orderer.stats.Stats.to_json`
    of :func:`~orderer.client.get_stats`). ``barriers``: how many of the newest resolved
    barriers to show (default: the server's 1000 in JSON, :data:`DEFAULT_RECENT` in tables).

    On a terminal the tables take its width; into a pipe or a file they are plain ASCII, no
    styles, ``$COLUMNS`` wide or 80, so that ``evb stats | less`` or a log stays readable."""
    recent = DEFAULT_RECENT if barriers is None else barriers
    targets = split_targets(target)

    def ask(address: str) -> Stats:
        return get_stats(
            address,
            barrier_log_limit=barriers or (0 if as_json else recent),
            timeout=timeout,
            security=security,
            connect_timeout=connect_timeout,
        )

    stats = ask(targets[0])
    named = None
    if len(targets) == 1:
        named = orderer_targets(stats)
        if named is None:
            if as_json:
                out.write(json.dumps(stats.to_json(), indent=1) + "\n")
            else:
                write_stats(stats, out, recent=recent)
            return stats
        targets = named
        answers = {stats.slicing.index: stats}
    else:
        answers = {0: stats}
    views = []
    for k, address in enumerate(targets):
        try:
            views.append(OrdererView(k, address, answers[k] if k in answers else ask(address)))
        except ServiceUnavailable as error:
            if named is None:
                raise
            raise type(error)(
                f"{error} (orderer {k}'s address as the orderer at {target} names it; where those "
                "names do not resolve, e.g. outside the cluster, give every orderer's address as "
                "you reach it: --target a:50051,b:50051,...)"
            ) from None
    check_roles(views)
    if as_json:
        out.write(json.dumps(run_json(views), indent=1) + "\n")
    else:
        write_run(views, out, recent=recent)
    return stats


def write_run(views: list[OrdererView], out: IO[str], *, recent: int = DEFAULT_RECENT) -> None:
    """A run over several orderers: the run's line and each orderer's, then each orderer's own
    sections under its number and address."""

    def draw(width: int, plain: bool) -> Any:
        parts: list[Any] = [run_table(views, plain=plain, width=width)]
        for view in views:
            assert view.stats is not None
            title = f"orderer {view.index} ({view.target})"
            parts += [Text(""), Text(title, style="" if plain else "bold reverse")]
            parts.append(stats_table(view.stats, plain=plain, width=width, recent=recent))
        return Group(*parts)

    write(out, draw)


def write_stats(stats: Stats, out: IO[str], *, recent: int = DEFAULT_RECENT) -> None:
    """The sections of :func:`orderer.apps.console.stats_table` on ``out``: a terminal's width and
    styles, else plain ASCII without styles or trailing blanks, ``$COLUMNS`` wide or 80."""
    write(out, lambda width, plain: stats_table(stats, plain=plain, width=width, recent=recent))
