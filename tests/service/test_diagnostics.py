"""What ``GetStats`` shows a shift crew, over a real gRPC server on loopback: the barrier log
(offsets matching the ordered output, rebuilt after a restart, each barrier once), the Submit
streams as connections, each consumer's last commit and lag in seconds; and ``SetSourceState``
(a pending barrier released by marking its holdout dead, durable across a restart, strict
sources refused)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from orderer import EmittedBatch, FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import commit_async, subscribe
from orderer.service.consumers import ConsumerOffsets
from orderer.service.server import RunningServer
from orderer.stats import BarrierRecord, Stats
from orderer.wire import convert
from tests.service.harness import run, serving_channel, target
from tests.service.test_server import _Stream

CONFIG = OrdererConfig(
    build_window=0.05, startup_delay=0.0, barrier_timeout=600.0, source_timeout=None, sources=(1, 2)
)


def _request(source: int, first: int, timestamps: list[int], barriers: list[int]) -> Any:
    batch = FragmentBatch.from_arrays(source=source, timestamp=timestamps, barrier=barriers)
    return pb.SubmitRequest(batch=convert.batch_to_pb(batch, first))


async def _stats(channel: grpc.aio.Channel, limit: int = 0) -> Stats:
    reply = await pb_grpc.OrdererStub(channel).GetStats(
        pb.GetStatsRequest(barrier_log_limit=limit), timeout=30
    )
    return convert.stats_from_pb(reply)


async def _set_source_state(channel: grpc.aio.Channel, source: int, dead: bool) -> Any:
    request = pb.SourceStateRequest(source=source, dead=dead)
    return await pb_grpc.OrdererStub(channel).SetSourceState(request, timeout=30)


async def _until(channel: grpc.aio.Channel, done: Any, what: str) -> Stats:
    """GetStats until ``done(stats)`` holds (the orderer flushes on its own timer)."""
    deadline = time.monotonic() + 20
    while True:
        stats = await _stats(channel)
        if done(stats):
            return stats
        assert time.monotonic() < deadline, f"{what}: {json.dumps(stats.to_json())[:2000]}"
        await asyncio.sleep(0.02)


async def _output(running: RunningServer, until: int) -> EmittedBatch:
    batches = [b async for b in subscribe(target(running), 0, until=until)]
    return EmittedBatch.concat(batches)


def _barrier_fragments(output: EmittedBatch) -> dict[int, tuple[int, int]]:
    """Offset -> (source, barrier type) of every barrier fragment in the ordered output."""
    where = np.flatnonzero(output.barrier)
    return {
        output.first_seq + int(k): (int(output.source[k]), int(output.barrier[k])) for k in where
    }


def _listed(barrier_log: Sequence[BarrierRecord]) -> dict[int, tuple[int, int]]:
    """The same, from the barrier log: each resolution emits its barriers in source order."""
    listed = {}
    for entry in barrier_log:
        for k, (source, kind) in enumerate(sorted(entry.types.items())):
            listed[entry.offset + k] = (source, kind)
    return listed


async def _acked(stream: _Stream, source: int, sequence: int) -> None:
    """Until ``stream`` has ``source`` acknowledged up to ``sequence`` (acks may come in parts)."""
    while await stream.ack() != (source, sequence):
        pass


async def _three_barriers(channel: grpc.aio.Channel) -> None:
    """Complete and homogeneous (type 1 from both), complete and heterogeneous (2 and 3), then
    one from source 1 alone that waits for source 2 (barrier_timeout is ten minutes)."""
    one, two = _Stream(channel), _Stream(channel)
    await one.write(_request(1, 0, [10, 20, 30], [0, 1, 0]))
    await two.write(_request(2, 0, [15, 20], [0, 1]))
    await one.write(_request(1, 3, [40], [2]))
    await two.write(_request(2, 2, [40], [3]))
    await one.write(_request(1, 4, [50], [2]))
    await _acked(one, 1, 5)
    await _acked(two, 2, 3)
    one.cancel()
    two.cancel()


def test_set_source_state_releases_a_barrier_and_the_barrier_log_matches_the_output(
    tmp_path: Path,
) -> None:
    """The barrier log lists each resolved barrier at the offset of its first fragment in the
    ordered output, with the type each source sent; marking the holdout dead resolves the
    pending barrier at once (incomplete, the source missing), durably: a restarted service
    replays the mark and lists the very same barriers, none twice."""

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            await _three_barriers(channel)
            stats = await _until(channel, lambda s: len(s.barrier_log) == 2, "two barriers")
            assert stats.barriers.by_type == {1: 2, 2: 1, 3: 1}
            await asyncio.sleep(0.2)  # the third waits for source 2 (no timeout soon)
            assert len((await _stats(channel)).barrier_log) == 2

            reply = await _set_source_state(channel, 2, True)
            assert (reply.was_known, reply.dead) == (True, True)
            stats = await _stats(channel)
            first, second, third = stats.barrier_log
            assert (first.complete, first.homogeneous, first.missing) == (True, True, ())
            assert (second.complete, second.homogeneous) == (True, False)
            assert second.types == {1: 2, 2: 3}
            assert (third.complete, third.types, third.missing) == (False, {1: 2}, (2,))
            assert stats.sources[2].marked_dead and stats.sources[2].dead
            assert stats.barriers.by_type == {1: 2, 2: 2, 3: 1}
            assert [b.offset for b in (await _stats(channel, limit=2)).barrier_log] == [
                second.offset,
                third.offset,
            ]

            end = stats.next_offset
            output = await _output(running, end)
            assert _barrier_fragments(output) == _listed(stats.barrier_log)
            assert [float(output.t[b.offset]) for b in stats.barrier_log] == [
                b.t for b in stats.barrier_log
            ]
            before = stats.barrier_log
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            stats = await _stats(channel)
            assert stats.barrier_log == before  # the mark replayed; each barrier once
            assert stats.barriers.by_type == {1: 2, 2: 2, 3: 1}
            assert stats.sources[2].marked_dead
            reply = await _set_source_state(channel, 2, False)
            assert (reply.was_known, reply.dead) == (True, False)

    run(body())


def test_source_state_of_unknown_and_undeclared_sources(tmp_path: Path) -> None:
    """A source the orderer does not know is INVALID_ARGUMENT naming the known ones (a typo
    would otherwise add a silent source holding every window); with strict sources, a source
    outside the declared set is refused naming it. Nothing is recorded either way."""

    async def body() -> None:
        async with serving_channel(tmp_path / "open", CONFIG) as (_, channel):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _set_source_state(channel, 7, True)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            known = ", ".join(map(str, CONFIG.sources)) or "none yet"
            assert f"source: 7 is not known to this orderer (known: {known})" in (
                refused.value.details() or ""
            )
            assert 7 not in (await _stats(channel)).sources
        strict = serving_channel(tmp_path / "strict", CONFIG, strict_sources=True)
        async with strict as (_, channel):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _set_source_state(channel, 7, True)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "source: 7 is not a declared source" in (refused.value.details() or "")
            assert 7 not in (await _stats(channel)).sources
            reply = await _set_source_state(channel, 1, True)
            assert (reply.was_known, reply.dead) == (True, True)

    run(body())


def test_connections_are_listed_while_a_stream_is_open(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (_, channel):
            opened = time.time()
            stream = _Stream(channel)
            request = _request(1, 0, [10, 11, 12], [0, 0, 0])
            await stream.write(request)
            assert await stream.ack() == (1, 3)
            (connection,) = (await _stats(channel)).connections
            assert connection.peer.startswith("ipv4:127.0.0.1:")
            assert connection.sources == (1,) and connection.acked == {1: 3}
            assert (connection.messages, connection.bytes) == (1, request.ByteSize())
            assert opened - 1 <= connection.since <= time.time()
            other = _Stream(channel)
            await other.write(_request(2, 0, [5], [0]))
            await other.ack()
            listed = (await _stats(channel)).connections
            assert sorted(c.sources for c in listed) == [(1,), (2,)]
            assert await stream.close() == grpc.StatusCode.OK
            other.cancel()
            await _until(channel, lambda s: s.connections == (), "the streams ended")

    run(body())


def test_consumers_show_last_commit_and_lag_in_seconds(tmp_path: Path) -> None:
    """``lag_seconds`` is the orderer time now minus the emit time of the oldest fragment the
    consumer has not committed (0 once it has everything); ``last_commit`` is the Unix time of
    its last commit, kept across a restart."""

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            stream = _Stream(channel)
            for step in range(4):
                timestamps = list(range(step * 5, step * 5 + 5))
                await stream.write(_request(1, step * 5, timestamps, [0] * 5))
                await stream.ack()
                await asyncio.sleep(0.05)
            await stream.write(_request(2, 0, [100], [0]))  # releases source 1's data
            await stream.ack()
            # all 21 out: one emitted after the commit would be lag of "done"
            stats = await _until(channel, lambda s: s.next_offset >= 21, "output")
            output = await _output(running, stats.next_offset)
            before = time.time()
            await commit_async(target(running), "slow", 7)
            await commit_async(target(running), "done", stats.next_offset)
            stats = await _stats(channel)
            slow, done = stats.consumers["slow"], stats.consumers["done"]
            assert before <= slow.last_commit <= time.time()
            assert slow.committed == 7 and slow.lag == stats.next_offset - 7
            assert slow.lag_seconds == pytest.approx(stats.now - float(output.t[7]))
            assert slow.lag_seconds > 0
            assert (done.lag, done.lag_seconds) == (0, 0.0)
            stream.cancel()
            committed = slow.last_commit
        async with serving_channel(tmp_path, CONFIG) as (_, channel):
            slow = (await _stats(channel)).consumers["slow"]
            assert slow.last_commit == committed and slow.lag_seconds > 0

    run(body())


def test_consumer_file_of_offsets_only_still_reads(tmp_path: Path) -> None:
    """A consumers.json written before last commit times were kept: offsets, no last commit;
    the next commit writes both."""
    path = tmp_path / "consumers.json"
    path.write_text(json.dumps({"spark": 40}), encoding="utf-8")
    offsets = ConsumerOffsets(path)
    assert offsets.as_dict() == {"spark": 40} and offsets.last_commit("spark") is None
    offsets.commit("spark", 50, now=123.0)
    again = ConsumerOffsets(path)
    assert again.as_dict() == {"spark": 50} and again.last_commit("spark") == 123.0
