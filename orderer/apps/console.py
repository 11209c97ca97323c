"""The orderer's statistics as a person reads them: the sections of ``evb stats`` and the frame
of ``evb top``, drawn from a :class:`~orderer.stats.Stats` (:func:`orderer.client.get_stats`).

Why a module of its own: ``evb stats`` (once) and ``evb top`` (every second) show the same
sections and must show them alike; drawing is pure (statistics in, a rich renderable out), so
tests draw hand-built statistics at 80 columns without a server. Every table fits the width it
is given by splitting its columns over as many tables as needed, each repeating the first
column, so that no number is ever broken over two lines; ``plain`` draws ASCII without styles,
for a pipe or a file (:func:`write`).

Times: the orderer's own (a barrier's ``t``, a source's ``last_arrival``, an out-of-order
arrival's ``t``) are shown as ages against the statistics' ``now``; Unix times (a connection's
``since``, a consumer's ``last_commit``) as ages against ``wall_time``. What a server older
than the barrier log does not send (its ``wall_time``, the log, the connections) is shown as
absent, not as an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from orderer.config import TOTAL_COUNTERS
from orderer.stats import BarrierRecord, SourceStats, Stats

__all__ = ["DEFAULT_RECENT", "consumers_tables", "stats_table", "top_frame", "write"]

DEFAULT_RECENT = 5
"""How many of the newest barriers (and out-of-order arrivals) a table lists."""

_PLAIN_BOX = box.Box("    \n    \n -- \n    \n    \n -- \n    \n    \n", ascii=True)
"""Plain tables: a line of dashes under the header and above the footer, nothing else."""

_TEXT_LEAST = 16
"""Columns of text (a barrier's types, its missing sources, a state) share a table as long as
this much room is left for them; rich wraps them into it."""

_BARRIER_TOTALS = ("complete", "incomplete", "homogeneous", "heterogeneous")


@dataclass(frozen=True)
class _Column:
    header: str
    cells: list[str]
    footer: str = ""
    left: bool = False  # text, left-justified; it may wrap at its blanks (numbers never do)

    def width(self) -> int:
        return max(len(self.header), len(self.footer), *map(len, self.cells))


@dataclass
class _Style:
    plain: bool
    width: int
    rows: list[str] = field(default_factory=list)  # a style per row ("" for none)

    def of(self, style: str) -> str:
        return "" if self.plain else style


# ------------------------------------------------------------------------------ formatting


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _age(seconds: float | None) -> str:
    """``4.2s``, ``37s``, ``3m05s``, ``2h07m``, ``3d04h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size // sub_size:02d}{sub}"
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def _bytes(value: int | None) -> str:
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{value} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _ids(sources: Iterable[int]) -> str:
    """Source ids as ranges: ``1-4,7`` (a barrier missing 30 of 64 sources stays one line)."""
    ids = sorted(set(sources))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def _ago(now: float, then: float | None) -> str:
    return "-" if then is None else _age(now - then)


def _wall(stats: Stats) -> float:
    """Unix time at the statistics' ``now`` (this machine's clock if the server sent none)."""
    return float(stats.wall_time or time.time())


# ------------------------------------------------------------------------------ tables


def _tables(first: _Column, columns: list[_Column], style: _Style) -> list[Any]:
    """The columns after ``first`` in as many tables as ``style.width`` needs, each led by
    ``first``; a text column wider than a table can hold gets one of its own and wraps."""
    room = max(1, style.width - first.width() - 2)  # 2: the gap between columns
    groups: list[list[_Column]] = [[]]
    used = first.width()
    for column in columns:
        # text may wrap at its blanks: it needs only its header's width, or a few words
        least = max(len(column.header), _TEXT_LEAST) if column.left else column.width()
        wide = min(column.width(), least, room)
        if groups[-1] and used + 2 + wide > style.width:
            groups.append([])
            used = first.width()
        groups[-1].append(column)
        used += 2 + wide
    footer = any(c.footer for c in [first, *columns])
    tables: list[Any] = []
    for group in groups:
        table = Table(
            box=_PLAIN_BOX if style.plain else box.SIMPLE,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            show_footer=footer,
            header_style=style.of("bold"),
            footer_style=style.of("bold"),
        )
        for column in [first, *group]:
            table.add_column(
                column.header,
                footer=column.footer,
                justify="left" if column.left else "right",
                overflow="fold",
                no_wrap=not column.left,
            )
        rows = zip(*(c.cells for c in [first, *group]), strict=True)
        for i, row in enumerate(rows):
            table.add_row(*row, style=style.of(style.rows[i]) if i < len(style.rows) else None)
        tables.append(table)
    return tables


def _section(title: str, style: _Style, *body: Any) -> list[Any]:
    return [Text(""), Text(title, style=style.of("bold underline")), *body]


def _sources(stats: Stats) -> list[tuple[str, SourceStats]]:
    """The sources by ascending id, each with its id as shown."""
    return [(str(source), values) for source, values in sorted(stats.sources.items())]


def _state(values: SourceStats) -> str:
    if values.marked_dead:
        return "dead (marked)"
    flags = (("paused", values.paused), ("ended", values.ended), ("dead", values.dead))
    return ", ".join(name for name, on in flags if on) or "live"


def _state_style(state: str) -> str:
    return "red" if state.startswith("dead") else "yellow" if "paused" in state else ""


# ------------------------------------------------------------------------------ sections


def _summary(stats: Stats, style: _Style) -> Text:
    hwm = stats.high_water_mark
    return Text(
        f"evb orderer: {'run ended' if stats.run_ended else 'running'}, "
        f"time {stats.now:.3f} s{_role(stats)}\noutput offset {stats.next_offset:,}, "
        f"high-water mark {'-' if hwm is None else hwm}",
        style=style.of("bold"),
    )


def _role(stats: Stats) -> str:
    """``, orderer 1 of 3, slices of 1000000 ticks`` for an orderer of a run over several
    (docs/scale-out.md): its output is a third of the run's; nothing for a plain one."""
    return f", {stats.slicing.describe()}" if stats.slicing.sliced else ""


def _counters(stats: Stats, style: _Style) -> list[Any]:
    """The counters of the ordering contract, a row per source and a total."""
    totals = stats.totals
    sources = _sources(stats)
    columns = [
        _Column(name.replace("_", " "), [_count(getattr(v, name)) for _, v in sources],
                _count(getattr(totals, name)))
        for name in TOTAL_COUNTERS
    ]
    columns += [
        _Column("max lateness", [_count(v.max_lateness) for _, v in sources]),
        _Column("barriers", [_count(v.barriers) for _, v in sources]),
        _Column("missing", [_count(v.missing) for _, v in sources]),
    ]
    first = _Column("source", [s for s, _ in sources], "total")
    return _section("Counters", style, *_tables(first, columns, style))


def _queues(stats: Stats, style: _Style, *, received: bool = False) -> list[Any]:
    """What waits in each source's queue, when it last sent, and its state."""
    now = float(stats.now)
    sources = _sources(stats)
    columns = [
        _Column("queued", [_count(v.queued) for _, v in sources], _count(stats.queued)),
        _Column(
            "bytes",
            [_bytes(v.queued_bytes) for _, v in sources],
            _bytes(sum(v.queued_bytes for _, v in sources)),
        ),
        _Column("oldest ts", [_text(v.oldest_ts) for _, v in sources]),
        _Column("newest ts", [_text(v.newest_ts) for _, v in sources]),
        _Column("watermark", [_text(v.watermark) for _, v in sources]),
        _Column("last arrival", [_ago(now, v.last_arrival) for _, v in sources]),
        _Column("state", [_state(v) for _, v in sources], left=True),
    ]
    if received:  # evb top: one table of the sources, without what the counters say
        columns = [
            _Column("received", [_count(v.received) for _, v in sources],
                    _count(stats.totals.received)),
            *columns[:2],
            columns[3],
            *columns[5:],
        ]
    first = _Column("source", [s for s, _ in sources], "total")
    rows = _Style(style.plain, style.width, [_state_style(_state(v)) for _, v in sources])
    return _section("Sources" if received else "Queues", style, *_tables(first, columns, rows))


def _out_of_order(stats: Stats, style: _Style, recent: int) -> list[Any]:
    """The newest out-of-order arrivals over all sources (each source keeps its last ten)."""
    now = float(stats.now)
    offenders = sorted(
        ((float(o.t), s, o) for s, v in _sources(stats) for o in v.out_of_order_last),
        key=lambda entry: entry[0],
    )[-recent:]
    if not offenders:
        return []
    columns = [
        _Column("previous ts", [str(o.previous) for _, _, o in offenders]),
        _Column("timestamp", [str(o.timestamp) for _, _, o in offenders]),
        _Column("back by", [str(o.previous - o.timestamp) for _, _, o in offenders]),
        _Column("age", [_age(now - t) for t, _, _ in offenders]),
    ]
    first = _Column("source", [s for _, s, _ in offenders])
    return _section("Out of order (newest)", style, *_tables(first, columns, style))


def _types(record: BarrierRecord) -> str:
    """``type 1`` when every source sent the same type, else each type with its sources
    (``type 1 from 1-2, type 2 from 3``)."""
    by_type: dict[int, list[int]] = {}
    for source, kind in record.types.items():
        by_type.setdefault(int(kind), []).append(source)
    if len(by_type) == 1:
        return f"type {next(iter(by_type))}"
    return ", ".join(f"type {k} from {_ids(sources)}" for k, sources in sorted(by_type.items()))


def _barriers(stats: Stats, style: _Style, recent: int) -> list[Any]:
    """The barrier counts (by result and by type) and the newest resolved barriers, the
    incomplete ones highlighted with the sources they missed."""
    counts = stats.barriers
    line = ", ".join(f"{getattr(counts, name):,} {name}" for name in _BARRIER_TOTALS)
    if counts.by_type:
        kinds = sorted(counts.by_type.items())
        line += "\nfragments by type: " + ", ".join(f"type {k}: {n:,}" for k, n in kinds)
    log = list(stats.barrier_log)[-recent:] if recent else []
    body: list[Any] = [Text(line)]
    if log:
        now = float(stats.now)
        columns = [
            _Column("age", [_age(now - float(r.t)) for r in log]),
            _Column("result", ["complete" if r.complete else "INCOMPLETE" for r in log],
                    left=True),
            _Column("types", [
                ("homogeneous " if r.homogeneous else "heterogeneous ") + _types(r)
                for r in log
            ], left=True),
            _Column("missing", [_ids(r.missing) for r in log], left=True),
        ]
        first = _Column("offset", [_count(r.offset) for r in log])
        rows = [
            "bold red" if not r.complete else "" if r.homogeneous else "yellow" for r in log
        ]
        body += [Text(f"the last {len(log)} of the barrier log:"),
                 *_tables(first, columns, _Style(style.plain, style.width, rows))]
    return _section("Barriers", style, *body)


def _connections(stats: Stats, style: _Style) -> list[Any]:
    """Each open Submit stream: who, which sources, for how long, how much."""
    connections = sorted(stats.connections, key=lambda c: c.since)
    if not connections:
        return _section("Connections", style, Text("none"))
    wall = _wall(stats)
    columns = [
        _Column("sources", [_ids(c.sources) for c in connections], left=True),
        _Column("open for", [_ago(wall, c.since) for c in connections]),
        _Column("messages", [_count(c.messages) for c in connections]),
        _Column("bytes", [_bytes(c.bytes) for c in connections]),
        _Column("acked", [
            " ".join(f"{s}:{n}" for s, n in sorted(c.acked.items())) for c in connections
        ], left=True),
    ]
    first = _Column("peer", [c.peer for c in connections], left=True)
    return _section("Connections", style, *_tables(first, columns, style))


def _consumers(stats: Stats, style: _Style) -> list[Any]:
    """Each consumer's committed offset and how far behind the output it is."""
    if not stats.consumers:
        return _section("Consumers", style, Text("none"))
    return _section("Consumers", style, consumers_tables(stats, style.width, plain=style.plain))


def consumers_tables(stats: Stats, width: int, *, plain: bool) -> Any:
    """The consumers' table alone (``evb consumers``): committed offset, lag in fragments and
    seconds, age of the last commit; a consumer behind by more than a second in yellow."""
    consumers = sorted(stats.consumers.items())
    wall = _wall(stats)
    columns = [
        _Column("committed", [_count(c.committed) for _, c in consumers]),
        _Column("lag", [_count(c.lag) for _, c in consumers]),
        _Column("lag s", [f"{float(c.lag_seconds or 0):.1f}" for _, c in consumers]),
        _Column("last commit", [_ago(wall, c.last_commit) for _, c in consumers]),
    ]
    first = _Column("consumer", [name for name, _ in consumers], left=True)
    rows = ["yellow" if float(c.lag_seconds or 0) > 1 else "" for _, c in consumers]
    return Group(*_tables(first, columns, _Style(plain, width, rows)))


# ------------------------------------------------------------------------------ the views


def stats_table(
    stats: Stats, *, plain: bool = False, width: int = 80, recent: int = DEFAULT_RECENT
) -> Any:
    """``evb stats``: a summary, then the counters, the queues, the newest out-of-order
    arrivals, the barriers with the newest ``recent`` of the barrier log, the connections and
    the consumers, each under its title. Returns a rich renderable (:func:`write` prints it)."""
    style = _Style(plain, width)
    return Group(
        _summary(stats, style),
        *_counters(stats, style),
        *_queues(stats, style),
        *_out_of_order(stats, style, recent),
        *_barriers(stats, style, recent),
        *_connections(stats, style),
        *_consumers(stats, style),
    )


def top_frame(
    stats: Stats | None,
    *,
    target: str,
    error: str | None = None,
    rates: tuple[float, float] | None = None,
    plain: bool = False,
    width: int = 80,
    recent: int = DEFAULT_RECENT,
) -> Any:
    """One frame of ``evb top``: a header (target, run state or why the server cannot be
    reached, next offset, queued, build window, fragments/s in and out since the last frame),
    then the sources, the newest barriers, the consumers and the connections. ``stats`` None:
    nothing was ever received; with ``error`` the last ones received are shown below it."""
    style = _Style(plain, width)
    clock = time.strftime("%H:%M:%S")
    if error is not None:
        state, state_style = f"UNREACHABLE, retrying: {error}", "bold red"
    elif stats is None:
        state, state_style = "connecting", ""
    else:
        state, state_style = ("run ended" if stats.run_ended else "running"), "bold green"
    header = Text(f"evb top  {target}  {clock}  ", style=style.of("bold"))
    header.append(state, style=style.of(state_style))
    if stats is None:
        return Group(header)
    header.append(_role(stats))
    window = stats.config.build_window
    speed = "-/s in, -/s out" if rates is None else f"{rates[0]:,.0f}/s in, {rates[1]:,.0f}/s out"
    header.append(
        f"\nnext offset {stats.next_offset:,}  queued {stats.queued:,}  "
        f"window {window:g} s  {speed}"
    )
    return Group(
        header,
        *_queues(stats, style, received=True),
        *_barriers(stats, style, recent),
        *_consumers(stats, style),
        *_connections(stats, style),
    )


def write(out: IO[str], draw: Callable[[int, bool], Any]) -> None:
    """Print ``draw(width, plain)`` on ``out``: on a terminal, its width and styles; else plain
    ASCII without styles or trailing blanks, ``$COLUMNS`` wide or 80, so that ``evb stats |
    less`` or a log stays readable."""
    tty = out.isatty()
    console = Console(
        file=out, width=None if tty else _columns(), highlight=False, markup=False,
        emoji=False, no_color=not tty,
    )
    if tty:
        console.print(draw(console.width, False))
        return
    with console.capture() as captured:  # rich pads every line to the width
        console.print(draw(console.width, True))
    out.writelines(line.rstrip() + "\n" for line in captured.get().splitlines())
    out.flush()


def _columns() -> int:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 80
