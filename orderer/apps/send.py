"""The work behind ``evb send``: a run paced and sent to a live server as its data sources
would send it (a synthetic run, an ``evb replay`` input file, NSCLDAQ ring-item files).

Why a module of its own: :mod:`orderer.cli` only parses arguments and maps errors to exit
statuses; these functions pace and send a run, and the end-to-end tests, the benchmarks and the
live demo call them without a shell. They use the client library (:mod:`orderer.client`) like
any data source would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orderer.batch import ArrivalKind, ArrivalRecords, FragmentBatch
from orderer.client import SourceClient, get_stats, parse_targets, set_source_state
from orderer.errors import ServiceUnavailable
from orderer.formats.json_lines import read_records
from orderer.nscldaq.format import NscldaqFormatError
from orderer.nscldaq.reader import RingItemReader
from orderer.replay.synthetic import SyntheticRun, iter_batches

__all__ = ["send_nscldaq", "send_records", "send_synthetic"]

# One step of a run to send: (arrival time, action on the client, fragments it carries)
_Step = tuple[float, Callable[[SourceClient], None], int]


def _paced(
    steps: Iterable[_Step], client: SourceClient, *, speed: float, total: int, progress: bool
) -> int:
    """Run the steps at ``t / speed`` seconds after the start (``speed`` 0: at once)."""
    sent = 0
    columns = (
        TextColumn("[bold]evb send"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("fragments"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), disable=not progress) as bar:
        task = bar.add_task("send", total=total)
        start = time.monotonic()
        for t, action, count in steps:
            if speed > 0:
                delay = start + t / speed - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            action(client)
            sent += count
            bar.update(task, completed=sent)
    return sent


def send_synthetic(
    target: str,
    spec: SyntheticRun,
    *,
    only_sources: Iterable[int] | None = None,
    speed: float = 1.0,
    end_sources: bool = True,
    progress: bool = True,
    client_options: dict[str, Any] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Send a synthetic run (:mod:`orderer.replay.synthetic`) as live sources would, paced by its
    arrival times; ``only_sources`` lets several processes each play their own sources.

    ``resume``: a sender restarted after a crash (kill -9) plays the same run again but skips,
    per source, the fragments the server already holds (its durable sequence, which the client
    learns on connecting) and numbers the rest on from there: nothing is lost or duplicated."""
    wanted = set(spec.source_ids if only_sources is None else only_sources)
    batches = [(t, b) for t, b in iter_batches(spec) if int(b.source[0]) in wanted]

    def steps(done: dict[int, int]) -> list[_Step]:
        out: list[_Step] = [
            (t, _fragments(b), len(b)) for t, b in _skip_done(batches, done)
        ]
        if end_sources:
            last = max((t for t, _ in batches), default=0.0)
            out += [(last, _end(source), 0) for source in sorted(wanted)]
        return out

    if not resume:
        return _send(target, steps({}), sorted(wanted), speed, progress, client_options)
    return _send(target, steps, sorted(wanted), speed, progress, client_options)


def _skip_done(
    batches: list[tuple[float, FragmentBatch]], done: dict[int, int]
) -> Iterator[tuple[float, FragmentBatch]]:
    """The batches without the first ``done[source]`` fragments of each (single-source)
    batch's source."""
    seen: dict[int, int] = {}
    for t, batch in batches:
        source = int(batch.source[0])
        before = seen.get(source, 0)
        seen[source] = before + len(batch)
        skip = done.get(source, 0) - before
        if skip >= len(batch):
            continue
        if skip > 0:
            batch = batch.slice(skip)
        yield t, batch


def send_records(
    target: str,
    path: Path,
    *,
    speed: float = 1.0,
    progress: bool = True,
    client_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Send an ``evb replay`` input file: fragments, watermarks and ends, paced by ``t``; its
    ``dead`` records become ``SetSourceState`` calls, made once what was sent before them is
    acknowledged (so the server takes them in the file's order)."""
    with Path(path).open(encoding="utf-8") as lines:
        records = read_records(lines)
    sources = sorted(set(records.source.tolist()))
    options = client_options or {}
    connection = {k: options[k] for k in ("security", "connect_timeout") if k in options}

    def mark(source: int, dead: bool) -> Callable[[SourceClient], None]:
        def call(client: SourceClient) -> None:
            client.flush()
            client.wait_acked()
            for orderer in client.targets:  # a source's state is the run's: every orderer's
                set_source_state(orderer, source, dead, **connection)

        return call

    steps = list(_record_steps(records, mark))
    return _send(target, steps, sources, speed, progress, client_options)


def send_nscldaq(
    target: str,
    paths: Iterable[str | Path],
    *,
    skip_unstamped: bool = False,
    end_sources: bool = False,
    resume: bool = False,
    client_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Send NSCLDAQ ring-item files (``-``: standard input) as they are read, chunk by chunk
    (:mod:`orderer.nscldaq.reader`): each run of consecutive items of one source is one batch.
    At a bad item (unstamped, truncated, a format evb does not read) everything before it is
    flushed and acknowledged before the error is raised, so nothing that came before is lost
    and the error's offset is where to resume. Ends the sources only with ``end_sources``: an
    NSCLDAQ run ends with its END_RUN barrier, and the next run's files may follow.

    ``resume``: the files are sent again from their start after an interruption (a bad item
    mended, the command killed): each source's fragments are numbered from its first one in
    these files, so the server drops those it already holds and nothing arrives twice. Without
    it, the files are new input after whatever the server holds."""
    reader = RingItemReader(skip_unstamped=skip_unstamped)
    started = time.monotonic()
    numbered: set[int] = set()
    with SourceClient(target, sources=[], **(client_options or {})) as client:
        _say_if_ended(target, client_options)
        try:
            for batch in reader.read_paths(paths):
                source = batch.source
                bounds = (np.flatnonzero(source[1:] != source[:-1]) + 1).tolist()
                for a, b in zip([0, *bounds], [*bounds, len(batch)], strict=True):
                    piece = batch.slice(a, b)
                    if resume and int(source[a]) not in numbered:
                        numbered.add(int(source[a]))
                        client.number_from(int(source[a]), 0)
                    client.send_fragments(piece)
        except NscldaqFormatError as error:
            client.flush()
            client.wait_acked()
            raise NscldaqFormatError(
                error.file,
                error.offset,
                error.what,
                hint=f"{error.hint + '; ' if error.hint else ''}the {reader.fragments} "
                "fragments before it were sent and acknowledged",
            ) from None
        sources = sorted(reader.sources)
        if end_sources:
            for source_id in sources:
                client.end_source(source_id)
        client.flush()
        client.wait_acked()
        acked = {str(source_id): client.acked(source_id) for source_id in sources}
        reconnects = client.reconnects
    return {
        "fragments": reader.fragments,
        **reader.summary(),
        "seconds": round(time.monotonic() - started, 3),
        "acked": acked,
        "reconnects": reconnects,
    }


def _send(
    target: str,
    steps: list[_Step] | Callable[[dict[int, int]], list[_Step]],
    sources: list[int],
    speed: float,
    progress: bool,
    client_options: dict[str, Any] | None,
) -> dict[str, Any]:
    """Play the steps; given a function instead, call it with what the server already holds
    of each source (resume)."""
    started = time.monotonic()
    with SourceClient(target, sources=sources, **(client_options or {})) as client:
        # the server's first answer: a refused token ends the command before any progress shows
        durable = _durable_sequences(client, sources)
        _say_if_ended(target, client_options)
        if callable(steps):
            steps = steps(durable)
        total = sum(count for _, _, count in steps)
        sent = _paced(steps, client, speed=speed, total=total, progress=progress)
        client.flush()
        client.wait_acked()
        acked = {str(source): client.acked(source) for source in sources}
        reconnects = client.reconnects
    return {
        "fragments": sent,
        "seconds": round(time.monotonic() - started, 3),
        "acked": acked,
        "reconnects": reconnects,
    }


def _say_if_ended(target: str, client_options: dict[str, Any] | None) -> None:
    """Tell the shift crew on stderr when the run has ended: the contract takes what arrives
    between ``evb end-run`` and ``evb begin-run`` into the ended run (it reopens it, README,
    "Runs one after another"), which is right for a straggler's data but not what a sender
    meaning the next run wants; and a Spark job that built the run finished at its end."""
    options = client_options or {}
    connection = {k: options[k] for k in ("security", "connect_timeout") if k in options}
    stats = get_stats(parse_targets(target)[0], barrier_log_limit=1, **connection)
    if stats.run_ended:
        print(
            f"evb send: run {stats.run} has ended (evb end-run): these fragments reopen it"
            " and are its own; `evb begin-run` starts the next run",
            file=sys.stderr,
            flush=True,
        )


def _durable_sequences(
    client: SourceClient, sources: list[int], timeout: float = 120.0
) -> dict[int, int]:
    """Each source's durable sequence on the server, as the client learnt it on connecting."""
    deadline = time.monotonic() + timeout
    while any(client.next_sequence(source) is None for source in sources):
        client.check()  # a refused token ends the wait at once
        if time.monotonic() > deadline:
            raise ServiceUnavailable("the server did not tell where the sources stand")
        time.sleep(0.01)
    return {source: int(client.next_sequence(source) or 0) for source in sources}


def _fragments(batch: FragmentBatch) -> Callable[[SourceClient], None]:
    return lambda client: client.send_fragments(batch)


def _end(source: int) -> Callable[[SourceClient], None]:
    return lambda client: client.end_source(source)


def _watermark(source: int, watermark: int) -> Callable[[SourceClient], None]:
    return lambda client: client.watermark(source, watermark)


def _record_steps(
    records: ArrivalRecords, mark: Callable[[int, bool], Callable[[SourceClient], None]]
) -> Iterator[_Step]:
    """Consecutive fragments of one source with the same ``t`` travel as one batch; a
    ``SOURCE_STATE`` record is the step ``mark(source, dead)`` makes."""
    n = len(records)
    if n == 0:
        return
    kind, t, source = records.kind, records.times(), records.source
    same = (kind[1:] == ArrivalKind.FRAGMENT) & (kind[:-1] == ArrivalKind.FRAGMENT)
    same &= (source[1:] == source[:-1]) & (t[1:] == t[:-1])
    bounds = np.flatnonzero(~same) + 1
    starts = np.concatenate([[0], bounds]).tolist()
    stops = np.concatenate([bounds, [n]]).tolist()
    for a, b in zip(starts, stops, strict=True):
        at, who = float(t[a]), int(source[a])
        if kind[a] == ArrivalKind.FRAGMENT:
            yield at, _fragments(records.fragment_batch(a, b)), b - a
        elif kind[a] == ArrivalKind.WATERMARK:
            yield at, _watermark(who, int(records.value[a])), 0
        elif kind[a] == ArrivalKind.END_OF_SOURCE:
            yield at, _end(who), 0
        elif kind[a] == ArrivalKind.SOURCE_STATE:
            yield at, mark(who, bool(records.value[a])), 0
