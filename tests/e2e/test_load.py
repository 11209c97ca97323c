"""64 concurrent sources against a real ``evb serve``: random stalls (with late backlogs),
begin, sync and end-of-run barriers, eight ``evb``-client processes of eight sources each. The
count and an order-independent checksum of (source, timestamp, payload) are equal on both sides,
the output order is the spec's (for runs up to :data:`REPLAY_LIMIT` fragments: exactly what
``evb replay`` gives for the server's own arrival record; beyond, the spec's invariants checked
while streaming), and the figures (fragments/s sustained, the server's peak memory) are printed.

Quick form in ``make test``: 64 x 20,000 fragments. ``make soak`` (``EVB_SOAK=1``): 64 x
10,000,000, or ``EVB_LOAD_FRAGMENTS`` per source. The senders generate their data in chunks
(constant memory) and are paced to ``EVB_LOAD_RATE`` fragments/s per source.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from orderer import FragmentBatch, OrdererConfig
from orderer.client import OrderedStreamReader, SourceClient, end_run, get_stats
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from orderer.service.logs import ArrivalLog
from orderer.stats import Totals
from tests.e2e.conftest import REPO, ServerProcess, environment

SOAK = bool(os.environ.get("EVB_SOAK"))
N_SOURCES, PROCESSES = 64, 8
FRAGMENTS = int(os.environ.get("EVB_LOAD_FRAGMENTS", 10_000_000 if SOAK else 20_000))
RATE = float(os.environ.get("EVB_LOAD_RATE", 50_000 if SOAK else 5_000))
"""Fragments per second per source the senders aim for (they send as fast as they can when
behind)."""
CHUNK = 500
"""Fragments per source per step of a sender."""
BARRIER_EVERY = 20_000
"""A sync barrier (type 3) every this many fragments of each source, at a common timestamp."""
TICKS = 1000
"""Timestamp ticks per fragment slot: source k's fragment j has timestamp ~ j * TICKS + jitter."""
REPLAY_LIMIT = 5_000_000
BUILD_WINDOW = 0.5
SERVE_FLAGS = [
    "--build-window", str(BUILD_WINDOW), "--startup-delay", "0.2", "--source-timeout", "off",
    "--sources", ",".join(str(s) for s in range(1, N_SOURCES + 1)),
]  # fmt: skip

_M = np.uint64(0xBF58476D1CE4E5B9)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fingerprint(source: np.ndarray, timestamp: np.ndarray, payload: np.ndarray) -> int:
    """Order-independent checksum of (source, timestamp, 8-byte payload) rows: a sum of mixes."""
    with np.errstate(over="ignore"):
        row = _mix(source.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ timestamp)
        row = _mix(row ^ payload.view("<u8").astype(np.uint64))
        return int(row.sum(dtype=np.uint64))


def _payload(source: int, timestamp: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _mix(timestamp ^ np.uint64(source << 40)).astype("<u8").view(np.uint8)


def source_chunks(source: int, fragments: int, seed: int) -> Iterator[FragmentBatch]:
    """Source ``source``'s data in chunks of :data:`CHUNK`: increasing timestamps with jitter,
    a begin-run barrier first, sync barriers at common timestamps, an end-run barrier last."""
    rng = np.random.default_rng([seed, source])
    produced = 0
    first = True
    while produced < fragments:
        n = min(CHUNK, fragments - produced)
        slots = np.arange(produced, produced + n, dtype=np.uint64)
        timestamp = slots * np.uint64(TICKS) + rng.integers(1, TICKS, n, dtype=np.uint64)
        barrier = np.zeros(n, dtype=np.uint32)
        sync = (slots % np.uint64(BARRIER_EVERY) == 0) & (slots > 0)
        timestamp[sync] = slots[sync] * np.uint64(TICKS)  # common to every source
        barrier[sync] = 3
        if first:
            timestamp[0], barrier[0], first = 0, 1, False
        produced += n
        if produced == fragments:
            timestamp[-1], barrier[-1] = np.uint64(fragments * TICKS), 2
        payload = _payload(source, timestamp)
        yield FragmentBatch(
            source=np.full(n, source, dtype=np.uint32),
            timestamp=timestamp,
            barrier=barrier,
            payload_offsets=np.arange(n + 1, dtype=np.uint64) * np.uint64(8),
            payload=payload,
        )


def sender(
    target: str, sources: list[int], fragments: int, rate: float, seed: int, start_at: float
) -> None:
    """One sender process: its sources step by step, paced to ``rate``; random stalls (the
    source holds its data and delivers it when the stall ends: a late backlog once the stall
    is longer than the build window). Prints a JSON summary with its count and checksum."""
    rng = np.random.default_rng([seed, sources[0], 99])
    streams = {s: source_chunks(s, fragments, seed) for s in sources}
    held: dict[int, list[FragmentBatch]] = {s: [] for s in sources}
    stalled_until: dict[int, int] = {s: -1 for s in sources}
    count, checksum, stalls = 0, 0, 0
    steps = -(-fragments // CHUNK)
    with SourceClient(target, sources=sources, batch_size=2048, linger=0.02) as client:
        time.sleep(max(0.0, start_at - time.time()))  # every sender starts together
        started = time.monotonic()
        for step in range(steps):
            for source in sources:
                chunk = next(streams[source], None)
                if step > 2 and stalled_until[source] < step and rng.random() < 0.004:
                    stalled_until[source] = step + int(rng.integers(2, 12))
                    stalls += 1
                if chunk is None:
                    continue
                if step <= stalled_until[source]:
                    held[source].append(chunk)  # delivered when the stall ends
                    continue
                for batch in [*held[source], chunk]:
                    client.send_fragments(batch)
                    count += len(batch)
                    checksum += fingerprint(batch.source, batch.timestamp, batch.payload)
                held[source] = []
            ahead = started + (step + 1) * CHUNK / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        for source in sources:
            for batch in held[source]:
                client.send_fragments(batch)
                count += len(batch)
                checksum += fingerprint(batch.source, batch.timestamp, batch.payload)
            client.end_source(source)
        client.flush()
        client.wait_acked()
    print(json.dumps({"fragments": count, "checksum": checksum % 2**64, "stalls": stalls}))


def _spawn(target: str, sources: list[int], start_at: float) -> subprocess.Popen[str]:
    code = (
        "import sys, json; from tests.e2e.test_load import sender; "
        "a = json.loads(sys.argv[1]); sender(**a)"
    )
    arguments = {"target": target, "sources": sources, "fragments": FRAGMENTS, "rate": RATE,
                 "seed": 2026, "start_at": start_at}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
        cwd=REPO,
    )


def _memory_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(field)


def test_64_sources_with_stalls_and_barriers_lose_nothing_and_keep_the_order(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    assert server.process is not None
    groups = np.array_split(np.arange(1, N_SOURCES + 1), PROCESSES)
    start_at = time.time() + 8.0  # time for the eight processes to start and connect
    senders = [_spawn(server.target, [int(s) for s in group], start_at) for group in groups]
    time.sleep(max(0.0, start_at - time.time()))
    started = time.monotonic()
    summaries = []
    for process in senders:
        out, err = process.communicate(timeout=24 * 3600)
        assert process.returncode == 0, err[-3000:]
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    seconds = time.monotonic() - started  # until every fragment was acknowledged (durable)
    sent = sum(s["fragments"] for s in summaries)
    sent_checksum = sum(s["checksum"] for s in summaries) % 2**64
    assert sent == N_SOURCES * FRAGMENTS
    assert sum(s["stalls"] for s in summaries) > 0

    end = end_run(server.target)
    assert end == sent
    received, checksum, late = 0, 0, 0
    previous = -1  # timestamp of the last ordinary fragment not flagged late
    order_ok = True
    keep = end <= REPLAY_LIMIT
    live: list[tuple[int, int, int, bool]] = []
    for batch in OrderedStreamReader(server.target, 0, until=end):
        payload = batch.payload  # 8 bytes each
        assert batch.payload_offsets[-1] == 8 * len(batch)
        received += len(batch)
        checksum += fingerprint(batch.source, batch.timestamp, payload)
        late += int(batch.late.sum())
        on_time = batch.timestamp[~batch.late & (batch.barrier == 0)]
        if len(on_time):  # the high-water mark never goes back for on-time ordinary fragments
            ascending = bool((on_time[1:] >= on_time[:-1]).all())
            order_ok &= ascending and int(on_time[0]) >= previous
            previous = int(on_time[-1])
        if keep:
            live += zip(
                batch.source.tolist(), batch.timestamp.tolist(), batch.barrier.tolist(),
                batch.late.tolist(), strict=True,
            )  # fmt: skip
    stats = get_stats(server.target)
    peak = _memory_mb(server.process.pid, "VmHWM")
    assert server.stop() == 0
    print(
        f"\nload: {N_SOURCES} sources x {FRAGMENTS:,} = {sent:,} fragments in {seconds:.1f} s"
        f" ({sent / seconds:,.0f} fragments/s sustained, acknowledged), server peak memory"
        f" {peak:.0f} MB, {late:,} late, barriers {stats.barriers}, fragments lost:"
        f" {sent - received}"
    )
    assert received == sent  # nothing lost, nothing doubled (the count) ...
    assert checksum % 2**64 == sent_checksum  # ... and the very same fragments
    assert order_ok
    assert stats.barriers.complete + stats.barriers.incomplete >= 2
    if keep:  # exactly evb replay's order for the server's own arrival record
        arrivals = ArrivalLog.open(tmp_path / "data" / "arrivals")
        arrivals.export_replay(tmp_path / "arrivals.jsonl")
        arrivals.close()
        config = OrdererConfig.from_mapping(
            {
                "build_window": BUILD_WINDOW,
                "startup_delay": 0.2,
                "source_timeout": "off",
                "sources": list(range(1, N_SOURCES + 1)),
            }
        )
        with (tmp_path / "arrivals.jsonl").open() as lines:
            emitted, counters = replay(read_records(lines), config)
        replayed = list(
            zip(
                emitted.source.tolist(), emitted.timestamp.tolist(), emitted.barrier.tolist(),
                emitted.late.tolist(), strict=True,
            )
        )  # fmt: skip
        assert live == replayed
        assert stats.totals == Totals(**counters["totals"])
    else:  # the soak's logs are tens of GB: not left for pytest's last three temp dirs
        shutil.rmtree(tmp_path / "data")
