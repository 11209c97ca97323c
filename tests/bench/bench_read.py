"""Benchmark of reading the ordered stream: ``Subscribe`` and the Spark source's ``--path`` read.

Not a pytest test: run it as ``python tests/bench/bench_read.py [--fragments N]`` from a
checkout. It reads the orderer of the checkout it lies in (``Path(__file__).parents[2]``, put
first on ``sys.path`` and on the servers' ``PYTHONPATH``, before any installed copy), so the same
file copied into an older checkout measures that one: the reader of the ``--path`` read is
``orderer.formats.payloads.ordered_batches`` where it exists (the ordered log holds each
fragment's ``payload_row`` and the payloads are gathered from the arrival log), else
``orderer.formats.log_format.ordered_batches`` (the ordered log holds the payloads).

At each payload size of ``--payloads`` (32 and 1024 bytes by default), with
``min(--fragments, --bytes-budget / payload)`` fragments (2,000,000 and at most 1 GiB of
payload): synthetic data as :mod:`tests.bench.bench_service` makes it (16 sources, batches of
1000, generated and encoded up front, never timed), sent on raw stubs to ``evb serve`` on a fresh
data directory; every source ends, the run ends (``EndRun``: its end offset). Then, each the best
of ``--repeat`` (by fragments/s):

a. ``Subscribe`` from offset 0 to the end offset with the payloads, on a raw stub in this process
   (replies deserialised as ``OrderedBatch``, fragments counted from the timestamps, payload bytes
   from the payload field, stopped at the end offset): fragments/s, payload MB/s, the server's
   CPU (``/proc/PID/stat`` user + system, all threads) per 1000 fragments, and this process's;
b. the same with ``omit_payload``;
c. the server stopped, the ``--path`` read as a Spark executor does it: every ordered segment of
   the data directory read with its payloads, in a fresh subprocess per repeat (no maps, no
   indexes, no imports warm; the page cache is: the run was just written, and nothing here drops
   it), timed there from the first segment to the last batch, CPU (``getrusage``) and wall.
   Each batch's payload is touched, one byte per 4 KiB page, as a consumer that uses the bytes
   would (without it, a reader that hands out views of a memory map never reads the pages);
   ``c0`` is the same read without touching them; ``c1`` the executor's own code for a
   partition of the whole run (``orderer.spark.source.readers.read_segments``: those batches as
   Spark rows, :func:`~orderer.building.glom.fragment_rows`), each record batch then serialised in
   the Arrow IPC format (``RecordBatch.serialize``, a copy of every buffer, as pyspark's stream to
   the JVM makes one); what Spark does beyond that is not here.

``--json PATH`` writes the figures. ``--check`` also runs one untimed read of (c) that checks the
fragment count, the payload byte count and a byte sum of the payloads against what was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# this checkout's orderer first, even where another checkout is installed (editable) in the venv
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from rich import box  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from orderer._proto.evb.v1 import orderer_pb2 as pb  # noqa: E402
from tests.bench.bench_service import (  # noqa: E402
    OPTIONS,
    SUBSCRIBE,
    Data,
    Server,
    _payloads,
    generate,
    send,
    start_evb,
    sweep_fragments,
)

PAYLOADS = "32,1024"
FRAGMENTS = 2_000_000
BYTES_BUDGET = 1 << 30
PAGE = 4096


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def _checksum(data: Data) -> tuple[int, int, int]:
    """(fragments, payload bytes, sum of the payload bytes) of what ``data`` sends."""
    fragments = total = byte_sum = 0
    for message in data.batches:
        batch = pb.SubmitRequest.FromString(message.data).batch
        fragments += len(batch.timestamps) // 8
        total += len(batch.payload)
        byte_sum += int(np.frombuffer(batch.payload, np.uint8).sum(dtype=np.uint64))
    return fragments, total, byte_sum


# ---------------------------------------------------------------------------------- (a), (b)


def subscribe(target: str, end: int, server: Server, *, payload: bool) -> dict[str, Any]:
    """Read offsets ``[0, end)`` with one ``Subscribe`` on a raw stub; the figures."""
    with grpc.insecure_channel(target, options=OPTIONS) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = channel.unary_stream(
            SUBSCRIBE,
            request_serializer=pb.SubscribeRequest.SerializeToString,
            response_deserializer=pb.OrderedBatch.FromString,
        )
        request = pb.SubscribeRequest(from_offset=0, omit_payload=not payload)
        fragments = payload_bytes = replies = 0
        gc.collect()
        cpu0, server0 = _cpu_self(), server.cpu()
        start = time.perf_counter()
        call = stub(request, timeout=900)
        try:
            for reply in call:
                n = len(reply.timestamps) // 8
                fragments += n
                payload_bytes += len(reply.payload)
                replies += 1
                if reply.first_offset + n >= end:
                    break
            seconds = time.perf_counter() - start
            cpu1, server1 = _cpu_self(), server.cpu()
        finally:
            call.cancel()
    if fragments != end:
        raise SystemExit(f"Subscribe read {fragments:,} fragments, the run has {end:,}")
    return _figures(fragments, payload_bytes, seconds, server1 - server0) | {
        "replies": replies,
        "client_cpu_s": cpu1 - cpu0,
        "client_cpu_us_per_1000": 1e9 * (cpu1 - cpu0) / fragments,
    }


def _figures(fragments: int, payload_bytes: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "fragments": fragments,
        "payload_total_bytes": payload_bytes,
        "seconds": seconds,
        "fragments_per_s": fragments / seconds,
        "payload_mb_per_s": payload_bytes / seconds / 1e6,
        "cpu_s": cpu,
        "cpu_us_per_1000": 1e9 * cpu / fragments,
    }


# ---------------------------------------------------------------------------------- (c)


def read_path(data_dir: Path, *, touch: bool, checksum: bool) -> dict[str, Any]:
    """The ``--path`` read of ``data_dir`` in this process (the subprocess of phase c): every
    ordered segment through the reader's ``ordered_batches``."""
    try:  # the ordered log holds payload rows: the payloads come from the arrival log
        from orderer.formats.payloads import ordered_batches

        reader = "orderer.formats.payloads.ordered_batches"
    except ImportError:  # the ordered log holds the payloads
        from orderer.formats.log_format import ordered_batches

        reader = "orderer.formats.log_format.ordered_batches"
    from orderer.formats.log_format import ordered_segments

    fragments = payload_bytes = byte_sum = touched = 0
    gc.collect()
    cpu0 = _cpu_self()
    start = time.perf_counter()
    segments = ordered_segments(data_dir)
    for segment in segments:
        for batch in ordered_batches(segment):
            fragments += len(batch)
            size = int(batch.payload_offsets[-1]) - int(batch.payload_offsets[0])
            payload_bytes += size
            if touch:  # one byte a page: the pages are read, as a consumer of the bytes reads them
                touched += int(batch.payload[::PAGE].sum(dtype=np.uint64))
            if checksum:
                if len(batch.payload) != size:
                    raise SystemExit(f"{segment}: a batch of {size} bytes holds "
                                     f"{len(batch.payload)}")
                byte_sum += int(batch.payload.sum(dtype=np.uint64))
    seconds = time.perf_counter() - start
    cpu = _cpu_self() - cpu0
    return _figures(fragments, payload_bytes, seconds, cpu) | {
        "reader": reader,
        "segments": len(segments),
        "touched": touch,
        "byte_sum": byte_sum if checksum else None,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def read_executor(data_dir: Path, until: int) -> dict[str, Any]:
    """The Spark executor's read of one partition ``[0, until)`` of ``data_dir`` in this
    process (``c1``), each record batch serialised as pyspark hands it to the JVM."""
    import pyarrow as pa

    from orderer.formats.log_format import ordered_segments
    from orderer.spark.source.planning import OffsetRange
    from orderer.spark.source.readers import read_segments

    pa.array(np.zeros(1, np.int64))  # its first call imports pandas: a worker has done it before
    fragments = payload_bytes = wire = 0
    gc.collect()
    cpu0 = _cpu_self()
    start = time.perf_counter()
    segments = ordered_segments(data_dir)
    partition = OffsetRange(0, until, None, tuple(map(str, segments)))
    for rows in read_segments(partition):
        fragments += rows.num_rows
        column = rows.column(rows.num_columns - 1)  # payload: binary, int32 offsets
        offsets = np.frombuffer(column.buffers()[1], np.int32, count=len(column) + 1,
                                offset=column.offset * 4)
        payload_bytes += int(offsets[-1]) - int(offsets[0])
        wire += rows.serialize().size
    seconds = time.perf_counter() - start
    cpu = _cpu_self() - cpu0
    return _figures(fragments, payload_bytes, seconds, cpu) | {
        "reader": "orderer.spark.source.readers.read_segments + RecordBatch.serialize",
        "segments": len(segments),
        "ipc_bytes": wire,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def read_path_subprocess(
    data_dir: Path, *, touch: bool, checksum: bool = False, executor: int | None = None
) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--read-path", str(data_dir)]
    argv += [] if touch else ["--no-touch"]
    argv += [] if executor is None else ["--executor", str(executor)]
    argv += ["--checksum"] if checksum else []
    done = subprocess.run(argv, capture_output=True, text=True, env=_environment(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"the --path read failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------- a size


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(runs, key=lambda figures: figures["fragments_per_s"])
    return best | {"all_fragments_per_s": [r["fragments_per_s"] for r in runs]}


def _bytes_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.arrow")) if directory.is_dir() else 0


def measure(args: argparse.Namespace, size: int, work: Path, console: Console) -> dict[str, Any]:
    fragments = sweep_fragments(args, size)
    console.print(f"{size} B: generating {fragments:,} fragments ...")
    data: Data | None = generate(args, payload=size, fragments=fragments, columns=False)
    assert data is not None
    sent_fragments, sources = data.fragments, data.sources
    expected = _checksum(data) if args.check else None
    data_dir = work / f"data-{size}"
    server = start_evb(data_dir, work / f"serve-{size}.log", sources, args.build_window)
    point: dict[str, Any] = {"payload_bytes": size, "fragments": sent_fragments}
    try:
        console.print(f"   sending {sent_fragments:,} fragments ...")
        sent = asyncio.run(send(server.target, data.batches, sources, server,
                                streams=args.streams))
        point["ingest_fragments_per_s"] = sent.fragments / sent.seconds
        data = None  # the messages go before the reads
        gc.collect()
        from orderer.client import end_run

        end = end_run(server.target)
        point["end_offset"] = end
        if end != sent_fragments:
            raise SystemExit(f"the run ended at offset {end:,}; {sent_fragments:,} were sent")
        console.print(f"   a, b. Subscribe to offset {end:,}, best of {args.repeat} ...")
        runs: dict[str, list[dict[str, Any]]] = {"subscribe": [], "subscribe_omit_payload": []}
        for _ in range(args.repeat):
            runs["subscribe"].append(subscribe(server.target, end, server, payload=True))
            runs["subscribe_omit_payload"].append(
                subscribe(server.target, end, server, payload=False))
        for name, figures in runs.items():
            point[name] = _best(figures)
        if point["subscribe"]["payload_total_bytes"] != end * size:
            raise SystemExit(f"Subscribe read {point['subscribe']['payload_total_bytes']:,} "
                             f"payload bytes, {end * size:,} were sent")
    finally:
        server.stop()
    point["arrival_log_bytes"] = _bytes_of(data_dir / "arrivals")
    point["ordered_log_bytes"] = _bytes_of(data_dir / "ordered")
    console.print(f"   c. the --path read, a subprocess each, best of {args.repeat} ...")
    touched: list[dict[str, Any]] = []
    views: list[dict[str, Any]] = []
    executor: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        touched.append(read_path_subprocess(data_dir, touch=True))
        views.append(read_path_subprocess(data_dir, touch=False))
        executor.append(read_path_subprocess(data_dir, touch=False, executor=end))
    point["path_read"] = _best(touched)
    point["path_read_untouched"] = _best(views)
    point["path_read_executor"] = _best(executor)
    for figures in (*touched, *views, *executor):
        if (figures["fragments"], figures["payload_total_bytes"]) != (end, end * size):
            raise SystemExit(f"the --path read gave {figures['fragments']:,} fragments and "
                             f"{figures['payload_total_bytes']:,} bytes; {end:,} and "
                             f"{end * size:,} were sent")
    if expected is not None:
        checked = read_path_subprocess(data_dir, touch=False, checksum=True)
        got = (checked["fragments"], checked["payload_total_bytes"], checked["byte_sum"])
        if got != expected:
            raise SystemExit(f"--check: the --path read gave (fragments, bytes, byte sum) {got}, "
                             f"sent {expected}")
        console.print(f"   --check: {got[0]:,} fragments, {got[1]:,} bytes, byte sum as sent")
        point["checked"] = True
    shutil.rmtree(data_dir, ignore_errors=True)
    os.sync()
    return point


# ---------------------------------------------------------------------------------- report


def _row(table: Table, name: str, f: dict[str, Any], who: str, mb: bool = True) -> None:
    table.add_row(
        name, f"{f['fragments_per_s'] / 1e6:.2f}",
        f"{f['payload_mb_per_s']:,.0f}" if mb else "",
        f"{f['cpu_us_per_1000']:,.0f} {who}", f"{f['seconds']:.3f}",
    )


def report(figures: dict[str, Any], console: Console) -> None:
    for point in figures["sizes"]:
        a, b = point["subscribe"], point["subscribe_omit_payload"]
        c, c0, c1 = point["path_read"], point["path_read_untouched"], point["path_read_executor"]
        table = Table(
            title=f"{point['payload_bytes']} B payloads, {point['fragments']:,} fragments "
            f"({figures['tree']}; --path reader {c['reader']}; best of {figures['repeat']})",
            box=box.SIMPLE_HEAD, title_justify="left",
        )
        for column in ("", "M frag/s", "payload MB/s", "CPU us / 1000 frag", "seconds"):
            table.add_column(column, justify="left" if not column else "right")

        _row(table, "a. Subscribe with payloads", a, "server")
        table.add_row("   the subscriber (this process)", "", "",
                      f"{a['client_cpu_us_per_1000']:,.0f} client", "")
        _row(table, "b. Subscribe, omit_payload", b, "server", mb=False)
        _row(table, "c. --path read, payload pages touched", c, "reader")
        _row(table, "c0. --path read, views only", c0, "reader")
        _row(table, "c1. executor: read_segments + serialize", c1, "reader")
        table.add_row("data dir: arrival / ordered log",
                      "", "", f"{point['arrival_log_bytes'] / 1e6:,.0f} / "
                      f"{point['ordered_log_bytes'] / 1e6:,.0f} MB", "")
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payloads", type=_payloads, default=_payloads(PAYLOADS),
                        help=f"payload sizes, bytes ({PAYLOADS})")
    parser.add_argument("--fragments", type=int, default=FRAGMENTS,
                        help=f"fragments at each size ({FRAGMENTS:,}; fewer where that is more "
                        "than --bytes-budget bytes of payload)")
    parser.add_argument("--bytes-budget", type=int, default=BYTES_BUDGET,
                        help=f"payload bytes at one size at most ({BYTES_BUDGET:,})")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (3)")
    parser.add_argument("--sources", type=int, default=16, help="sources (16)")
    parser.add_argument("--batch", type=int, default=1000, help="fragments per batch (1000)")
    parser.add_argument("--streams", type=int, default=4, help="Submit streams (4)")
    parser.add_argument("--build-window", type=float, default=1.0, help="seconds (1)")
    parser.add_argument("--jitter", type=float, default=0.0005,
                        help="mean network jitter of a batch in the arrival order, s (0.0005)")
    parser.add_argument("--data-rate", type=float, default=1e6,
                        help="fragments/s of all sources in the data's timestamps (1e6)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read-path", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--no-touch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checksum", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--executor", type=int, metavar="UNTIL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read_path is not None:  # the subprocess of phase c
        figures = (
            read_path(args.read_path, touch=not args.no_touch, checksum=args.checksum)
            if args.executor is None
            else read_executor(args.read_path, args.executor)
        )
        print(json.dumps(figures))
        return 0
    console = Console(width=max(Console().width, 120))
    try:
        import orderer.formats.payloads  # noqa: F401

        tree = f"{ROOT}: payloads gathered from the arrival log"
    except ImportError:
        tree = f"{ROOT}: payloads in the ordered log"
    figures: dict[str, Any] = {
        "tree": tree,
        "payload_sizes": args.payloads,
        "repeat": args.repeat,
        "sources": args.sources,
        "batch": args.batch,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "page_cache": "warm: the run was just written and is read from the page cache",
        "sizes": [],
    }
    work = Path(tempfile.mkdtemp(prefix="evb-bench-read-"))
    try:
        for size in args.payloads:
            figures["sizes"].append(measure(args, size, work, console))
            if args.json is not None:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(figures, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
