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

``--mode independent`` gives each orderer a run of its own: what the host gives N processes that
share nothing but its cores, memory bandwidth and disk, the ceiling of one run spread over N
orderers. ``--mode sliced`` is one run over the N orderers (docs/scale-out.md): ``evb serve
--orderers N --orderer-index k --slice-ticks T`` each, the run's ``N x --sources`` sources split
over the N senders as before, each sender routing its batches as the source client does
(:class:`~orderer.client.routing.SourceRouting`: each fragment to the owner of its slice,
crossing watermarks to the others; routed, numbered per orderer and encoded before the start)
and writing every orderer's share on its own streams. Both modes send the same fragments in
all, so ``sliced`` against ``independent`` is what spreading one run costs.

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
from collections import Counter
from pathlib import Path
from typing import Any

try:
    import orderer  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_service as service
import grpc
from rich.console import Console
from rich.table import Table

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.client import get_stats
from orderer.client.routing import SourceRouting
from orderer.replay.slicing import Slicing
from orderer.replay.synthetic import SyntheticRun, iter_batches
from orderer.wire import convert


@dataclasses.dataclass
class SenderResult:
    """What one sender process reports: its fragments and when it started and ended, on the
    host's monotonic clock (shared by every process)."""

    fragments: int
    payload_bytes: int
    started: float
    done: float
    sender_cpu: float
    replies: int  # SubmitReply messages (acks, flow control) from all its orderers
    xoff_events: int  # of them, the XOFFs


def _server_ref(target: str, pid: int) -> service.Server:
    server = service.Server.__new__(service.Server)  # an orderer the parent runs
    server.pid = pid
    server.target = target
    return server


def _routed(
    args: argparse.Namespace, n: int
) -> tuple[tuple[int, ...], list[list[service.Message]]]:
    """This sender's sources and, per orderer, its messages: the synthetic run of sources
    ``--first-source`` on routed over ``n`` orderers (one: unchanged), numbered per orderer."""
    spec = SyntheticRun(
        n_sources=args.sources,
        fragments_per_source=max(1, args.fragments // args.sources),
        rate=1e6 / 16,  # per source: bench_service's 16 sources at 1 M/s in all
        jitter=0.0005,
        batch_size=args.batch,
        barriers=False,
        end_of_source=False,
        payload_size=args.payload,
        seed=args.seed,
        first_source=args.first_source,
    )
    routing = SourceRouting(Slicing(n, args.slice_ticks))
    sequence: Counter[tuple[int, int]] = Counter()
    messages: list[list[service.Message]] = [[] for _ in range(n)]
    for _, batch in iter_batches(spec):
        source = int(batch.source[0])
        for routed in routing.route(source, batch):
            out = messages[routed.orderer]
            if routed.part is not None:
                first = sequence[routed.orderer, source]
                request = pb.SubmitRequest(batch=convert.batch_to_pb(routed.part, first))
                out.append(
                    service.Message(source, len(routed.part), request.SerializeToString(), 0.0)
                )
                sequence[routed.orderer, source] += len(routed.part)
            if routed.watermark is not None:
                mark = pb.SubmitRequest(
                    watermark=pb.Watermark(source=source, watermark=routed.watermark)
                )
                out.append(service.Message(source, 0, mark.SerializeToString(), 0.0))
    return spec.source_ids, messages


def _sender_main(args: argparse.Namespace) -> None:
    """A sender process: generate and route, print what each orderer gets, wait for ``go``
    on stdin, send (its streams end once what it sent is durable), report."""
    targets = args.sender.split(",")
    pids = [int(p) for p in args.pid.split(",")]
    sources, messages = _routed(args, len(targets))
    print(json.dumps([sum(m.count for m in out) for out in messages]), flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "go":
        raise SystemExit("sender: no go")
    streams = max(1, args.streams // len(targets))

    async def run() -> list[service.Sent]:
        return await asyncio.gather(
            *(
                # expect 0: no polling for the output here (N senders polling every orderer
                # would load the orderers N times as much); the parent looks once per orderer
                service.send(t, out, sources, _server_ref(t, pid), streams=streams, expect=0)
                for t, pid, out in zip(targets, pids, messages, strict=True)
            )
        )

    sent = asyncio.run(run())
    fragments = sum(m.count for out in messages for m in out)
    result = SenderResult(
        fragments=fragments,
        payload_bytes=fragments * args.payload,
        started=min(s.started for s in sent),
        done=max(s.started + s.seconds for s in sent),
        sender_cpu=sent[0].sender_cpu,  # each send counts the whole process
        replies=sum(s.replies for s in sent),
        xoff_events=sum(s.xoff_events for s in sent),
    )
    print(json.dumps(dataclasses.asdict(result)), flush=True)


def _threads(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> list[tuple[str, float]]:
    """CPU seconds of an orderer's threads, by name (gRPC's pollers summed), busiest first."""
    by_name: Counter[str] = Counter()
    for name, used in service._thread_use(before, after):
        by_name[name] += used
    return by_name.most_common()


async def _durable_at(targets: list[str], expect: list[int]) -> float:
    """When every orderer's durable output reached what it was sent (0.0: it had already when
    first asked, which each sender's end, durable too, then dates). One poller per orderer."""

    async def one(target: str, wanted: int) -> float:
        async with grpc.aio.insecure_channel(target) as channel:
            if (await service.stats(channel)).next_offset >= wanted:
                return 0.0
            return await service.wait_offset(channel, wanted)

    return max(await asyncio.gather(*(one(t, e) for t, e in zip(targets, expect, strict=True))))


def run_point(args: argparse.Namespace, n: int, work: Path) -> dict[str, Any]:
    """N orderers, N senders, started together; the aggregate and each orderer's figures."""
    servers: list[service.Server] = []
    senders: list[subprocess.Popen[str]] = []
    sliced = args.mode == "sliced"
    n_senders = args.senders or n if sliced else n
    per_sender = SyntheticRun(n_sources=args.sources).source_ids  # sources 1..S of a sender
    try:
        for k in range(n):
            if sliced:  # one run: every orderer waits for every sender's sources
                run_sources = tuple(range(1, 1 + n_senders * args.sources))
                flags = f"--orderers {n} --orderer-index {k} --slice-ticks {args.slice_ticks}"
            else:
                run_sources, flags = per_sender, ""
            os.environ["EVB_BENCH_SERVE_FLAGS"] = flags
            servers.append(
                service.start_evb(
                    work / f"n{n}-orderer{k}", work / f"n{n}-orderer{k}.log", run_sources, 1.0
                )
            )
        os.environ.pop("EVB_BENCH_SERVE_FLAGS", None)
        for k in range(n_senders):
            mine = servers if sliced else [servers[k]]
            senders.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--sender",
                        ",".join(s.target for s in mine),
                        "--pid",
                        ",".join(str(s.pid) for s in mine),
                        "--seed",
                        str(1000 + k),
                        "--fragments",
                        str(args.fragments),
                        "--payload",
                        str(args.payload),
                        "--sources",
                        str(args.sources),
                        "--first-source",
                        str(1 + k * args.sources if sliced else 1),
                        "--slice-ticks",
                        str(args.slice_ticks),
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
        shares = []
        for sender in senders:
            assert sender.stdout is not None
            line = sender.stdout.readline()
            if not line.startswith("["):
                raise SystemExit("a sender did not start")
            shares.append(json.loads(line))
        before = [s.thread_cpu() for s in servers]
        cpu_before = [s.cpu() for s in servers]
        for k, sender in enumerate(senders):
            assert sender.stdin is not None
            expect = [sum(share[o] for share in shares) for o in range(n)] if sliced else shares[k]
            sender.stdin.write(f"go {','.join(map(str, expect))}\n")
            sender.stdin.flush()
        results = []
        for sender in senders:
            assert sender.stdout is not None
            line = sender.stdout.readline()
            if sender.wait(600) != 0 or not line:
                raise SystemExit("a sender failed")
            results.append(SenderResult(**json.loads(line)))
        expect = (
            [sum(share[o] for share in shares) for o in range(n)]
            if sliced
            else [share[0] for share in shares]
        )
        durable = asyncio.run(_durable_at([s.target for s in servers], expect))
        threads = [_threads(b, s.thread_cpu()) for b, s in zip(before, servers, strict=True)]
        busiest = [named[0] if named else ("", 0.0) for named in threads]
        cpu = [s.cpu() - c for s, c in zip(servers, cpu_before, strict=True)]
        counts = [get_stats(s.target) for s in servers]
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
    span = max(max(r.done for r in results), durable) - min(r.started for r in results)
    per_orderer = (
        [sum(share[o] for share in shares) for o in range(n)]
        if sliced
        else [r.fragments for r in results]
    )
    return {
        "orderers": n,
        "fragments": fragments,
        "seconds": span,
        "fragments_per_s": fragments / span,
        "payload_mb_per_s": sum(r.payload_bytes for r in results) / span / 1e6,
        "start_spread_s": max(r.started for r in results) - min(r.started for r in results),
        "fragments_per_orderer": per_orderer,
        "busiest_thread": [name for name, _ in busiest],
        "busiest_thread_us_per_1000": [
            1e9 * used / f for (_, used), f in zip(busiest, per_orderer, strict=True)
        ],
        "server_cpu_us_per_1000": [1e9 * c / f for c, f in zip(cpu, per_orderer, strict=True)],
        "sender_cpu_us_per_1000": [1e9 * r.sender_cpu / r.fragments for r in results],
        "threads_us_per_1000": [
            {name: round(1e9 * used / f) for name, used in named if 1e9 * used / f >= 1}
            for named, f in zip(threads, per_orderer, strict=True)
        ],
        "replies_per_1000": 1e3 * sum(r.replies for r in results) / fragments,
        "xoff_events": sum(r.xoff_events for r in results),
        "late": [sum(c.late for c in st.sources.values()) for st in counts],
        "out_of_order": [sum(c.out_of_order for c in st.sources.values()) for st in counts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orderers", default="1,2,4,8", help="the N to run (1,2,4,8)")
    parser.add_argument(
        "--mode",
        choices=["independent", "sliced"],
        default="independent",
        help="N runs of one orderer, or one run over N (independent)",
    )
    parser.add_argument(
        "--senders",
        type=int,
        default=0,
        help="sender processes of --mode sliced (0: one per orderer)",
    )
    parser.add_argument(
        "--slice-ticks",
        type=int,
        default=10_000_000,
        help="T of --mode sliced, ticks of the 100 MHz clock (10^7: 100 ms)",
    )
    parser.add_argument(
        "--fragments", type=int, default=2_000_000, help="fragments per orderer (2,000,000)"
    )
    parser.add_argument("--payload", type=int, default=32, help="payload bytes (32)")
    parser.add_argument("--sources", type=int, default=16, help="sources per run (16)")
    parser.add_argument("--streams", type=int, default=4, help="Submit streams per sender (4)")
    parser.add_argument("--batch", type=int, default=1000, help="fragments per batch (1000)")
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument("--sender", help=argparse.SUPPRESS)
    parser.add_argument("--pid", help=argparse.SUPPRESS)
    parser.add_argument("--first-source", type=int, default=1, help=argparse.SUPPRESS)
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
    for p in points:
        console.print(
            f"N = {p['orderers']}: late {p['late']}, out of order {p['out_of_order']} (per "
            f"orderer); replies per 1000 fragments {p['replies_per_1000']:.2f}, XOFFs "
            f"{p['xoff_events']}; threads µs/1000 of orderer 0 {p['threads_us_per_1000'][0]}"
        )
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
