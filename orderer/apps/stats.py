"""The work behind ``evb stats``: a live server's statistics asked once and written as tables
or as JSON (the tables are drawn by :mod:`orderer.apps.console`, which ``evb top`` shares).
"""

from __future__ import annotations

import json
from typing import IO

from orderer.apps.console import DEFAULT_RECENT, stats_table, write
from orderer.client import DEFAULT_CONNECT_TIMEOUT, ChannelSecurity, get_stats
from orderer.stats import Stats

__all__ = ["print_stats", "write_stats"]


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
    stats = get_stats(
        target,
        barrier_log_limit=barriers or (0 if as_json else recent),
        timeout=timeout,
        security=security,
        connect_timeout=connect_timeout,
    )
    if as_json:
        out.write(json.dumps(stats.to_json(), indent=1) + "\n")
    else:
        write_stats(stats, out, recent=recent)
    return stats


def write_stats(stats: Stats, out: IO[str], *, recent: int = DEFAULT_RECENT) -> None:
    """The sections of :func:`orderer.apps.console.stats_table` on ``out``: a terminal's width and
    styles, else plain ASCII without styles or trailing blanks, ``$COLUMNS`` wide or 80."""
    write(out, lambda width, plain: stats_table(stats, plain=plain, width=width, recent=recent))
