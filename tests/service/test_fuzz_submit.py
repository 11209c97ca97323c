"""Hypothesis fuzzers over the Submit decoder: arbitrary bytes parsed as a ``SubmitRequest``,
structured-but-wrong ``FragmentBatch`` messages, and mutations of good ones. The decoder
(:func:`orderer.wire.convert.batch_from_pb` and the watermark/end conversions) either returns
a batch that holds together or raises ``InterfaceError`` naming a field of the message: never
another exception, never a hang. Then the same messages go to a real server behind a good batch:
the stream ends OK or INVALID_ARGUMENT naming the field, what the stream sent before stays
accepted, and the server keeps serving.

``EVB_SOAK=1`` (``make soak``) runs twenty times as many inputs, not derandomized.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from orderer import OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.errors import InterfaceError
from orderer.service.server import RunningServer, start_server
from orderer.service.settings import ServiceConfig
from orderer.wire import convert, submit
from tests.core.test_submit_wire import damaged
from tests.soak import fuzz_settings

LIMITS = convert.BatchLimits(max_payload_bytes=64, sources=None)
STRICT = convert.BatchLimits(max_payload_bytes=64, sources=frozenset({1, 2, 3}))
FIELDS = (
    "timestamps",
    "sources",
    "source",
    "barrier_types",
    "payload_offsets",
    "payload",
    "first_sequence",
    "watermark",
    "end_of_source",
    "item",
    "SubmitRequest",
)
"""Every message of an ``InterfaceError`` starts with one of these (``SubmitRequest``: wire
data that is not a valid protobuf message)."""
SECONDS = 5
"""No single input may take longer (a hang is a failure, not a stuck test run)."""


class _Alarm:
    """SIGALRM after :data:`SECONDS`: a hang fails the example instead of the whole run."""

    def __enter__(self) -> None:
        def fire(*_: Any) -> None:
            raise TimeoutError(f"one input took more than {SECONDS} s")

        signal.signal(signal.SIGALRM, fire)
        signal.alarm(SECONDS)

    def __exit__(self, *_: object) -> None:
        signal.alarm(0)


def _coherent(batch: Any) -> None:
    """A returned batch holds together (what the orderer may rely on)."""
    n = len(batch.timestamp)
    assert len(batch.source) == len(batch.barrier) == n
    assert len(batch.payload_offsets) == n + 1
    offsets = batch.payload_offsets.astype(np.int64)
    assert offsets[0] == 0 and (np.diff(offsets) >= 0).all()
    assert int(offsets[-1]) == len(batch.payload)
    assert not (batch.timestamp == np.uint64(2**64 - 1)).any()


def decode(message: pb.SubmitRequest, limits: convert.BatchLimits) -> str:
    """What the server's Submit does with one request: the item's kind if accepted."""
    item = message.WhichOneof("item")
    if item == "batch":
        incoming = convert.batch_from_pb(message.batch, limits)
        _coherent(incoming.batch)
        assert len(incoming.batch.payload) <= len(message.batch.payload)
        lengths = np.diff(incoming.batch.payload_offsets.astype(np.int64))
        assert (lengths <= limits.max_payload_bytes).all()
        if limits.sources is not None:
            assert set(incoming.batch.source.tolist()) <= limits.sources
    elif item == "watermark":
        convert.watermark_from_pb(message.watermark, limits)
    elif item == "end_of_source":
        convert.end_of_source_from_pb(message.end_of_source, limits)
    else:
        raise InterfaceError("item: an empty SubmitRequest")
    return item


def _check(message: pb.SubmitRequest, limits: convert.BatchLimits) -> str:
    with _Alarm():
        try:
            return decode(message, limits)
        except InterfaceError as error:
            assert str(error).startswith(FIELDS), str(error)
            return "refused"


# ------------------------------------------------------------------------------ strategies

_u64 = st.integers(0, 2**64 - 1)
_edge_u64 = st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 2, 2**64 - 1])
_packed = st.one_of(
    st.binary(max_size=64),
    st.lists(st.one_of(_u64, _edge_u64), max_size=8).map(
        lambda v: np.asarray(v, dtype="<u8").tobytes()
    ),
    st.lists(st.integers(0, 2**32 - 1), max_size=8).map(
        lambda v: np.asarray(v, dtype="<u4").tobytes()
    ),
)


@st.composite
def _offsets(draw: st.DrawFn) -> bytes:
    """Plausible payload offsets (cumulative lengths), sometimes bent."""
    lengths = draw(st.lists(st.integers(0, 80), max_size=8))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    bend = draw(st.sampled_from(["none", "start", "backwards", "end", "raw"]))
    if bend == "start":
        offsets[0] = draw(st.integers(1, 5))
    elif bend == "backwards" and len(offsets) > 2:
        offsets[1] = offsets[-1] + 1
    elif bend == "end":
        offsets[-1] += draw(st.integers(-3, 3))
    if bend == "raw":
        return draw(st.binary(max_size=72))
    return np.asarray(np.maximum(offsets, 0), dtype="<u8").tobytes()


_batches = st.builds(
    pb.FragmentBatch,
    source=st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 2, 3]),
    first_sequence=_u64 | _edge_u64,
    timestamps=_packed,
    sources=st.just(b"") | _packed,
    barrier_types=st.just(b"") | _packed,
    payload=st.binary(max_size=200),
    payload_offsets=st.just(b"") | _offsets(),
)
_requests = st.one_of(
    _batches.map(lambda b: pb.SubmitRequest(batch=b)),
    st.builds(pb.Watermark, source=st.integers(0, 2**32 - 1), watermark=_u64).map(
        lambda w: pb.SubmitRequest(watermark=w)
    ),
    st.builds(pb.EndOfSource, source=st.integers(0, 2**32 - 1)).map(
        lambda e: pb.SubmitRequest(end_of_source=e)
    ),
    st.just(pb.SubmitRequest()),
)


def _good(source: int, first: int, n: int, payload: bool) -> pb.FragmentBatch:
    timestamps = np.arange(1000, 1000 + n, dtype=np.uint64)
    payloads = [bytes([k % 256]) * (k % 5) for k in range(n)] if payload else None
    from orderer import FragmentBatch

    batch = FragmentBatch.from_arrays(source=source, timestamp=timestamps, payloads=payloads)
    return convert.batch_to_pb(batch, first_sequence=first)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A good request's bytes with a few bytes flipped, cut or inserted."""
    request = pb.SubmitRequest(
        batch=_good(draw(st.integers(1, 3)), draw(st.integers(0, 9)), draw(st.integers(0, 6)), True)
    )
    return damaged(draw, request.SerializeToString(), edits=4, longest=4)


# ------------------------------------------------------------------------------ the decoder

TRIED: dict[str, int] = {}
"""Inputs each fuzzer tried (printed by the last test of the module, for the report)."""


def _tried(name: str) -> None:
    TRIED[name] = TRIED.get(name, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    """The number of inputs each fuzzer tried, after the module (``pytest -s`` shows it)."""
    yield
    print(f"\nSubmit fuzzers, inputs tried: {TRIED}")


@fuzz_settings(1500, HealthCheck.function_scoped_fixture)
@given(data=st.binary(max_size=300) | _mutated())
def test_arbitrary_bytes_as_a_submit_request(data: bytes) -> None:
    _tried("bytes")
    for limits in (LIMITS, STRICT):  # what the service's Submit does with the raw bytes
        with _Alarm():
            try:
                item = submit.decode_submit(data, limits)
            except InterfaceError as error:
                assert str(error).startswith(FIELDS), str(error)
            else:
                if isinstance(item, submit.IncomingBatch):
                    _coherent(item.batch)
    try:
        message = pb.SubmitRequest.FromString(data)
    except DecodeError:
        return
    for limits in (LIMITS, STRICT):
        _check(message, limits)


@fuzz_settings(2000, HealthCheck.function_scoped_fixture)
@given(message=_requests)
def test_structured_but_wrong_requests(message: pb.SubmitRequest) -> None:
    _tried("structured")
    for limits in (LIMITS, STRICT):
        outcome = _check(message, limits)
        assert outcome in ("refused", "batch", "watermark", "end_of_source")
    if message.WhichOneof("item") is None:
        assert _check(message, LIMITS) == "refused"


def test_good_batches_are_accepted_so_the_fuzzers_can_tell() -> None:
    """The decoder is not refusing everything: good batches pass, with and without payloads."""
    for payload in (False, True):
        message = pb.SubmitRequest(batch=_good(2, 5, 7, payload))
        assert _check(message, STRICT) == "batch"


# ------------------------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Callable[[], int]]]:
    """A real server on its own event loop thread for the whole module."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    data_dir = tmp_path_factory.mktemp("fuzz-server")
    settings = ServiceConfig(
        data_dir=data_dir, listen="127.0.0.1:0", max_payload_bytes=64, fsync="never"
    )
    config = OrdererConfig(build_window=0.05, startup_delay=0.0)
    running: RunningServer = asyncio.run_coroutine_threadsafe(
        start_server(config, settings), loop
    ).result(60)

    def received() -> int:
        async def count() -> int:
            return int(running.service.orderer.counters()["totals"]["received"])

        return asyncio.run_coroutine_threadsafe(count(), loop).result(30)

    yield f"127.0.0.1:{running.port}", received
    asyncio.run_coroutine_threadsafe(running.stop(grace=1.0), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


SENT = {"good": 0, "sequence": 0}


@fuzz_settings(250, HealthCheck.function_scoped_fixture)
@given(message=_requests)
def test_the_server_survives_bad_requests_and_keeps_what_came_before(
    server: tuple[str, Callable[[], int]], message: pb.SubmitRequest
) -> None:
    _tried("server")
    target, received = server
    # source 100: only the good batches use it, with consecutive sequence numbers
    good = _good(100, SENT["sequence"], 5, True)
    if message.WhichOneof("item") == "batch" and message.batch.source == 100:
        message.batch.source = 101
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.OrdererStub(channel)
        call = stub.Submit(iter([pb.SubmitRequest(batch=good), message]), timeout=30)
        acked = 0
        try:
            for reply in call:
                if reply.WhichOneof("item") == "ack" and reply.ack.source == 100:
                    acked = max(acked, reply.ack.durable_sequence)
            code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            code = error.code()  # type: ignore[attr-defined]
            assert code == grpc.StatusCode.INVALID_ARGUMENT, error
            assert error.details().startswith(FIELDS), error.details()  # type: ignore[attr-defined]
    SENT["sequence"] += 5
    SENT["good"] += 5
    if code == grpc.StatusCode.OK:
        assert acked == SENT["sequence"]
    # the good batch before the bad message is accepted either way
    assert received() >= SENT["good"]
    health = grpc.insecure_channel(target)
    with health:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        reply = health_pb2_grpc.HealthStub(health).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


MALFORMED = {
    "cut short": pb.SubmitRequest(batch=_good(101, 0, 3, True)).SerializeToString()[:-4],
    "wire type 7": b"\x0f\x00",
    "varint of 11 bytes": b"\x10" + b"\xff" * 10 + b"\x01",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_wire_data_that_is_not_protobuf_ends_the_stream_invalid_argument(
    server: tuple[str, Callable[[], int]], name: str
) -> None:
    """A message the protobuf runtime cannot parse is the client's mistake: INVALID_ARGUMENT
    naming it, after the good batch before it was taken in (gRPC's own deserializer ended such
    a call INTERNAL, "Exception deserializing request!")."""
    target, received = server
    good = _good(100, SENT["sequence"], 5, True)
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            "/evb.v1.Orderer/Submit", response_deserializer=pb.SubmitReply.FromString
        )(iter([pb.SubmitRequest(batch=good).SerializeToString(), MALFORMED[name]]), timeout=30)
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
    SENT["sequence"] += 5
    SENT["good"] += 5
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    details = raised.value.details()  # type: ignore[attr-defined]
    assert details.startswith("SubmitRequest: not a valid protobuf message"), details
    assert received() >= SENT["good"]
