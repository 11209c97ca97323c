"""Benchmark of ``evb replay`` of a whole recorded run: the arrival log beside the JSON path.

Not a pytest test: run it as ``python tests/bench/bench_replay.py [--records N]`` (from the
checkout, or with the repository on ``PYTHONPATH``). Data are generated up front and never timed:

a. an arrival log of ``--records`` records (16 sources, 32-byte payloads, 1000-fragment messages
   each arriving at one time after an exponentially distributed network delay, begin-run, three
   sync and end-run barriers from every source, an end of source each), written as the service
   writes it: arrivals joined into record batches of about ``JOIN_RECORDS`` (32,768) rows, each
   row with its arrival time, 64 MB segments;
b. its replay (``orderer.replay.stream.replay_path``) to ``.arrow`` output (the ordered log's
   layout) and stats only, each in a child process of its own, which reports its wall time and
   its peak RSS (VmHWM); the same on a log of ``--small-records`` records shows whether memory
   stays bounded (about the same peak at both lengths). The startup delay is 0.2 s: the
   default 2 s holds the first 2 M fragments of this 1 M/s run in the queues (the orderer's
   memory, not the reader's), which the row "default flags" shows; the host's file write
   bandwidth (to disk, fsync), measured on a file of the output's size, bounds the ``.arrow``
   row; each timed run starts after ``sync`` (the log's writeback is not the replay's);
c. the JSON path (JSON Lines in, JSON Lines out) on ``--jsonl-records`` records: the peer
   baseline, in the same run.

``--json PATH`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    import orderer  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyarrow as pa
from rich import box
from rich.console import Console
from rich.table import Table

from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.config import OrdererConfig
from orderer.formats import log_format
from orderer.replay.synthetic import SyntheticRun, generate_records, iter_batches, write_jsonl
from orderer.service.group_commit import JOIN_RECORDS

TARGET = 10e6
SOURCES = 16
PAYLOAD = 32
MESSAGE = 1000
SEGMENT_BYTES = 64 << 20


def _spec(records: int, message: int = MESSAGE) -> SyntheticRun:
    return SyntheticRun(
        n_sources=SOURCES,
        fragments_per_source=max(1, records // SOURCES),
        rate=1e6 / SOURCES,
        jitter=0.002,
        batch_size=message,
        sync_barriers=3,
        payload_size=PAYLOAD,
    )


def write_arrival_log(directory: Path, records: int, message: int = MESSAGE) -> int:
    """An arrival log of about ``records`` fragments in ``directory/arrivals``, arriving
    messages joined into record batches of about ``JOIN_RECORDS`` rows as the service joins
    them, segments rolled at 64 MB; returns the rows written."""
    arrivals = directory / log_format.ARRIVALS
    arrivals.mkdir(parents=True, exist_ok=True)
    spec = _spec(records, message)
    rows, writer, sink, last_t = 0, None, None, 0.0
    pending: list[ArrivalRecords] = []
    pending_rows = 0

    def flush() -> None:
        nonlocal writer, sink, rows, pending, pending_rows
        if not pending:
            return
        if writer is None or sink.tell() >= SEGMENT_BYTES:
            if writer is not None:
                writer.close()
                sink.close()
            sink = pa.OSFile(str(log_format.segment_path(arrivals, log_format.ARRIVALS, rows)),
                             "wb")
            writer = pa.ipc.new_stream(sink, log_format.ARRIVAL_SCHEMA)
        writer.write_batch(log_format.arrivals_to_arrow(ArrivalRecords.concat(pending)))
        rows += pending_rows
        pending, pending_rows = [], 0

    try:
        for t, batch in iter_batches(spec):
            pending.append(ArrivalRecords.fragments(batch).at(t))
            pending_rows += len(batch)
            last_t = t
            if pending_rows >= JOIN_RECORDS:
                flush()
        for source in range(spec.first_source, spec.first_source + SOURCES):
            pending.append(ArrivalRecords.marker(ArrivalKind.END_OF_SOURCE, source).at(last_t))
            pending_rows += 1
        flush()
    finally:
        if writer is not None:
            writer.close()
            sink.close()  # type: ignore[union-attr]
    return rows


def _child(input_path: str, output: str, startup_delay: str) -> None:
    """One timed replay in this process; prints its figures as JSON."""
    from orderer.replay.stream import replay_path

    config = OrdererConfig(startup_delay=float(startup_delay))
    start = time.perf_counter()
    counters = replay_path(Path(input_path), Path(output) if output else None, None, config)
    seconds = time.perf_counter() - start
    peak = 0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    records = counters["totals"]["received"]
    print(json.dumps({"seconds": seconds, "fragments": records, "peak_rss": peak}))


def _timed(
    input_path: Path, output: Path | None, records: int, startup_delay: float = 0.2
) -> dict[str, Any]:
    os.sync()  # the generated log's dirty pages are not this replay's to write back
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(input_path), str(output or ""),
         str(startup_delay)],
        capture_output=True, text=True, env=env, check=True,
    )
    figures = json.loads(result.stdout.splitlines()[-1])
    figures["records"] = records
    figures["records_per_second"] = records / figures["seconds"]
    if output is not None:
        figures["output_bytes"] = output.stat().st_size
        output.unlink()
    return figures


def _write_bandwidth(directory: Path, size: int) -> float:
    """Bytes per second this host writes a file of ``size`` bytes (the .arrow output's size)
    into ``directory`` and gets it to disk (fsync, as the page cache fills up over a long
    replay): the floor of a replay to a file, whatever the replay costs."""
    block = np.ones(1 << 22, dtype=np.uint8)
    path = directory / "bandwidth"
    os.sync()
    start = time.perf_counter()
    with path.open("wb") as out:
        for _ in range(max(1, size // block.size)):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return max(1, size // block.size) * block.size / seconds


def _rate(value: float) -> str:
    return f"{value / 1e6:.2f} M/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000, help="arrival log (10 M)")
    parser.add_argument("--small-records", type=int, default=2_000_000,
                        help="the shorter log of the memory comparison (2 M)")
    parser.add_argument("--jsonl-records", type=int, default=1_000_000,
                        help="records of the JSON path (1 M)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("--scratch", type=Path, help="where the logs and outputs go (a temp dir)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    console = Console()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="evb-bench-replay-", dir=args.scratch) as scratch:
        work = Path(scratch)
        big, small = work / "big", work / "small"
        rows = write_arrival_log(big, args.records)
        small_rows = write_arrival_log(small, args.small_records)
        jsonl = work / "run.jsonl"
        write_jsonl(generate_records(_spec(args.jsonl_records, 1)), jsonl)
        jsonl_rows = sum(1 for _ in jsonl.open(encoding="utf-8"))
        figures["log_bytes"] = sum(p.stat().st_size for p in (big / "arrivals").iterdir())
        figures["arrow"] = _timed(big, work / "out.arrow", rows)
        figures["write_bandwidth"] = _write_bandwidth(work, figures["arrow"]["output_bytes"])
        figures["stats_only"] = _timed(big, None, rows)
        figures["default_flags"] = _timed(big, None, rows, OrdererConfig().startup_delay)
        figures["arrow_small"] = _timed(small, work / "out.arrow", small_rows)
        figures["jsonl"] = _timed(jsonl, work / "out.jsonl", jsonl_rows)
    figures["ratio_arrow_over_jsonl"] = (
        figures["arrow"]["records_per_second"] / figures["jsonl"]["records_per_second"]
    )
    figures["peak_ratio_big_over_small"] = (
        figures["arrow"]["peak_rss"] / figures["arrow_small"]["peak_rss"]
    )
    table = Table(title="evb replay benchmark", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("what", "records", "seconds", "rate", "peak RSS"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for key, what in (
        ("arrow", "arrival log -> .arrow"),
        ("stats_only", "arrival log -> stats only"),
        ("default_flags", "the same, default flags (startup 2 s)"),
        ("arrow_small", "shorter arrival log -> .arrow"),
        ("jsonl", "JSON Lines -> JSON Lines (peer)"),
    ):
        f = figures[key]
        table.add_row(what, f"{f['records']:,}", f"{f['seconds']:.2f}",
                      _rate(f["records_per_second"]), f"{f['peak_rss'] / 2**20:.0f} MiB")
    console.print(table)
    floor = figures["arrow"]["output_bytes"] / figures["write_bandwidth"]
    console.print(
        f"this host writes {figures['write_bandwidth'] / 1e6:.0f} MB/s: the .arrow output "
        f"({figures['arrow']['output_bytes'] / 1e6:.0f} MB) alone takes {floor:.2f} s, a ceiling "
        f"of {_rate(rows / floor)}; stats only: "
        f"{_rate(figures['stats_only']['records_per_second'])}"
    )
    ok = figures["arrow"]["records_per_second"] >= TARGET
    console.print(
        f"arrival log -> .arrow: {_rate(figures['arrow']['records_per_second'])} "
        f"(target >= {_rate(TARGET)}: {'met' if ok else 'MISSED'}); "
        f"{figures['ratio_arrow_over_jsonl']:.1f} x the JSON path; peak RSS at "
        f"{args.records:,} over {args.small_records:,} records: "
        f"{figures['peak_ratio_big_over_small']:.2f}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
