"""Benchmark of ``evb send --nscldaq``: the ingest rate of NSCLDAQ ring-item files beside the same
fragments through ``evb send``'s own path (``send_records`` of the equivalent JSON Lines file),
in one run.

Not a pytest test: ``python tests/bench/bench_nscldaq.py [--fragments N] [--sources S]
[--json PATH]``. The data (S sources, per-source increasing timestamps, physics events of
``--body`` bytes, one ring-item file a source, plus the JSON Lines file with the same fragments:
t = 0, payload = the ring item in base64) is generated up front and never timed. Each path gets
a fresh ``evb serve`` on 127.0.0.1 (a subprocess) and is timed in this process from the start of
the send to the moment every fragment is acknowledged (durable on the server). The figures are
fragments/s and MB/s of ring-item bytes (the payloads).
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orderer.remote import send_nscldaq, send_records
from tests.e2e.conftest import ServerProcess


def generate(work: Path, fragments: int, sources: int, body: int) -> tuple[list[Path], Path, int]:
    per = fragments // sources
    paths, lines, total = [], [], 0
    payload = bytes(range(256)) * (body // 256 + 1)
    for source in range(1, sources + 1):
        items = [
            struct.pack("<IIIQII", 28 + body, 30, 20, 10 * k + source, source, 0) + payload[:body]
            for k in range(per)
        ]
        path = work / f"run-{source}.evt"
        path.write_bytes(struct.pack("<IIIHH", 16, 12, 0, 11, 0) + b"".join(items))
        paths.append(path)
        total += sum(len(i) for i in items)
        lines += [
            f'{{"t": 0.0, "source": {source}, "ts": {10 * k + source}, '
            f'"payload": "{base64.b64encode(i).decode()}"}}'
            for k, i in enumerate(items)
        ]
    jsonl = work / "same.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    return paths, jsonl, total


def timed(work: Path, name: str, send: Any) -> float:
    server = ServerProcess(work / f"data-{name}", work, "--startup-delay", "0").start()
    try:
        started = time.perf_counter()
        send(server.target)
        return time.perf_counter() - started
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fragments", type=int, default=400_000)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--body", type=int, default=64, help="physics event body bytes")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths, jsonl, total = generate(work, args.fragments, args.sources, args.body)
        n = args.fragments // args.sources * args.sources
        options = {"batch_size": 4096, "linger": 0.05}
        ring = timed(work, "ring", lambda t: send_nscldaq(t, paths, client_options=options))
        own = timed(
            work,
            "jsonl",
            lambda t: send_records(t, jsonl, speed=0, progress=False, client_options=options),
        )
    figures = {
        "fragments": n,
        "payload_bytes": total,
        "nscldaq": {
            "seconds": round(ring, 3),
            "fragments_per_s": round(n / ring),
            "mb_per_s": round(total / ring / 1e6, 1),
        },
        "send_records_jsonl": {
            "seconds": round(own, 3),
            "fragments_per_s": round(n / own),
            "mb_per_s": round(total / own / 1e6, 1),
        },
    }
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
