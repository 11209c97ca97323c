"""Benchmark of several orderers at once: aggregate ingest against N times one orderer.

Not a pytest test: ``python tests/bench/bench_orderers.py [--orderers 1,2,4,8]``. For each N,
N ``evb serve`` processes start on 127.0.0.1 (fresh data directories, the settings of
``bench_service.py``'s ingest phase) and N sender processes, one per orderer, each with its own
synthetic run (:func:`bench_service.generate`, ``--sources`` sources, its own seed), pre-encoded
before the start. Every sender waits for the others to be ready, then all start together; each
writes its batches on ``--streams`` ``Submit`` streams and ends its sources, and is done once its
orderer's ``GetStats`` shows all of them durable. The aggregate rate is all fragments over the
time from the common start to the last orderer's last durable fragment; the table gives it
against ``N x`` the rate of N = 1 of the same invocation, and each orderer's busiest thread per
1000 fragments (what bounds one process whatever the cores).

``--mode independent`` (this file's only mode so far) gives each orderer a run of its own: what
the host gives N processes that share nothing but its cores, memory bandwidth and disk, the
ceiling of one run spread over N orderers.

``--json PATH`` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

try:
    import orderer  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_service as service
from rich.console import Console
from rich.table import Table

from orderer.replay.synthetic import SyntheticRun


@dataclasses.dataclass
class SenderResult:
    """What one sender process reports: its fragments and when it started and ended, on the
    host's monotonic clock (shared by every process)."""

    fragments: int
    payload_bytes: int
    started: float
    done: float
    sender_cpu: float


def _sender_main(args: argparse.Namespace) -> None:
    """A sender process: generate, say ``ready``, wait for ``go`` on stdin, send, report."""
    gen = argparse.Namespace(
        sources=args.sources, data_rate=1e6, jitter=0.0005, batch=args.batch, seed=args.seed
    )
    data = service.generate(gen, payload=args.payload, fragments=args.fragments, columns=False)
    server = service.Server.__new__(service.Server)  # the orderer, run by the parent
    server.pid = args.pid
    server.target = args.sender
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("sender: no go")
    sent = asyncio.run(
        service.send(args.sender, data.batches, data.sources, server, streams=args.streams)
    )
    result = SenderResult(
        fragments=sent.fragments,
        payload_bytes=sent.fragments * args.payload,
        started=sent.started,
        done=sent.started + sent.seconds,
        sender_cpu=sent.sender_cpu,
    )
    print(json.dumps(dataclasses.asdict(result)), flush=True)


def _busiest(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> tuple[str, float]:
    used = service._thread_use(before, after)
    return used[0] if used else ("", 0.0)


def run_point(args: argparse.Namespace, n: int, work: Path) -> dict[str, Any]:
    """N orderers, N senders, started together; the aggregate and each orderer's figures."""
    servers: list[service.Server] = []
    senders: list[subprocess.Popen[str]] = []
    sources = SyntheticRun(n_sources=args.sources).source_ids  # what each sender's run holds
    try:
        for k in range(n):
            servers.append(
                service.start_evb(
                    work / f"n{n}-orderer{k}", work / f"n{n}-orderer{k}.log", sources, 1.0
                )
            )
        for k, server in enumerate(servers):
            senders.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--sender",
                        server.target,
                        "--pid",
                        str(server.pid),
                        "--seed",
                        str(1000 + k),
                        "--fragments",
                        str(args.fragments),
                        "--payload",
                        str(args.payload),
                        "--sources",
                        str(args.sources),
                        "--streams",
                        str(args.streams),
                        "--batch",
                        str(args.batch),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=service._environment(),
                )
            )
        for sender in senders:
            assert sender.stdout is not None
            if sender.stdout.readline().strip() != "ready":
                raise SystemExit("a sender did not start")
        before = [s.thread_cpu() for s in servers]
        cpu_before = [s.cpu() for s in servers]
        for sender in senders:
            assert sender.stdin is not None
            sender.stdin.write("go\n")
            sender.stdin.flush()
        results = []
        for sender in senders:
            assert sender.stdout is not None
            line = sender.stdout.readline()
            if sender.wait(600) != 0 or not line:
                raise SystemExit("a sender failed")
            results.append(SenderResult(**json.loads(line)))
        busiest = [_busiest(b, s.thread_cpu()) for b, s in zip(before, servers, strict=True)]
        cpu = [s.cpu() - c for s, c in zip(servers, cpu_before, strict=True)]
    finally:
        for sender in senders:
            if sender.poll() is None:
                sender.kill()
        for server in servers:
            server.stop()
        for k in range(n):
            shutil.rmtree(work / f"n{n}-orderer{k}", ignore_errors=True)
        os.sync()
    fragments = sum(r.fragments for r in results)
    span = max(r.done for r in results) - min(r.started for r in results)
    return {
        "orderers": n,
        "fragments": fragments,
        "seconds": span,
        "fragments_per_s": fragments / span,
        "payload_mb_per_s": sum(r.payload_bytes for r in results) / span / 1e6,
        "start_spread_s": max(r.started for r in results) - min(r.started for r in results),
        "per_orderer_fragments_per_s": [r.fragments / (r.done - r.started) for r in results],
        "busiest_thread": [name for name, _ in busiest],
        "busiest_thread_us_per_1000": [
            1e9 * used / r.fragments for (_, used), r in zip(busiest, results, strict=True)
        ],
        "server_cpu_us_per_1000": [
            1e9 * c / r.fragments for c, r in zip(cpu, results, strict=True)
        ],
        "sender_cpu_us_per_1000": [1e9 * r.sender_cpu / r.fragments for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orderers", default="1,2,4,8", help="the N to run (1,2,4,8)")
    parser.add_argument("--mode", choices=["independent"], default="independent")
    parser.add_argument(
        "--fragments", type=int, default=2_000_000, help="fragments per orderer (2,000,000)"
    )
    parser.add_argument("--payload", type=int, default=32, help="payload bytes (32)")
    parser.add_argument("--sources", type=int, default=16, help="sources per run (16)")
    parser.add_argument("--streams", type=int, default=4, help="Submit streams per sender (4)")
    parser.add_argument("--batch", type=int, default=1000, help="fragments per batch (1000)")
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument("--sender", help=argparse.SUPPRESS)
    parser.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sender:
        _sender_main(args)
        return
    counts = [int(n) for n in args.orderers.split(",")]
    if 1 not in counts:
        counts.insert(0, 1)
    console = Console()
    console.print(
        f"{os.cpu_count()} cores; mode {args.mode}; {args.fragments:,} fragments of "
        f"{args.payload} B per orderer, {args.sources} sources each"
    )
    points = []
    with tempfile.TemporaryDirectory(prefix="evb-bench-orderers-") as tmp:
        for n in counts:
            points.append(run_point(args, n, Path(tmp)))
    single = next(p for p in points if p["orderers"] == 1)["fragments_per_s"]
    table = Table(
        title=f"N orderers at once ({args.mode}); ratio: aggregate / (N x one); "
        "spread: of the senders' starts; µs/1k: per 1000 fragments, max busiest "
        "thread of an orderer, mean orderer CPU"
    )
    for column in (
        "N",
        "frag/s",
        "MB/s",
        "N x one",
        "ratio",
        "spread",
        "busiest µs/1k",
        "CPU µs/1k",
    ):
        table.add_column(column, justify="right")
    for p in points:
        p["ratio_to_n_single"] = p["fragments_per_s"] / (p["orderers"] * single)
        table.add_row(
            str(p["orderers"]),
            f"{p['fragments_per_s']:,.0f}",
            f"{p['payload_mb_per_s']:.0f}",
            f"{p['orderers'] * single:,.0f}",
            f"{p['ratio_to_n_single']:.2f}",
            f"{p['start_spread_s'] * 1e3:.0f} ms",
            f"{max(p['busiest_thread_us_per_1000']):.0f}",
            f"{sum(p['server_cpu_us_per_1000']) / len(p['server_cpu_us_per_1000']):.0f}",
        )
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "mode": args.mode,
                    "cores": os.cpu_count(),
                    "payload": args.payload,
                    "points": points,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
