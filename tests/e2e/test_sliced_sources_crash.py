"""kill -9 of one of a run's three orderers while a source client feeds them all, and a restart
on its data directory and port: the others go on taking their slices meanwhile, the client
keeps the stopped orderer's share and resends what it had not acknowledged, and in the end each
orderer holds every fragment of its slices once, none of another's (docs/scale-out.md, "One
orderer failing")."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from orderer.batch import EmittedBatch
from orderer.client import OrderedStreamReader, SourceClient, get_stats
from orderer.replay.slicing import Slicing
from tests.e2e.conftest import ServerProcess

N, T = 3, 1000
SOURCES = (1, 2, 3)


def test_a_killed_orderer_loses_and_doubles_nothing_and_the_others_go_on(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    servers = [
        server_factory(
            tmp_path / f"o{k}", "--orderers", str(N), "--orderer-index", str(k),
            "--slice-ticks", str(T), "--build-window", "60", "--startup-delay", "0",
            "--sources", ",".join(map(str, SOURCES)),
        )
        for k in range(N)
    ]  # fmt: skip
    targets = ",".join(s.target for s in servers)
    sent = {s: np.arange(s, 90 * T, 37, dtype=np.uint64) for s in SOURCES}
    chunks = 30
    with SourceClient(targets, batch_size=40, linger=None, reconnect_timeout=120) as client:
        for c in range(chunks):
            for source, ts in sent.items():
                part = np.array_split(ts, chunks)[c]
                client.send_batch(source, part)
            client.flush()
            if c == 10:
                servers[1].kill()  # kill -9, mid-run
            if c == 12:
                # the others took their slices meanwhile; orderer 1's share waits in the client
                assert get_stats(servers[0].target).sources[1].received > 0
            if c == 20:
                servers[1].start()  # same data directory, same port
            time.sleep(0.02)
        for source in SOURCES:
            client.end_source(source)
        client.wait_acked(timeout=120)
        assert client.reconnects >= 1
    slicing = Slicing(N, T)
    every = np.sort(np.concatenate(list(sent.values())))
    held = []
    for k, server in enumerate(servers):
        stats = get_stats(server.target)
        output = EmittedBatch.concat(
            list(OrderedStreamReader(server.target, 0, until=stats.next_offset))
        )
        assert (slicing.owner(output.timestamp) == k).all()  # its own slices only
        held.append(np.sort(output.timestamp))
        owned = every[slicing.owner(every) == k]
        # exactly what was routed to it: every fragment once
        assert np.array_equal(np.sort(output.timestamp), owned), f"orderer {k}"
    assert sum(len(h) for h in held) == len(every)
