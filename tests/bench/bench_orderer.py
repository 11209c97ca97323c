"""Benchmark of the orderer: throughput, the heapq baseline, memory per queued fragment, replay.

Not a pytest test: run it as ``python tests/bench/bench_orderer.py [--fragments N] [--sources S]``
(with the repository on ``PYTHONPATH``, or from the checkout). Every figure comes from one run on
one synthetic data set (:mod:`orderer.replay.synthetic`, generated up front and never timed):

a. ordering throughput: per-source batches fed through ``Orderer.submit`` on a simulated clock,
   draining ``take_emitted`` as a consumer would, then ``end_run``; fragments per second, one core;
b. the baseline a physicist would otherwise write, ``heapq.merge`` over the per-source sorted
   ``(timestamp, source)`` streams, consumed at no cost (``deque(maxlen=0)``); only the merge is
   timed;
c. memory per queued fragment, with a declared source that never sends holding everything in the
   queues: allocated capacity (``memory_bytes() / queued``), tracemalloc and RSS deltas;
d. ``evb replay`` (``replay_path``) on a JSON Lines file of about a million records from
   :func:`orderer.replay.synthetic.write_jsonl`, whole and split into parse, ordering and write;
e. one orderer's share of the same run spread over ``--slice-orderers`` orderers
   (docs/scale-out.md): the batches routed as the source client routes them (each fragment to
   its slice's owner, crossing watermarks to the others), orderer 0's share fed as (a) feeds the
   whole run, its time per fragment against (a)'s. Each orderer of a sliced run must cost what
   one orderer costs per fragment, or N of them cannot take N times as much.

``--json PATH`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import heapq
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

try:
    import orderer  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from orderer import FragmentBatch, Orderer, OrdererConfig, SimulatedClock
from orderer.client.routing import SourceRouting
from orderer.formats.json_lines import read_records, write_emitted
from orderer.replay.simulate import replay
from orderer.replay.slicing import Slicing
from orderer.replay.stream import replay_path
from orderer.replay.synthetic import SyntheticRun, generate_records, iter_batches, write_jsonl

TARGET_THROUGHPUT = 25e6
TARGET_RATIO = 10.0
TARGET_BYTES = 32.0
SILENT_SOURCE = 2**32 - 1

Batches = list[tuple[float, FragmentBatch]]


def _rss_bytes() -> int:
    """Resident set size now (Linux); 0 where /proc is not there."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


Message = tuple[float, "FragmentBatch | tuple[int, int]"]
"""What an orderer is given at a time: a batch, or a source's watermark ``(source, ts)``."""


def _timed_runs(
    messages: list[Message], sources: tuple[int, ...], repeat: int, drain_every: int
) -> tuple[list[float], Orderer, int]:
    """``repeat`` runs of ``messages`` through a fresh orderer on a simulated clock, taking the
    output every ``drain_every`` messages and at the end of run: each run's seconds, the last
    orderer, and the fragments (every one must come out)."""
    config = OrdererConfig(build_window=20.0, startup_delay=0.0, sources=sources)
    n_fragments = sum(len(m) for _, m in messages if isinstance(m, FragmentBatch))
    times = []
    for _ in range(repeat):
        orderer = Orderer(config, clock=SimulatedClock())
        emitted = 0
        gc.collect()
        start = time.perf_counter()
        for i, (t, message) in enumerate(messages):
            if isinstance(message, FragmentBatch):
                orderer.submit(message, now=t)
            else:
                orderer.watermark(*message, now=t)
            if i % drain_every == 0:
                emitted += len(orderer.take_emitted())
        orderer.end_run(now=messages[-1][0])
        emitted += len(orderer.take_emitted())
        times.append(time.perf_counter() - start)
        if emitted != n_fragments:
            raise SystemExit(f"conservation broken: {emitted} emitted of {n_fragments}")
    return times, orderer, n_fragments


def bench_throughput(
    batches: Batches, sources: tuple[int, ...], repeat: int, drain_every: int
) -> dict[str, Any]:
    """(a) Best of ``repeat`` runs of submit + periodic take_emitted + end_run."""
    times, orderer, n_fragments = _timed_runs(list(batches), sources, repeat, drain_every)
    counters = orderer.counters()
    best = min(times)
    return {
        "fragments": n_fragments,
        "batches": len(batches),
        "mean_batch": n_fragments / len(batches),
        "seconds": best,
        "seconds_median": statistics.median(times),
        "fragments_per_s": n_fragments / best,
        "late": counters["totals"]["late"],
        "barriers_complete": counters["barriers"]["complete"],
    }


def bench_heapq(batches: Batches) -> dict[str, Any]:
    """(b) heapq.merge of the per-source streams of (timestamp, source) tuples."""
    per_source: dict[int, list[np.ndarray]] = collections.defaultdict(list)
    for _, batch in batches:
        per_source[int(batch.source[0])].append(batch.timestamp)
    streams = [
        list(zip(np.concatenate(parts).tolist(), [source] * sum(map(len, parts)), strict=True))
        for source, parts in sorted(per_source.items())
    ]
    n = sum(map(len, streams))
    gc.collect()
    gc.disable()  # the tuples exist before timing; do not let the collector walk them meanwhile
    try:
        start = time.perf_counter()
        collections.deque(heapq.merge(*streams), maxlen=0)
        seconds = time.perf_counter() - start
    finally:
        gc.enable()
    del streams
    return {"fragments": n, "seconds": seconds, "fragments_per_s": n / seconds}


def bench_memory(batches: Batches, sources: tuple[int, ...], backlog: int) -> dict[str, Any]:
    """(c) Queue ``backlog`` fragments behind a declared source that never sends."""
    config = OrdererConfig(
        build_window=1e9, startup_delay=0.0, sources=(*sources, SILENT_SOURCE)
    )
    gc.collect()
    rss0 = _rss_bytes()
    tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0]
    orderer = Orderer(config, clock=SimulatedClock())
    for t, batch in batches:
        if orderer.queued >= backlog:
            break
        orderer.submit(batch, now=t)
    traced = tracemalloc.get_traced_memory()[0] - traced0
    tracemalloc.stop()
    rss = _rss_bytes() - rss0
    queued = orderer.queued
    if len(orderer.take_emitted()) or queued == 0:
        raise SystemExit("memory benchmark: the backlog did not stay queued")
    capacity = orderer.memory_bytes()
    return {
        "queued": queued,
        "memory_bytes": capacity,
        "bytes_per_fragment_capacity": capacity / queued,
        "bytes_per_fragment_tracemalloc": traced / queued,
        "bytes_per_fragment_rss": rss / queued if rss0 else None,
    }


def bench_replay(spec: SyntheticRun, records_wanted: int, repeat: int) -> dict[str, Any]:
    """(d) replay_path on a JSON Lines run, whole and split (parse, ordering, write)."""
    per_source = max(1, records_wanted // spec.n_sources - (3 + spec.sync_barriers))
    small = dataclasses.replace(spec, fragments_per_source=per_source)
    config = OrdererConfig(sources=small.source_ids)
    with tempfile.TemporaryDirectory(prefix="evb-bench-") as tmp:
        run, out, stats = Path(tmp, "run.jsonl"), Path(tmp, "out.jsonl"), Path(tmp, "stats.json")
        write_jsonl(generate_records(small), run)
        size = run.stat().st_size
        whole, parse, order, write = [], [], [], []
        for _ in range(repeat):
            gc.collect()
            start = time.perf_counter()
            replay_path(run, out, stats, config)
            whole.append(time.perf_counter() - start)

            start = time.perf_counter()
            with run.open(encoding="utf-8") as lines:
                records = read_records(lines)
            parse.append(time.perf_counter() - start)
            start = time.perf_counter()
            emitted, _ = replay(records, config)
            order.append(time.perf_counter() - start)
            start = time.perf_counter()
            with out.open("w", encoding="utf-8") as sink:
                write_emitted(emitted, sink)
            write.append(time.perf_counter() - start)
    n = len(records)
    return {
        "records": n,
        "file_bytes": size,
        "seconds": min(whole),
        "records_per_s": n / min(whole),
        "parse_seconds": min(parse),
        "parse_records_per_s": n / min(parse),
        "ordering_seconds": min(order),
        "ordering_records_per_s": n / min(order),
        "write_seconds": min(write),
        "write_records_per_s": len(emitted) / min(write),
    }


def bench_sliced_share(
    batches: Batches, sources: tuple[int, ...], orderers: int, slice_ticks: int, repeat: int,
    drain_every: int,
) -> dict[str, Any]:
    """(e) Orderer 0's share of the run over ``orderers``: best of ``repeat``, as (a)."""
    routing = SourceRouting(Slicing(orderers, slice_ticks))
    share: list[Message] = []
    for t, batch in batches:
        source = int(batch.source[0])
        for routed in routing.route(source, batch):
            if routed.orderer != 0:
                continue
            if routed.part is not None:
                share.append((t, routed.part))
            if routed.watermark is not None:
                share.append((t, (source, routed.watermark)))
    times, _, n_fragments = _timed_runs(share, sources, repeat, drain_every)
    return {
        "orderers": orderers,
        "slice_ticks": slice_ticks,
        "fragments": n_fragments,
        "messages": len(share),
        "watermarks": sum(1 for _, m in share if not isinstance(m, FragmentBatch)),
        "seconds": min(times),
        "fragments_per_s": n_fragments / min(times),
    }


def _rate(value: float) -> str:
    return f"{value / 1e6:,.2f} M/s"


def report(figures: dict[str, Any], console: Console) -> None:
    """The figures as one table, with targets where there are some."""
    a, b, c, d = (figures[k] for k in ("throughput", "heapq", "memory", "replay"))
    table = Table(title="evb orderer benchmark", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("what")
    table.add_column("figure", justify="right")
    table.add_column("target / rate", justify="right")
    table.add_column("", justify="center")

    def row(what: str, figure: str, target: str = "", ok: bool | None = None) -> None:
        mark = "" if ok is None else ("[green]ok[/green]" if ok else "[red]below[/red]")
        table.add_row(what, figure, target, mark)

    ratio = a["fragments_per_s"] / b["fragments_per_s"]
    per = c["bytes_per_fragment_capacity"]
    row("a. ordering (Orderer.submit)", _rate(a["fragments_per_s"]),
        _rate(TARGET_THROUGHPUT), a["fragments_per_s"] >= TARGET_THROUGHPUT)
    row(f"   {a['fragments']:,} fragments, {figures['sources']} sources",
        f"{a['seconds']:.3f} s")
    row(f"   batches of ~{a['mean_batch']:,.0f}; median time", f"{a['seconds_median']:.3f} s")
    row("b. heapq.merge, same streams", _rate(b["fragments_per_s"]))
    row("   ratio core / heapq", f"{ratio:,.1f} x", f"{TARGET_RATIO:g} x",
        ratio >= TARGET_RATIO)
    row(f"c. memory, {c['queued']:,} queued", "")
    row("   capacity / fragment", f"{per:.1f} B", f"{TARGET_BYTES:g} B", per <= TARGET_BYTES)
    row("   tracemalloc delta / fragment", f"{c['bytes_per_fragment_tracemalloc']:.1f} B")
    rss = c["bytes_per_fragment_rss"]
    row("   RSS delta / fragment", "n/a" if rss is None else f"{rss:.1f} B")
    row(f"d. evb replay, {d['records']:,} records", _rate(d["records_per_s"]))
    row("   whole replay_path", f"{d['seconds']:.2f} s")
    row("   parse (read_records)", f"{d['parse_seconds']:.2f} s",
        _rate(d["parse_records_per_s"]))
    row("   ordering (replay)", f"{d['ordering_seconds']:.2f} s",
        _rate(d["ordering_records_per_s"]))
    row("   write (write_emitted)", f"{d['write_seconds']:.2f} s",
        _rate(d["write_records_per_s"]))
    e = figures["sliced_share"]
    per_whole = 1e9 / a["fragments_per_s"]  # µs per 1000 fragments
    per_share = 1e9 / e["fragments_per_s"]
    row(f"e. orderer 0 of {e['orderers']}, slices of {e['slice_ticks']:,} ticks",
        _rate(e["fragments_per_s"]))
    row(f"   {e['fragments']:,} fragments, {e['watermarks']:,} crossing watermarks",
        f"{e['seconds']:.3f} s")
    row("   µs / 1000 fragments: share, whole run (a)", f"{per_share:.0f}, {per_whole:.0f}")
    row("   ratio share / whole", f"{per_share / per_whole:.2f}", "1.10",
        per_share / per_whole <= 1.10)
    console.print(table)
    figures["ratio_core_over_heapq"] = ratio
    figures["ratio_share_over_whole"] = per_share / per_whole


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=10_000_000,
                        help="ordinary fragments in total (10,000,000)")
    parser.add_argument("--sources", type=int, default=32, help="sources (32)")
    parser.add_argument("--batch", type=int, default=2_000, help="fragments per batch (2,000)")
    parser.add_argument("--rate", type=float, default=10_000.0,
                        help="fragments per second per source (10,000)")
    parser.add_argument("--jitter", type=float, default=0.01,
                        help="mean network jitter of a batch, seconds (0.01)")
    parser.add_argument("--backlog", type=int, default=4_000_000,
                        help="fragments to hold queued for the memory figure (4,000,000)")
    parser.add_argument("--replay-records", type=int, default=1_000_000,
                        help="records in the evb replay file (1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for a (3)")
    parser.add_argument("--replay-repeat", type=int, default=1, help="best of N for d (1)")
    parser.add_argument("--drain-every", type=int, default=32,
                        help="take_emitted after every N batches (32)")
    parser.add_argument("--slice-orderers", type=int, default=2,
                        help="orderers of the run for e (2)")
    parser.add_argument("--slice-ticks", type=int, default=100_000_000,
                        help="slice length for e, ticks of the 100 MHz clock (10^8: 1 s, five "
                        "batches of a source at the defaults)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    console = Console()

    spec = SyntheticRun(
        n_sources=args.sources,
        fragments_per_source=max(1, args.fragments // args.sources),
        rate=args.rate,
        jitter=args.jitter,
        batch_size=args.batch,
        seed=args.seed,
    )
    console.print(f"generating {spec.n_sources * spec.fragments_per_source:,} fragments ...")
    batches = list(iter_batches(spec))
    figures: dict[str, Any] = {
        "sources": spec.n_sources,
        "spec": {k: v for k, v in dataclasses.asdict(spec).items() if k != "stalls"},
        "python": sys.version.split()[0],
    }
    # memory first, while the heap is fresh, so that the RSS delta means something
    console.print("c. memory ...")
    figures["memory"] = bench_memory(batches, spec.source_ids, args.backlog)
    console.print("a. ordering throughput ...")
    figures["throughput"] = bench_throughput(
        batches, spec.source_ids, args.repeat, args.drain_every
    )
    console.print("e. one orderer's share of the run sliced ...")
    figures["sliced_share"] = bench_sliced_share(
        batches, spec.source_ids, args.slice_orderers, args.slice_ticks, args.repeat,
        args.drain_every,
    )
    console.print("b. heapq baseline ...")
    figures["heapq"] = bench_heapq(batches)
    del batches
    console.print("d. evb replay ...")
    figures["replay"] = bench_replay(spec, args.replay_records, args.replay_repeat)
    report(figures, console)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no bench-output/
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
