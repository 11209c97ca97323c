"""A real ``evb serve`` on loopback with four concurrent ``evb send`` processes (a stall with a
late backlog, barriers): everything sent comes out exactly once, in exactly the order, with the
late flags and emission times, that ``evb replay`` gives for the server's own arrival record."""

from __future__ import annotations

import collections
import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from orderer.client import OrderedStreamReader, end_run, get_stats
from orderer.config import OrdererConfig
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from orderer.replay.synthetic import Stall, SyntheticRun, iter_batches
from orderer.service.logs import ArrivalLog
from orderer.stats import BarrierCounts, Totals
from tests.e2e.conftest import ServerProcess, environment, evb_command

SPEC = SyntheticRun(
    n_sources=4,
    fragments_per_source=2500,
    rate=1000.0,
    batch_size=20,
    sync_barriers=2,
    stalls=(Stall(3, 0.8, 1.6, backlog=True),),
    payload_size=8,
    seed=7,
)
SEND_FLAGS = [
    "--n-sources", "4", "--fragments", "2500", "--rate", "1000", "--batch-size", "20",
    "--sync-barriers", "2", "--stall", "3:0.8:1.6:backlog", "--payload-size", "8",
    "--seed", "7", "--client-batch", "64", "--linger", "0.02", "--no-progress",
]  # fmt: skip
CONFIG = OrdererConfig(
    build_window=0.4, startup_delay=0.2, barrier_timeout=10.0, sources=(1, 2, 3, 4)
)
SERVE_FLAGS = [
    "--build-window", "0.4", "--startup-delay", "0.2", "--barrier-timeout", "10",
    "--sources", "1,2,3,4",
]  # fmt: skip
"""The barrier timeout is long (the default, 4 x the window, is 1.6 s): the four ``evb send``
processes start and run at their own pace, and on a busy host (make test's three workers) one
barrier's fragments once arrived more than 1.6 s apart: two incomplete barriers instead of one
complete (the replay agreed; the count of barriers below did not)."""


def test_concurrent_sources_come_out_as_evb_replay_orders_the_arrival_record(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *SERVE_FLAGS)
    senders = [
        subprocess.Popen(
            evb_command("send", "--target", server.target, "--only-sources", str(k), *SEND_FLAGS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for k in SPEC.source_ids
    ]
    summaries = []
    for sender in senders:
        out, err = sender.communicate(timeout=300)
        assert sender.returncode == 0, err
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    expected = collections.Counter(
        (int(s), int(ts), int(b))
        for _, batch in iter_batches(SPEC)
        for s, ts, b in zip(batch.source, batch.timestamp, batch.barrier, strict=True)
    )
    assert sum(s["fragments"] for s in summaries) == sum(expected.values())

    end = end_run(server.target)
    assert end == sum(expected.values())
    live = list(OrderedStreamReader(server.target, 0, until=end))
    stats = get_stats(server.target)
    assert server.stop() == 0

    rows = [
        (int(s), int(ts), int(b), bool(late), float(t))
        for batch in live
        for s, ts, b, late, t in zip(
            batch.source, batch.timestamp, batch.barrier, batch.late, batch.t, strict=True
        )
    ]
    assert collections.Counter(r[:3] for r in rows) == expected  # exactly once
    payloads_ok = all(
        batch.payload_of(i) == int(batch.timestamp[i]).to_bytes(8, "little")
        for batch in live
        for i in range(len(batch))
        if not batch.barrier[i]
    )
    assert payloads_ok

    arrivals = ArrivalLog.open(tmp_path / "data" / "arrivals")
    assert arrivals.export_replay(tmp_path / "arrivals.jsonl") == 0
    arrivals.close()
    with (tmp_path / "arrivals.jsonl").open() as lines:
        emitted, counters = replay(read_records(lines), CONFIG)
    replayed = [
        (int(s), int(ts), int(b), bool(late), float(t))
        for s, ts, b, late, t in zip(
            emitted.source, emitted.timestamp, emitted.barrier, emitted.late, emitted.t,
            strict=True,
        )
    ]  # fmt: skip
    assert [r[:4] for r in rows] == [r[:4] for r in replayed]
    assert [r[4] for r in rows] == [r[4] for r in replayed]  # emission times too
    assert stats.totals == Totals(**counters["totals"])
    by_type = stats.barriers.by_type  # the service's tally of the barrier log
    assert dataclasses.replace(stats.barriers, by_type={}) == BarrierCounts(
        **counters["barriers"], by_type={}
    )
    assert by_type == dict(collections.Counter(r[2] for r in replayed if r[2]))
    # the run exercised what it was meant to
    assert counters["totals"]["late"] > 0
    assert counters["barriers"]["complete"] + counters["barriers"]["incomplete"] == 4
