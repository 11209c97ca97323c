"""Commit metadata: opaque bytes a consumer commits with its offset (Kafka's commit metadata),
kept durably with it, returned by ``Commit`` and read without committing by ``GetCommitted``.
What ``evb forward`` resumes from when retention deleted the start of the upstream log."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from orderer import OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import (
    Committed,
    commit_async,
    delete_consumer_async,
    get_committed_async,
    get_stats_async,
)
from orderer.errors import InterfaceError
from orderer.service.consumers import ConsumerOffsets
from tests.service.harness import run, serving, serving_channel, target
from tests.service.test_commit import _send

CONFIG = OrdererConfig(startup_delay=0.0)


def test_metadata_describes_the_committed_offset(tmp_path: Path) -> None:
    """Stored with a commit that moves the offset, returned by the reply; replaced at the same
    offset only when given; ignored below the offset (offsets never move back); cleared by a
    commit that moves the offset without any."""

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            address = target(running)
            stub = pb_grpc.OrdererStub(channel)
            await _send(channel, 2)  # 100 fragments out

            async def commit(offset: int, metadata: bytes | None = None) -> pb.CommitReply:
                request = pb.CommitRequest(consumer="f", offset=offset)
                if metadata is not None:
                    request.metadata = metadata
                reply: pb.CommitReply = await stub.Commit(request)
                return reply

            reply = await commit(40, b"at 40")
            assert (reply.offset, reply.metadata, reply.known) == (40, b"at 40", True)
            assert (await commit(30, b"at 30")).metadata == b"at 40"  # below: ignored
            assert (await commit(40)).metadata == b"at 40"  # unset at the offset: kept
            assert (await commit(40, b"again")).metadata == b"again"  # set: replaced
            assert (await commit(60)).metadata == b""  # moved without any: none
            assert (await commit(70, b"\x00\xff" * 10)).metadata == b"\x00\xff" * 10
            read = await get_committed_async(address, "f")
            assert read == Committed(known=True, offset=70, metadata=b"\x00\xff" * 10)
            # the client's commit carries it too
            assert await commit_async(address, "g", 80, metadata=b"{}") == (80, 70)
            assert (await get_committed_async(address, "g")).metadata == b"{}"
        # durable: a restarted orderer returns it
        async with serving(tmp_path, CONFIG) as running:
            read = await get_committed_async(target(running), "f")
            assert read == Committed(known=True, offset=70, metadata=b"\x00\xff" * 10)
            assert await delete_consumer_async(target(running), "g") == (True, 70)
            assert await get_committed_async(target(running), "g") == Committed(
                known=False, offset=0, metadata=b""
            )
        again = ConsumerOffsets(tmp_path / "consumers.json")
        assert again.metadata("f") == b"\x00\xff" * 10 and again.metadata("g") == b""

    run(body())


def test_get_committed_reads_without_registering(tmp_path: Path) -> None:
    """A Commit would register an unknown name (holding retention for it): GetCommitted does
    not, and does not count as a commit."""

    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            address = target(running)
            read = await get_committed_async(address, "nobody")
            assert read == Committed(known=False, offset=0, metadata=b"")
            assert (await get_stats_async(address)).consumers == {}
            await commit_async(address, "spark", 0)
            before = (await get_stats_async(address)).consumers["spark"].last_commit
            assert (await get_committed_async(address, "spark")).known
            after = (await get_stats_async(address)).consumers["spark"].last_commit
            assert before == after

    run(body())


def test_metadata_above_64_kib_is_refused_naming_its_size(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            address = target(running)
            await _send(channel, 1)
            largest = bytes(range(256)) * 256
            assert await commit_async(address, "f", 10, metadata=largest) == (10, 10)
            with pytest.raises(InterfaceError, match="metadata: 65537 bytes is above the limit"):
                await commit_async(address, "f", 20, metadata=largest + b"x")
            stub = pb_grpc.OrdererStub(channel)
            too_big = pb.CommitRequest(consumer="f", offset=20, metadata=largest + b"x")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Commit(too_big)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # nothing moved
            assert await get_committed_async(address, "f") == Committed(
                known=True, offset=10, metadata=largest
            )
            with pytest.raises(InterfaceError, match="metadata: must be bytes, got str"):
                await commit_async(address, "f", 20, metadata="text")  # type: ignore[arg-type]

    run(body())


def test_older_consumer_files_read_with_no_metadata(tmp_path: Path) -> None:
    """Files of servers before metadata (offsets alone, or offset and last commit) still read;
    a corrupt metadata entry is an error naming the file."""
    path = tmp_path / "consumers.json"
    path.write_text(json.dumps({"old": 5, "newer": {"offset": 7, "last_commit": 1.5}}))
    offsets = ConsumerOffsets(path)
    assert offsets.as_dict() == {"old": 5, "newer": 7}
    assert offsets.metadata("old") == b"" and offsets.metadata("newer") == b""
    offsets.commit("newer", 9, metadata=b"state", now=2.0)
    entry = json.loads(path.read_text())["newer"]
    assert entry == {"offset": 9, "last_commit": 2.0, "metadata": "c3RhdGU="}
    assert "metadata" not in json.loads(path.read_text())["old"]
    path.write_text(json.dumps({"x": {"offset": 1, "metadata": "not base64!"}}))
    with pytest.raises(Exception, match="not a consumer offset file"):
        ConsumerOffsets(path)
