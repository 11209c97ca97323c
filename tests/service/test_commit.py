"""Consumer offsets (``Commit``) and the ordered log's retention: output a known consumer has not
committed is never deleted; commits are durable, only move forward and are checked. Also the
``omit_payload`` subscription that the Spark source plans its reads with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.client import commit_async, delete_consumer_async, get_stats_async, subscribe
from orderer.service.consumers import ConsumerOffsets
from orderer.wire import convert
from tests.service.harness import run, serving, serving_channel, target
from tests.service.test_server import _request, _Stream


def _segments(directory: Path) -> list[int]:
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in (directory / "ordered").glob("*.arrow"))


async def _send(channel, n_steps: int, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    call = _Stream(channel)
    for step in range(start, start + n_steps):
        await call.write(_request(1, step * 50, list(range(step * 50, step * 50 + 50))))
        await call.ack()
    call.cancel()


async def _committed(address: str) -> dict[str, int]:
    """Each consumer's committed offset, as ``GetStats`` shows it."""
    consumers = (await get_stats_async(address)).consumers
    return {name: entry.committed for name, entry in consumers.items()}


def _small_segments(tmp_path: Path) -> Any:
    """A served orderer whose ordered log seals a segment every 4 KiB and keeps 8 KiB: what
    retention drops shows after a few hundred fragments."""
    return serving_channel(
        tmp_path, OrdererConfig(startup_delay=0.0), segment_bytes=4096, retention_bytes=8192
    )


def test_retention_spares_output_a_consumer_has_not_committed(tmp_path: Path) -> None:
    async def body() -> None:
        async with _small_segments(tmp_path) as (running, channel):
            address = target(running)
            # the consumer registers at 0 and commits 300: nothing from 300 on may go
            assert await commit_async(address, "spark", 0) == (0, 0)
            await _send(channel, 20)
            assert await commit_async(address, "spark", 300) == (300, 300)
            await _send(channel, 20, start=20)
            assert (await get_stats_async(address)).next_offset == 2000
            first = _segments(tmp_path)[0]
            assert 0 < first <= 300  # older segments went, the uncommitted output stayed
            batches = [b async for b in subscribe(address, 300, until=2000)]
            assert sum(len(b) for b in batches) == 1700
            # the consumer moves on: retention catches up at the next sealed segment
            assert await commit_async(address, "spark", 2000) == (2000, 2000)
            await _send(channel, 10, start=40)
            assert _segments(tmp_path)[0] > 300

    run(body())


def test_deleting_a_consumer_releases_its_retention_durably(tmp_path: Path) -> None:
    """A consumer gone for good held the log forever: deleting it drops the segments it alone
    held at once (no new input needed), and the deletion survives a restart."""

    async def body() -> None:
        async with _small_segments(tmp_path) as (running, channel):
            address = target(running)
            assert await commit_async(address, "spark", 0) == (0, 0)
            assert await commit_async(address, "gone", 0) == (0, 0)
            await _send(channel, 20)
            assert await commit_async(address, "spark", 1000) == (1000, 0)
            await _send(channel, 20, start=20)
            assert _segments(tmp_path)[0] == 0  # "gone" holds everything
            assert await delete_consumer_async(address, "gone") == (True, 1000)
            first = _segments(tmp_path)[0]
            assert 0 < first <= 1000  # released up to what "spark" still needs
            assert await delete_consumer_async(address, "gone") == (False, 1000)
            assert await _committed(address) == {"spark": 1000}
        async with serving(tmp_path, OrdererConfig(startup_delay=0.0)) as running:
            assert await _committed(target(running)) == {"spark": 1000}
            assert await delete_consumer_async(target(running), "spark") == (True, None)
        assert ConsumerOffsets(tmp_path / "consumers.json").as_dict() == {}

    run(body())


def test_commits_are_durable_forward_only_and_checked(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, OrdererConfig(startup_delay=0.0)) as (running, ch):
            address = target(running)
            await _send(ch, 2)
            assert await commit_async(address, "a", 80) == (80, 80)
            assert await commit_async(address, "b", 20) == (20, 20)
            assert await commit_async(address, "a", 10) == (80, 20)  # never back
            with pytest.raises(Exception, match="offset: 101 is beyond the durable output"):
                await commit_async(address, "a", 101)
            with pytest.raises(Exception, match="consumer: '' must be 1 to 253"):
                await commit_async(address, "", 5)
            # GetStats shows every consumer's committed offset (the operator's consumer lag)
            assert await _committed(address) == {"a": 80, "b": 20}
        # a restarted orderer knows its consumers
        async with serving(tmp_path, OrdererConfig(startup_delay=0.0)) as running:
            assert await _committed(target(running)) == {"a": 80, "b": 20}
            assert await commit_async(target(running), "b", 30) == (30, 30)
        assert ConsumerOffsets(tmp_path / "consumers.json").as_dict() == {"a": 80, "b": 30}

    run(body())


def test_subscribe_without_payloads(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, OrdererConfig(startup_delay=0.0)) as (running, ch):
            call = _Stream(ch)
            batch = FragmentBatch.from_arrays(
                source=1, timestamp=[1, 2, 3], payloads=[b"aa", b"bbb", b"c"]
            )
            await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch, 0)))
            await call.ack()
            await call.write(pb.SubmitRequest(end_of_source=pb.EndOfSource(source=1)))
            call.cancel()
            full = [b async for b in subscribe(target(running), 0, until=3)]
            bare = [b async for b in subscribe(target(running), 0, until=3, payload=False)]
            assert [bytes(b.payload) for b in full] == [b"aabbbc"]
            assert bare[0].timestamp.tolist() == [1, 2, 3] and len(bare[0].payload) == 0

    run(body())
