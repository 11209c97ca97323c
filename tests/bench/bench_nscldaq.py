"""Benchmark of ``evb send --nscldaq``: the ingest rate of NSCLDAQ ring-item files beside the same
fragments sent as ``evb send``'s own batches, in one run, and the ring-item reader alone.

Not a pytest test: ``python tests/bench/bench_nscldaq.py [--fragments N] [--sources S]
[--body B] [--repeat R] [--json PATH]``. The data (S sources, per-source increasing timestamps,
physics events of ``--body`` bytes, one ring-item file a source) is generated up front and never
timed; so are the own batches: :class:`~orderer.batch.FragmentBatch` es built from the
generator's own list of items (payload = the whole ring item, as ``--nscldaq`` sends it), one a
source and as long as each batch the reader yields, so both paths send the same fragments in
the same batches to the same client (:class:`~orderer.client.SourceClient`, the same options).

Three figures, R times over (``--nscldaq`` and own batches in turns first, each on a fresh
``evb serve`` on 127.0.0.1, a subprocess, timed in this process from the start of the send to
the moment every fragment is acknowledged durable; then the reader alone, over the files in the
page cache). Rates are fragments/s and MB/s of ring-item bytes (the payloads); the ratio is
``--nscldaq`` over own batches within each round. Printed per round and as ranges.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orderer.apps.send import send_nscldaq
from orderer.batch import FragmentBatch
from orderer.client import SourceClient
from orderer.nscldaq.reader import RingItemReader
from tests.e2e.conftest import ServerProcess

OPTIONS = {"batch_size": 4096, "linger": 0.05}


def generate(
    work: Path, fragments: int, sources: int, body: int
) -> tuple[list[Path], dict[int, tuple[list[int], list[bytes]]], int]:
    """The files, each source's (timestamps, ring items), and the ring-item bytes in all."""
    per = fragments // sources
    paths, items_of, total = [], {}, 0
    payload = bytes(range(256)) * (body // 256 + 1)
    for source in range(1, sources + 1):
        stamps = [10 * k + source for k in range(per)]
        items = [
            struct.pack("<IIIQII", 28 + body, 30, 20, ts, source, 0) + payload[:body]
            for ts in stamps
        ]
        path = work / f"run-{source}.evt"
        path.write_bytes(struct.pack("<IIIHH", 16, 12, 0, 11, 0) + b"".join(items))
        paths.append(path)
        items_of[source] = (stamps, items)
        total += sum(len(i) for i in items)
    return paths, items_of, total


def own_batches(
    paths: list[Path], items_of: dict[int, tuple[list[int], list[bytes]]]
) -> list[FragmentBatch]:
    """The same fragments as evb send's own batches, cut where the reader cuts its batches."""
    batches, taken = [], dict.fromkeys(items_of, 0)
    for read in RingItemReader().read_paths(paths):
        source = int(read.source[0])
        stamps, items = items_of[source]
        a, b = taken[source], taken[source] + len(read)
        batches.append(FragmentBatch.from_arrays(source, stamps[a:b], payloads=items[a:b]))
        taken[source] = b
    return batches


def send_own(target: str, batches: list[FragmentBatch]) -> int:
    """Send the batches as ``evb send`` sends its own; the fragments acknowledged durable."""
    with SourceClient(target, sources=[], **OPTIONS) as client:
        for batch in batches:
            client.send_fragments(batch)
        client.flush()
        client.wait_acked()
        return sum(client.acked(source) for source in {int(b.source[0]) for b in batches})


def send_ring(target: str, paths: list[Path]) -> int:
    """``evb send --nscldaq``; the fragments acknowledged durable."""
    return sum(send_nscldaq(target, paths, client_options=OPTIONS)["acked"].values())


def timed(work: Path, name: str, send: Any, n: int) -> float:
    """Seconds from the start of the send to every fragment durable, on a fresh server."""
    data = work / f"data-{name}"
    server = ServerProcess(data, work, "--startup-delay", "0").start()
    try:
        started = time.perf_counter()
        acked = send(server.target)
        seconds = time.perf_counter() - started
        assert acked == n, f"{name}: {acked} of {n} fragments acknowledged"
        return seconds
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def read_alone(paths: list[Path]) -> tuple[float, int]:
    started = time.perf_counter()
    fragments = sum(len(batch) for batch in RingItemReader().read_paths(paths))
    return time.perf_counter() - started, fragments


def rates(n: int, total: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 4),
        "fragments_per_s": round(n / seconds),
        "mb_per_s": round(total / seconds / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fragments", type=int, default=2_000_000)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--body", type=int, default=64, help="physics event body bytes")
    parser.add_argument("--repeat", type=int, default=3, help="alternated rounds")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths, items_of, total = generate(work, args.fragments, args.sources, args.body)
        batches = own_batches(paths, items_of)
        n = sum(len(b) for b in batches)
        for k in range(args.repeat):
            paths_in_turn = {
                "nscldaq": lambda t: send_ring(t, paths),
                "own": lambda t: send_own(t, batches),
            }
            # in turns first, so that neither always follows the other's disk writes
            order = list(paths_in_turn) if k % 2 == 0 else list(reversed(paths_in_turn))
            seconds = {name: timed(work, f"{name}-{k}", paths_in_turn[name], n) for name in order}
            ring, own = seconds["nscldaq"], seconds["own"]
            alone, read = read_alone(paths)
            assert read == n, (read, n)
            rounds.append(
                {
                    "nscldaq": rates(n, total, ring),
                    "own_batches": rates(n, total, own),
                    "reader_alone": rates(n, total, alone),
                    "ratio": round(own / ring, 3),
                }
            )
            print(f"round {k + 1}: {json.dumps(rounds[-1])}", file=sys.stderr)

    def span(path: tuple[str, ...]) -> list[float]:
        values = []
        for r in rounds:
            value: Any = r
            for key in path:
                value = value[key]
            values.append(value)
        return [min(values), max(values)]

    figures: dict[str, Any] = {
        "fragments": n,
        "payload_bytes": total,
        "batches": len(batches),
        "client_options": OPTIONS,
        "rounds": rounds,
        "ranges": {
            **{
                f"{path}_{unit}": span((path, unit))
                for path in ("nscldaq", "own_batches", "reader_alone")
                for unit in ("fragments_per_s", "mb_per_s")
            },
            "ratio_nscldaq_over_own": span(("ratio",)),
        },
    }
    print(json.dumps(figures["ranges"], indent=1))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
