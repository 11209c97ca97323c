"""A run spread over three orderers on loopback, fed by the source client (docs/scale-out.md):
what each orderer takes in, the client's routing and checks, flow control per orderer, and the
release of a dead source (``evb release``'s rounds)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from orderer import FlowControl, InterfaceError, OrdererConfig
from orderer.apps.release import release_round
from orderer.batch import ArrivalKind
from orderer.client import AsyncSourceClient, get_stats_async
from orderer.replay.slicing import Slicing
from orderer.service.server import RunningServer
from tests.service.harness import run, serving, target

T = 1000
N = 3
SOURCES = (1, 2, 3, 4, 5, 6)
CONFIG = OrdererConfig(build_window=60, startup_delay=0.0, sources=SOURCES)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.asynccontextmanager
async def orderers(
    tmp_path: Path,
    config: OrdererConfig = CONFIG,
    *,
    peers: bool = False,
    slice_ticks: tuple[int, ...] = (T,) * N,
) -> AsyncIterator[list[RunningServer]]:
    """N orderers of one run, each on its own data directory; ``peers``: each told every
    address (fixed ports); ``slice_ticks``: each one's T (a misconfigured run: not all T)."""
    ports = _free_ports(N) if peers else [0] * N
    addresses = tuple(f"127.0.0.1:{p}" for p in ports)
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(
                serving(
                    tmp_path / f"orderer{k}",
                    config,
                    listen=addresses[k],
                    orderers=N,
                    orderer_index=k,
                    slice_ticks=slice_ticks[k],
                    peers=addresses if peers else (),
                )
            )
            for k in range(N)
        ]
        yield servers


def _arrivals(running: RunningServer) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """kind, source, value (timestamp or watermark), barrier of every record it took in."""
    records = list(running.service.arrivals.read_records())
    return (
        np.concatenate([r.kind for r in records]),
        np.concatenate([r.source for r in records]),
        np.concatenate([r.value for r in records]),
        np.concatenate([r.barrier for r in records]),
    )


def test_each_fragment_reaches_its_slices_orderer_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    sent: dict[int, np.ndarray] = {}

    async def body() -> None:
        async with orderers(tmp_path) as servers:
            targets = ",".join(target(s) for s in servers)
            async with AsyncSourceClient(targets, batch_size=37, linger=None) as client:
                assert client.orderers == N
                for source in SOURCES:
                    ts = np.sort(rng.integers(0, 20 * T, 400)).astype(np.uint64)
                    sent[source] = ts
                    barriers = np.zeros(400, dtype=np.uint32)
                    barriers[200] = 5  # a barrier: a copy at every orderer
                    for start in range(0, 400, 91):  # the client's batches cut across these
                        await client.send_batch(
                            source, ts[start : start + 91], barriers[start : start + 91]
                        )
                    await client.end_source(source)
                await client.wait_acked()
            slicing = Slicing(N, T)
            ordinary_at: list[int] = []
            for k, running in enumerate(servers):
                kind, source, value, barrier = _arrivals(running)
                fragment = kind == ArrivalKind.FRAGMENT
                ordinary = fragment & (barrier == 0)
                assert (slicing.owner(value[ordinary]) == k).all()  # only its own slices
                assert (fragment & (barrier == 5)).sum() == len(SOURCES)  # every copy
                ends = (kind == ArrivalKind.END_OF_SOURCE).sum()
                assert ends == len(SOURCES)  # an end at every orderer
                # a crossing watermark for each slice a source entered that is not k's
                marks = value[kind == ArrivalKind.WATERMARK]
                assert marks.size and (slicing.owner(marks) != k).all()
                assert (marks % T == 0).all()
                ordinary_at.append(int(ordinary.sum()))
                stats = await get_stats_async(target(running))
                assert stats.next_offset == ordinary.sum() + len(SOURCES)  # all emitted
            # every ordinary fragment once over the three
            total = sum(len(ts) - 1 for ts in sent.values())
            assert sum(ordinary_at) == total

    run(body())


def test_one_address_with_peers_stands_for_the_run(tmp_path: Path) -> None:
    async def body() -> None:
        async with orderers(tmp_path, peers=True) as servers:
            # another name of orderer 1 (as a Service would be): each orderer is then reached
            # at the address the peers give, never again through the name given
            alias = target(servers[1]).replace("127.0.0.1", "localhost")
            async with AsyncSourceClient(alias, sources=[1], linger=None) as client:
                assert client.targets == tuple(target(s) for s in servers)
                assert [link.target for link in client._links] == list(client.targets)
                await client.send_batch(1, np.arange(0, 6 * T, 100))
                await client.wait_acked()
            for k, running in enumerate(servers):
                kind, _, value, _ = _arrivals(running)
                fragments = value[kind == ArrivalKind.FRAGMENT]
                assert len(fragments) == 20  # slices k and k + 3: 10 fragments each
                assert (Slicing(N, T).owner(fragments) == k).all()

    run(body())


def test_the_orderers_out_of_order_or_missing_one_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        async with orderers(tmp_path) as servers:
            wrong = ",".join(target(servers[k]) for k in (1, 0, 2))
            with pytest.raises(InterfaceError, match=r"is orderer 1 of 3, not orderer 0 of 3"):
                await AsyncSourceClient(wrong).start()
            two = ",".join(target(servers[k]) for k in (0, 1))
            with pytest.raises(InterfaceError, match=r"is orderer 0 of 3, not orderer 0 of 2"):
                await AsyncSourceClient(two).start()
            # one address, no peers told: the client cannot route and says so
            with pytest.raises(InterfaceError, match=r"does not name the others"):
                await AsyncSourceClient(target(servers[0])).start()
            # a fragment at the wrong orderer, sent by hand: refused, naming the owner
            async with AsyncSourceClient(target(servers[0]), connect_timeout=None) as raw:
                await raw.send_batch(1, [0, 1])  # slice 0: orderer 0's
                await raw.wait_acked()
                await raw.send_batch(1, [T + 1])  # slice 1: orderer 1's
                with pytest.raises(InterfaceError, match=r"owned by orderer 1"):
                    await raw.wait_acked(timeout=10)
                with contextlib.suppress(InterfaceError):
                    await raw.abort()
            stats = await get_stats_async(target(servers[0]))
            assert stats.sources[1].received == 2  # nothing accepted before is lost

    run(body())


def test_orderers_that_cut_other_slices_are_not_one_run(tmp_path: Path) -> None:
    async def body() -> None:
        async with orderers(tmp_path, slice_ticks=(T, T, 2 * T)) as servers:
            targets = ",".join(target(s) for s in servers)
            with pytest.raises(InterfaceError, match=r"cuts slices of 2000 ticks, orderer 0 of"):
                await AsyncSourceClient(targets).start()

    run(body())


def test_a_paused_orderer_holds_only_what_goes_to_it(tmp_path: Path) -> None:
    config = OrdererConfig(
        build_window=60,
        startup_delay=0.0,
        sources=(1, 2),
        flow_control=FlowControl(queue_xoff=50, queue_xon=20),
    )

    async def body() -> None:
        async with orderers(tmp_path, config) as servers:
            targets = ",".join(target(s) for s in servers)
            async with AsyncSourceClient(
                targets, batch_size=10, linger=None, max_unacked=10_000
            ) as client:
                # source 2 silent: 100 fragments of slice 0 fill source 1's queue at orderer 0
                await client.send_batch(1, np.arange(0, 100))
                await asyncio.wait_for(client._wait(lambda: client._links[0].paused(1)), 30)
                # then 20 of each of slices 1, 2 and 3: orderers 1 and 2 take theirs, orderer
                # 0's wait in the client (with the crossing watermark it is owed)
                later = np.concatenate([np.arange(s * T, s * T + 20) for s in (1, 2, 3)])
                await client.send_batch(1, later)
                for k in (1, 2):
                    link = client._links[k]
                    await asyncio.wait_for(client._wait(lambda link=link: link.acked(1) == 20), 30)
                    assert not link.paused(1) and link.queued() == 0
                assert client._links[0].queued() == 20
                assert (await get_stats_async(target(servers[0]))).sources[1].received == 100
                await client.send_batch(2, [10**9])  # its crossing marks drain every queue
                await client.end_source(1)
                await client.end_source(2)
                await asyncio.wait_for(client.wait_acked(), 60)
                ts = np.concatenate([np.arange(0, 100), later])
            emitted = 0
            for running in servers:
                emitted += (await get_stats_async(target(running))).next_offset
            assert emitted == len(ts) + 1

    run(body())


def test_a_silent_source_is_released_at_every_orderer_never_while_one_is_down(
    tmp_path: Path,
) -> None:
    config = OrdererConfig(build_window=0.2, startup_delay=0.0, sources=(1, 2), source_timeout=1.0)

    async def body() -> None:
        async with orderers(tmp_path, config) as servers:
            targets = [target(s) for s in servers]
            async with AsyncSourceClient(",".join(targets), linger=None) as client:
                await client.send_batch(1, np.arange(0, 6 * T, 50))  # then silent
                await client.send_batch(2, np.arange(0, 6 * T, 50))
                await client.wait_acked()
                assert await release_round(targets, connect_timeout=5) == []  # not yet
                await asyncio.sleep(1.2)
                await client.send_batch(2, np.arange(6 * T, 9 * T, 50))  # 2 is alive
                await client.wait_acked()
                released = await release_round(targets, connect_timeout=5)
                assert [r.source for r in released] == [1]
                for running in servers:
                    stats = await get_stats_async(target(running))
                    assert stats.sources[1].ended and not stats.sources[2].ended
                assert await release_round(targets, connect_timeout=5) == []  # ended: once
            # an orderer down: no round, whatever the silence
            await servers[2].stop(grace=0.5)
            await asyncio.sleep(1.2)
            with pytest.raises(ConnectionError):
                await release_round(targets, connect_timeout=1)

    run(body())
