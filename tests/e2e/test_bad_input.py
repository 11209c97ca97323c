"""Bad input against a real ``evb serve`` (strict sources, a payload limit): the stream is ended
with INVALID_ARGUMENT naming the field, what the stream sent before stays accepted, another
client keeps being served, and the server never goes down."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orderer import FragmentBatch
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import SourceClient, get_stats
from orderer.wire import convert
from tests.e2e.conftest import ServerProcess


def _u64(*values: int) -> bytes:
    return np.asarray(values, dtype="<u8").tobytes()


def _u32(*values: int) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "logs").mkdir()
    process = ServerProcess(
        root / "data",
        root / "logs",
        "--strict-sources",
        "--sources", "1,2,3",
        "--max-payload-bytes", "64",
        "--build-window", "0.2",
        "--startup-delay", "0",
    ).start()  # fmt: skip
    yield process
    assert process.alive(), process.log_text()
    assert process.stop() == 0


def _bad(sequence: int) -> dict[str, tuple[pb.SubmitRequest, str]]:
    """Each bad request (for a stream whose source 1 continues at ``sequence``) and the field
    the refusal must name."""

    def batch(**fields: object) -> pb.SubmitRequest:
        base: dict[str, object] = {
            "source": 1,
            "first_sequence": sequence,
            "timestamps": _u64(1, 2, 3, 4, 5),
        }
        base.update(fields)
        return pb.SubmitRequest(batch=pb.FragmentBatch(**base))  # type: ignore[arg-type]

    return {
        "malformed batch": (batch(timestamps=b"\x01" * 13), "timestamps"),
        "arrays of different lengths": (batch(barrier_types=_u32(0, 0, 1, 0)), "barrier_types"),
        "payload offsets of different length": (
            batch(payload=b"abc", payload_offsets=_u64(0, 3)),
            "payload_offsets",
        ),
        "payload above the limit": (
            batch(payload=b"x" * 100, payload_offsets=_u64(0, 0, 0, 100, 100, 100)),
            "payload",
        ),
        "unknown source": (batch(source=7), "source"),
        "unknown source in a multi-source batch": (
            batch(source=0, first_sequence=0, sources=_u32(1, 2, 9, 1, 2)),
            "sources",
        ),
        "timestamp all ones": (batch(timestamps=_u64(1, 2, 2**64 - 1)), "timestamps"),
        "first_sequence with several sources": (
            batch(source=0, sources=_u32(1, 2, 1, 2, 1)),
            "first_sequence",
        ),
        "a gap in the sequence": (batch(first_sequence=sequence + 100), "first_sequence"),
        "watermark of an unknown source": (
            pb.SubmitRequest(watermark=pb.Watermark(source=8, watermark=1)),
            "watermark.source",
        ),
        "an empty request": (pb.SubmitRequest(), "item"),
    }


CASES = sorted(_bad(0))


async def _one_stream(target: str, case: str) -> tuple[int, grpc.StatusCode, str]:
    """hello, one good batch (acked), then the bad request: how many good fragments were
    acked, and the status the stream ended with."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.OrdererStub(channel).Submit()
        await call.write(pb.SubmitRequest(batch=pb.FragmentBatch(source=1)))
        sequence = await _ack(call)
        good = FragmentBatch.from_arrays(source=1, timestamp=np.arange(5) + 1000 * sequence)
        await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(good, sequence)))
        acked = await _ack(call) - sequence
        request, _ = _bad(sequence + 5)[case]
        await call.write(request)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _ack(call)
        return acked, caught.value.code(), caught.value.details() or ""


async def _ack(call: grpc.aio.StreamStreamCall) -> int:
    """The next ack for source 1 (a refusal raises ``AioRpcError``)."""
    while True:
        reply = await call.read()
        if reply is grpc.aio.EOF:
            pytest.fail(f"the stream ended with {await call.code()} instead")
        if reply.WhichOneof("item") == "ack" and reply.ack.source == 1:
            return int(reply.ack.durable_sequence)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_ends_only_that_stream_naming_the_field(server: ServerProcess, case: str) -> None:
    known = get_stats(server.target).sources.get(1)
    before = 0 if known is None else known.received
    other_done = threading.Event()
    other_errors: list[BaseException] = []

    def other_client() -> None:  # another data source, served all along
        try:
            with SourceClient(server.target, sources=[2], batch_size=50) as client:
                client.send_batch(2, np.arange(10**9, 10**9 + 200))
                client.wait_acked(timeout=60)
        except BaseException as error:
            other_errors.append(error)
        finally:
            other_done.set()

    thread = threading.Thread(target=other_client)
    thread.start()
    acked, code, details = asyncio.run(asyncio.wait_for(_one_stream(server.target, case), 60))
    thread.join(120)
    assert other_done.is_set() and not other_errors, other_errors
    assert acked == 5
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    _, field = _bad(0)[case]
    assert details.startswith(f"{field}:"), details
    stats = get_stats(server.target)
    assert stats.sources[1].received == before + 5  # the good part stays accepted
    assert server.alive()


def test_bytes_that_are_no_message_at_all(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.target) as channel:
        submit = channel.stream_stream("/evb.v1.Orderer/Submit")
        with pytest.raises(grpc.RpcError) as caught:
            list(submit(iter([b"\xff\xff\xff\xff"]), timeout=30))
        assert caught.value.code() != grpc.StatusCode.OK  # type: ignore[attr-defined]
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="evb.v1.Orderer"), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert server.alive()


def test_the_strict_server_still_takes_declared_sources(server: ServerProcess) -> None:
    with SourceClient(server.target, sources=[3]) as client:
        client.send(3, 42, payload=b"y" * 64)  # exactly at the limit
    assert get_stats(server.target).sources[3].received >= 1
