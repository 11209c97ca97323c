"""Every ``Subscribe`` reply fits a reader with gRPC's default settings: a plain generated stub
on a channel without options, whose receive limit is 4 MiB. Replies were cut at 65,536
fragments or 4 MiB of payload, and the per-fragment columns (25-33 bytes each) took them past
4 MiB: RESOURCE_EXHAUSTED. Now each is cut by its encoded size
(:func:`orderer.wire.limits.ordered_batch_bytes`, at most 3.5 MiB), whatever the payload
sizes, and the largest payload the service accepts still fits a reply of one fragment.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import EmittedBatch
from orderer.errors import ConfigError
from orderer.service.server import RunningServer
from orderer.service.settings import ServiceConfig
from orderer.wire import convert, limits
from tests.service.harness import run, serving, target

CONFIG = OrdererConfig(build_window=0.05, startup_delay=0.0, sources=(1,))
LIMIT = 4 * 1024 * 1024
"""gRPC's default receive limit: what a reader without channel options accepts."""
REQUEST_BYTES = 8 << 20
"""Payload per Submit request (the server takes up to 64 MiB)."""


async def _fill(running: RunningServer, payloads: list[bytes]) -> int:
    """Submit ``payloads`` as source 1 and end the run: everything is in the ordered log."""
    async with grpc.aio.insecure_channel(target(running)) as channel:
        call = pb_grpc.OrdererStub(channel).Submit()
        first = 0
        while first < len(payloads):
            last, size = first, 0
            while last < len(payloads) and (last == first or size < REQUEST_BYTES):
                size += len(payloads[last])
                last += 1
            batch = FragmentBatch.from_arrays(
                source=1,
                timestamp=np.arange(first, last, dtype=np.uint64),
                payloads=payloads[first:last],
            )
            await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch, first)))
            first = last
        await call.done_writing()
        async for _ in call:
            pass
        assert await call.code() == grpc.StatusCode.OK
    return await running.service.end_run()


async def _read_with_default_stub(
    running: RunningServer, total: int, *, omit_payload: bool = False
) -> list[pb.OrderedBatch]:
    """Every reply up to ``total`` fragments, read by a plain stub with gRPC's defaults."""
    replies: list[pb.OrderedBatch] = []
    async with grpc.aio.insecure_channel(target(running)) as channel:  # no options: 4 MiB
        call = pb_grpc.OrdererStub(channel).Subscribe(
            pb.SubscribeRequest(from_offset=0, omit_payload=omit_payload)
        )
        read = 0
        async for reply in call:
            assert reply.first_offset == read
            replies.append(reply)
            read += len(reply.timestamps) // 8
            if read == total:
                break
        call.cancel()
    return replies


def _check(replies: list[pb.OrderedBatch], payloads: list[bytes], *, omit: bool = False) -> None:
    """Each reply within the bound and 65,536 fragments; together, every payload in order."""
    for reply in replies:
        assert reply.ByteSize() <= LIMIT
        assert len(reply.timestamps) // 8 <= 65536
    got = [convert.emitted_from_pb(reply) for reply in replies]
    assert sum(len(batch) for batch in got) == len(payloads)
    if omit:
        assert all(not reply.payload for reply in replies)
    else:
        assert b"".join(batch.payload.tobytes() for batch in got) == b"".join(payloads)


def _payloads(kind: str) -> list[bytes]:
    rng = np.random.default_rng(13)
    if kind == "uniform 1000 B":  # old: 4,194 fragments in 4.3 MB
        sizes = [1000] * 6000
    elif kind == "small 48 B":  # old: 65,536 fragments, 3 MiB of payload, 5.3 MB in all
        sizes = [48] * 70_000
    else:  # mixed: mostly 0-200 B, some of 5 kB to 1 MiB (the default largest)
        sizes = [int(s) for s in rng.integers(0, 200, 60_000)]
        for k in rng.choice(60_000, 12, replace=False):
            sizes[k] = int(rng.choice([5000, 200_000, 1 << 20]))
        sizes[30_000:30_004] = [1 << 20] * 4  # four of 1 MiB in a row
    return [bytes([k % 251]) * size for k, size in enumerate(sizes)]


@pytest.mark.parametrize("kind", ["uniform 1000 B", "small 48 B", "mixed"])
def test_a_default_reader_reads_every_reply(kind: str, tmp_path: Path) -> None:
    payloads = _payloads(kind)

    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            total = await _fill(running, payloads)
            assert total == len(payloads)
            replies = await _read_with_default_stub(running, total)
            _check(replies, payloads)
            if kind == "mixed":  # four fragments of 1 MiB never share a reply
                assert all(len(reply.payload) < 4 << 20 for reply in replies)
            else:  # within the bound, and not cut more than it asks
                largest = max(reply.ByteSize() for reply in replies)
                assert limits.REPLY_MAX_BYTES - 2000 < largest <= limits.REPLY_MAX_BYTES

    run(body())


def test_replies_without_payload_hold_65536_fragments(tmp_path: Path) -> None:
    payloads = _payloads("small 48 B")

    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            total = await _fill(running, payloads)
            replies = await _read_with_default_stub(running, total, omit_payload=True)
            _check(replies, payloads, omit=True)
            assert len(replies[0].timestamps) // 8 == 65536  # 1.6 MB: no cut needed

    run(body())


def test_the_largest_payload_accepted_fits_a_reply_for_a_default_reader(tmp_path: Path) -> None:
    largest = limits.MAX_PAYLOAD_BYTES
    assert largest > 4_000_000
    with pytest.raises(ConfigError, match="max_payload_bytes: must be at most 4194188"):
        ServiceConfig(max_payload_bytes=largest + 1)
    payloads = [b"a" * largest, b"b" * largest, b"c"]

    async def body() -> None:
        async with serving(tmp_path, CONFIG, max_payload_bytes=largest) as running:
            total = await _fill(running, payloads)
            replies = await _read_with_default_stub(running, total)
            assert [len(reply.timestamps) // 8 for reply in replies] == [1, 1, 1]
            assert max(reply.ByteSize() for reply in replies) <= LIMIT
            _ = [convert.emitted_from_pb(reply) for reply in replies]

    run(body())


def test_the_size_bound_covers_every_encoded_reply() -> None:
    """:func:`limits.ordered_batch_bytes` is an upper bound, within 100 bytes, of what
    :func:`convert.emitted_to_pb` encodes, for any sizes, offsets and marks."""
    rng = np.random.default_rng(5)
    for n in [0, 1, 2, 7, 1000, 65536]:
        for payload in (True, False):
            sizes = rng.integers(0, 300, n) if n < 2000 else np.full(n, 3)
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64) + np.uint64(9)
            batch = EmittedBatch(
                first_seq=2**63 + 5,
                t=rng.random(n) * 1e9,
                source=rng.integers(0, 2**32, n, dtype=np.uint32),
                timestamp=rng.integers(0, 2**63, n, dtype=np.uint64),
                barrier=rng.integers(0, 2**32, n, dtype=np.uint32),
                late=rng.random(n) < 0.5,
                payload_offsets=offsets,
                payload=rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8),
            )
            message = convert.emitted_to_pb(
                batch, next_offset=2**64 - 1, high_water_mark=2**64 - 2, payload=payload
            )
            bound = limits.ordered_batch_bytes(n, int(sizes.sum()), payload=payload)
            assert bound - 100 <= message.ByteSize() <= bound, (n, payload)
