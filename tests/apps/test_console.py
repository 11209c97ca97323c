"""The statistics as a person reads them (orderer/apps/console.py): ``evb stats``' sections and
``evb top``'s frame drawn from hand-built statistics (:class:`orderer.stats.Stats`), at 80
columns, plain (a pipe) and styled (a terminal). The same drawings against a real server are in
``tests/e2e/test_top.py``."""

from __future__ import annotations

import dataclasses
import io
import re
from typing import Any

import pytest
from rich.console import Console

from orderer.apps.console import consumers_tables, stats_table, top_frame, write
from orderer.config import OrdererConfig
from orderer.stats import (
    BarrierCounts,
    BarrierRecord,
    Connection,
    ConsumerState,
    OutOfOrder,
    RunSpan,
    SourceStats,
    Stats,
)

WALL = 1.7e9
TITLES = ("Counters", "Queues", "Out of order (newest)", "Barriers", "Connections", "Consumers")


def _source(source: int, *, big: bool = False, missing: int = 0) -> SourceStats:
    scale = 10**9 if big else 1
    return SourceStats(
        source=source,
        received=1000 * scale + 7, emitted=990 * scale, late=3, dropped=0,
        duplicates=2, out_of_order=1, max_lateness=40 * scale, barriers=4, missing=missing,
        queued=10 * scale, paused=source == 2, ended=False, dead=source == 3,
        watermark=None if source == 1 else 10**18 + source,
        queued_bytes=10 * 4096 * scale, oldest_ts=18_446_744_073_709_551_000 + source,
        newest_ts=18_446_744_073_709_551_600 + source, last_arrival=100.0 - 7 * source,
        marked_dead=source == 3,
        out_of_order_last=(OutOfOrder(previous=5000, timestamp=4990 - source, t=60.0 + source),),
    )


def _stats(n_sources: int = 3, *, big: bool = False) -> Stats:
    """Statistics as ``get_stats`` gives them: a stall (source 3 marked dead, source 2
    paused), an incomplete heterogeneous barrier missing source 3, a slow consumer."""
    sources = {
        s: _source(s, big=big, missing=1 if s == 3 else 0) for s in range(1, n_sources + 1)
    }
    log = [
        BarrierRecord(offset=1000 * i, t=80.0 + i, complete=True, homogeneous=True,
                      types={s: 1 for s in sources}, missing=())
        for i in range(8)
    ]
    log.append(BarrierRecord(
        offset=123_456_789, t=99.0, complete=False, homogeneous=False,
        types={1: 2, 2: 5}, missing=tuple(range(3, n_sources + 1)),
    ))
    return Stats(
        barriers=BarrierCounts(complete=8, incomplete=1, homogeneous=8, heterogeneous=1,
                               by_type={1: 24, 2: 1, 5: 1}),
        sources=sources,
        next_offset=123_456_800,
        high_water_mark=10**18,
        queued=sum(v.queued for v in sources.values()),
        now=100.0,
        run_ended=False,
        run=0,
        run_start_offset=0,
        runs=(RunSpan(0, 0),),
        config=OrdererConfig(build_window=0.3),
        wall_time=WALL,
        barrier_log=tuple(log),
        connections=(
            Connection(peer="ipv4:10.1.2.3:51234", sources=(1, 2), since=WALL - 3723,
                       messages=12_345, bytes=5 * 2**20, acked={1: 99_000, 2: 98_000}),
            Connection(peer="ipv6:[::1]:40000", sources=tuple(range(3, n_sources + 1)),
                       since=WALL - 5, messages=3, bytes=300, acked={3: 7}),
        ),
        consumers={
            "audit": ConsumerState(name="audit", committed=0, lag=123_456_800, lag_seconds=0.0,
                                   last_commit=None),
            "spark": ConsumerState(name="spark", committed=123_000_000, lag=456_800,
                                   lag_seconds=42.5, last_commit=WALL - 2),
        },
    )


def _plain(draw: Any) -> str:
    """What a pipe gets: 80 columns of ASCII, no styles, no trailing blanks."""
    out = io.StringIO()
    write(out, draw)
    text = out.getvalue()
    for line in text.splitlines():
        assert len(line) <= 80 and line.isascii() and line == line.rstrip(), repr(line)
    assert "\x1b" not in text
    return text


def _titles(text: str) -> list[str]:
    return [line for line in text.splitlines() if line in TITLES or line == "Sources"]


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def test_stats_shows_every_section_in_80_columns() -> None:
    text = _plain(lambda width, plain: stats_table(_stats(), plain=plain, width=width))
    assert _titles(text) == list(TITLES)
    lines = text.splitlines()
    assert lines[0] == "evb orderer: running, time 100.000 s"
    # the queues: bytes, timestamps, last arrival as an age, the states
    assert "40.0 KiB" in text and "120.0 KiB" in text  # a source's queued bytes, the total
    assert str(18_446_744_073_709_551_001) in text and str(18_446_744_073_709_551_603) in text
    assert re.search(r"^\s+3\s+1000000000000000003\s+21s\s+dead \(marked\)$", text, re.M), text
    assert re.search(r"^\s+2\s+\d+\s+14s\s+paused$", text, re.M), text
    # out of order: previous, offending timestamp, how far back, age
    assert re.search(r"^\s+3\s+5000\s+4987\s+13\s+37s$", text, re.M), text
    # barriers: counts, by type, the newest five of the log, the incomplete one with its missing
    assert "8 complete, 1 incomplete, 8 homogeneous, 1 heterogeneous" in text
    assert "fragments by type: type 1: 24, type 2: 1, type 5: 1" in text
    assert "the last 5 of the barrier log:" in text
    incomplete = re.search(r"^123,456,789\s+1\.0s\s+INCOMPLETE\s+(.*)\n(.*)$", text, re.M)
    assert incomplete, text  # the types wrap in their column, the missing sources stay
    assert re.fullmatch(r"heterogeneous type 2 from 1, type 5 from\s+3", incomplete[1])
    assert incomplete[2].strip() == "2"
    assert "3,000 " not in text.split("Barriers")[1].split("Connections")[0]  # only the newest 5
    # connections: peer, sources as ranges, open for, messages, bytes, acked per source
    assert re.search(r"^ipv4:10\.1\.2\.3:51234\s+1-2\s+1h02m\s+12,345\s+5\.0 MiB\s+1:99000 2:98000",
                     text, re.M), text
    # consumers: committed, lag in fragments and seconds, last commit as an age
    assert re.search(r"^spark\s+123,000,000\s+456,800\s+42\.5\s+2\.0s$", text, re.M), text
    assert re.search(r"^audit\s+0\s+123,456,800\s+0\.0\s+-$", text, re.M), text


def test_many_sources_and_huge_counters_stay_in_80_columns_unbroken() -> None:
    """64 sources, counters of a long run, 20-digit timestamps: more tables, never a number
    folded over two lines, and a barrier missing 62 sources names them in one range."""
    stats = _stats(64, big=True)
    text = _plain(lambda width, plain: stats_table(stats, plain=plain, width=width))
    assert f"{stats.totals.received:,}" in text
    assert f"{stats.sources[64].received:,}" in text
    assert " 3-64" in text and "3-64\n" in text  # the missing sources, and the connection's
    counters = text.split("Counters")[1].split("Queues")[0]
    rows = [line.split()[0] for line in counters.splitlines() if line[:6].strip().isdigit()]
    tables = counters.count(" total")
    assert tables >= 2 and rows == [str(s) for s in range(1, 65)] * tables


def test_top_frame_header_sections_and_rates() -> None:
    text = _plain(
        lambda width, plain: top_frame(
            _stats(), target="orderer:50051", rates=(12_345.4, 9_000.0), plain=plain, width=width
        )
    )
    header = text.splitlines()[:2]
    assert re.fullmatch(r"evb top  orderer:50051  \d\d:\d\d:\d\d  running", header[0]), header
    assert header[1] == (
        "next offset 123,456,800  queued 30  window 0.3 s  12,345/s in, 9,000/s out"
    )
    assert _titles(text) == ["Sources", "Barriers", "Consumers", "Connections"]
    sources = text.split("Sources")[1].split("Barriers")[0]
    assert re.search(r"^\s+3\s+1,007\s+10\s+40\.0 KiB\s+18446744073709551603\s+21s$", sources,
                     re.M), sources
    assert re.search(r"^\s+3  dead \(marked\)$", sources, re.M), sources
    assert "INCOMPLETE" in text and "spark" in text and "ipv6:[::1]:40000" in text


def test_top_frame_when_the_server_is_unreachable_or_not_yet_reached() -> None:
    """The header says why and the last statistics stay below it; before any, only the
    header."""
    text = _plain(
        lambda width, plain: top_frame(
            _stats(), target="orderer:50051", error="connection refused", plain=plain, width=width
        )
    )
    assert "UNREACHABLE, retrying: connection refused" in text.splitlines()[0]
    assert "next offset 123,456,800" in text and "Sources" in text
    first = _plain(lambda width, plain: top_frame(None, target="orderer:50051", plain=plain,
                                                  width=width))
    assert len(first.splitlines()) == 1 and first.rstrip().endswith("connecting")
    unknown = _plain(lambda width, plain: top_frame(_stats(), target="t", plain=plain,
                                                    width=width))
    assert "window 0.3 s  -/s in, -/s out" in unknown  # no rate before the second frame


def test_on_a_terminal_incomplete_barriers_and_dead_sources_are_red() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system="standard")
    console.print(top_frame(_stats(), target="t", rates=(1.0, 1.0), width=80))
    lines = out.getvalue().splitlines()
    red = "\x1b[1;31m"
    incomplete = next(line for line in lines if "INCOMPLETE" in line)
    assert red in incomplete
    assert "\x1b[31m" in next(line for line in lines if "dead (marked)" in line)
    assert all(red not in line for line in lines if "complete " in line and "IN" not in line)


def test_an_older_server_without_the_new_keys_still_draws() -> None:
    """A server from before the barrier log sends none of its fields (what ``get_stats``
    reads of them: zero, empty, None): the sections show what there is instead of failing."""
    stats = _stats()
    sources = {
        source: dataclasses.replace(
            values, queued_bytes=0, oldest_ts=None, newest_ts=None, last_arrival=None,
            marked_dead=False, out_of_order_last=(),
        )
        for source, values in stats.sources.items()
    }
    stats = dataclasses.replace(
        stats, barrier_log=(), connections=(), wall_time=0.0, sources=sources, consumers={},
        barriers=dataclasses.replace(stats.barriers, by_type={}),
    )
    text = _plain(lambda width, plain: stats_table(stats, plain=plain, width=width))
    assert "Out of order" not in text and "the last" not in text
    assert text.rstrip().endswith("Consumers\nnone")
    assert "Connections\nnone" in text


def test_consumers_table_alone() -> None:
    text = _plain(lambda width, plain: consumers_tables(_stats(), width, plain=plain))
    lines = text.splitlines()
    assert lines[0].split() == ["consumer", "committed", "lag", "lag", "s", "last", "commit"]
    assert set(lines[1]) == {"-"}
    assert [line.split()[0] for line in lines[2:]] == ["audit", "spark"]
