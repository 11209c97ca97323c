"""The service (orderer/service/: server, servicer, orderer_service) in-process over loopback
gRPC: deduplication by sequence, acks only after durability, the deadline timer, live
configuration, end of run, subscriptions, restart, health, reflection, metrics, and a storage
failure."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.client import end_run_async, get_stats_async, subscribe
from orderer.service.logs import ArrivalLog
from orderer.service.server import SERVICE_NAME, RunningServer
from orderer.service.settings import configs_from_mapping
from orderer.wire import convert
from tests.service.harness import arrival_writes_stalled, run, serving, serving_channel, target

CONFIG = OrdererConfig(build_window=0.3, startup_delay=0.0, sources=(1, 2))


def _request(source: int, first: int, timestamps: list[int]) -> pb.SubmitRequest:
    batch = FragmentBatch.from_arrays(source=source, timestamp=timestamps)
    return pb.SubmitRequest(batch=convert.batch_to_pb(batch, first))


class _Stream:
    """A Submit call whose replies a background task collects, so that waiting for an ack with
    a time limit never cancels the call itself."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = pb_grpc.OrdererStub(channel).Submit()
        self.replies: asyncio.Queue[pb.SubmitReply | BaseException] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def _collect(self) -> None:
        try:
            async for reply in self.call:
                await self.replies.put(reply)
        except BaseException as error:  # the call's status, for the test to see
            await self.replies.put(error)

    async def write(self, request: pb.SubmitRequest) -> None:
        await self.call.write(request)

    async def ack(self, timeout: float = 10.0) -> tuple[int, int]:
        while True:
            reply = await asyncio.wait_for(self.replies.get(), timeout)
            if isinstance(reply, BaseException):
                raise reply
            if reply.WhichOneof("item") == "ack":
                return reply.ack.source, reply.ack.durable_sequence

    async def close(self) -> grpc.StatusCode:
        await self.call.done_writing()
        code = await self.call.code()
        await self._task
        return code

    def cancel(self) -> None:
        self.call.cancel()


async def _received(running: RunningServer, source: int) -> int:
    stats = await get_stats_async(target(running))
    entry = stats.sources.get(source)
    return 0 if entry is None else entry.received


def test_resends_are_deduplicated_by_sequence(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = _Stream(channel)
                await call.write(_request(1, 0, list(range(10))))
                assert await call.ack() == (1, 10)
                await call.write(_request(1, 0, list(range(10))))  # a resend: dropped
                assert await call.ack() == (1, 10)
                await call.write(_request(1, 5, list(range(5, 15))))  # overlap: trimmed
                assert await call.ack() == (1, 15)
                assert await _received(running, 1) == 15
                await call.write(_request(1, 20, [20]))  # a gap
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call.ack()
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert caught.value.details().startswith("first_sequence: 20 leaves a gap")
                assert await _received(running, 1) == 15
            assert running.service.next_sequence(1) == 15

    run(body())


def test_an_empty_batch_asks_for_the_durable_sequence(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (_running, channel):
            call = _Stream(channel)
            await call.write(pb.SubmitRequest(batch=pb.FragmentBatch(source=2)))
            assert await call.ack() == (2, 0)
            await call.write(_request(2, 0, [1, 2, 3]))
            assert await call.ack() == (2, 3)
            await call.write(pb.SubmitRequest(batch=pb.FragmentBatch(source=2)))
            assert await call.ack() == (2, 3)
            empty = pb.FragmentBatch(source=2, first_sequence=50)  # no fragments, no gap
            await call.write(pb.SubmitRequest(batch=empty))
            assert await call.ack() == (2, 3)
            assert await call.close() == grpc.StatusCode.OK

    run(body())


def test_acks_and_output_wait_for_the_arrival_log_to_be_durable(tmp_path: Path) -> None:
    async def body() -> None:
        config = OrdererConfig(build_window=5, startup_delay=0, sources=(1,))
        async with serving(tmp_path, config) as running:
            arrivals = running.service.arrivals
            gate = threading.Event()
            real_sync = arrivals.sync

            def slow_sync() -> None:
                gate.wait(30)
                real_sync()

            arrivals.sync = slow_sync  # type: ignore[method-assign]
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = _Stream(channel)
                await call.write(_request(1, 0, [10, 20, 30]))
                with pytest.raises(asyncio.TimeoutError):
                    await call.ack(timeout=0.5)
                # the only source sent them: the mark rule emitted them, but not durably yet
                assert running.service.ordered.next_offset == 3
                assert running.service.durable_offset == 0
                gate.set()
                assert await call.ack() == (1, 3)
                assert running.service.durable_offset == 3
                assert await call.close() == grpc.StatusCode.OK

    run(body())


def test_the_deadline_timer_emits_without_further_input(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            call = _Stream(channel)
            await call.write(_request(1, 0, [100, 200]))  # source 2 is silent
            await call.ack()
            arrived = (await get_stats_async(target(running))).now
            got = []
            async for batch in subscribe(target(running), 0, until=2):
                got.append(batch)
            assert [int(ts) for b in got for ts in b.timestamp] == [100, 200]
            # the window rule: emitted by the timer at arrival + build_window
            assert all(float(t) >= 0.3 for b in got for t in b.t)
            assert all(float(t) <= arrived + 0.3 for b in got for t in b.t)
            call.cancel()

    run(body())


def test_live_configuration_is_checked_recorded_and_recovered(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            stub = pb_grpc.OrdererStub(channel)
            config = await stub.Configure(convert.configure_request({"buildWindow": 2.5}))
            assert config.build_window == 2.5
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Configure(pb.ConfigureRequest(build_window=-1))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details().startswith("build_window:")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Configure(pb.ConfigureRequest(late_policy="keep"))
            assert caught.value.details().startswith("late_policy:")
        async with serving(tmp_path, CONFIG) as running:
            stats = await get_stats_async(target(running))
            assert stats.config.build_window == 2.5

    run(body())


def test_end_run_drains_and_subscribers_read_from_any_offset(tmp_path: Path) -> None:
    async def body() -> None:
        served = serving_channel(tmp_path, CONFIG, subscribe_max_fragments=7)
        async with served as (running, channel):
            call = _Stream(channel)
            await call.write(_request(1, 0, list(range(0, 60, 2))))
            await call.write(_request(2, 0, list(range(1, 41, 2))))
            await call.ack()
            await call.ack()
            end = await end_run_async(target(running))
            assert end == 50
            stats = await get_stats_async(target(running))
            assert stats.run_ended and stats.queued == 0
            for start in (0, 13, 49):
                offsets: list[int] = []
                async for batch in subscribe(target(running), start, until=end):
                    assert len(batch) <= 7
                    offsets += range(batch.first_seq, batch.first_seq + len(batch))
                assert offsets == list(range(start, end))
            whole = [b async for b in subscribe(target(running), 0, until=end)]
            stamps = [int(ts) for b in whole for ts in b.timestamp]
            assert stamps == sorted(stamps) == sorted([*range(0, 60, 2), *range(1, 41, 2)])
            call.cancel()

    run(body())


def test_a_restart_continues_time_sequences_and_offsets(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = _Stream(channel)
                await call.write(_request(1, 0, [1, 2, 3]))
                await call.write(_request(2, 0, [2, 3]))
                await call.ack()
                await call.ack()
                assert await call.close() == grpc.StatusCode.OK
            before = await get_stats_async(target(running))
        async with serving(tmp_path, CONFIG) as running:
            after = await get_stats_async(target(running))
            assert after.next_offset == before.next_offset == 5
            assert after.totals == before.totals
            assert running.service.next_sequence(1) == 3
            assert running.service.next_sequence(2) == 2
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = _Stream(channel)
                await call.write(_request(1, 0, [1, 2, 3, 4]))  # one new fragment
                assert await call.ack() == (1, 4)
                assert await call.close() == grpc.StatusCode.OK
            assert await _received(running, 1) == 4
            times = np.concatenate(
                [b.column("t").to_numpy() for b in running.service.arrivals.batches()]
            )
            assert bool((np.diff(times) >= 0).all()) and times[-1] > times[-2]

    run(body())


def test_health_reflection_and_metrics(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG, metrics_port=0) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                for service in ("", SERVICE_NAME):
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                    assert reply.status == health_pb2.HealthCheckResponse.SERVING
                reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
                replies = reflection.ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")])
                )
                names = [s.name async for r in replies for s in r.list_services_response.service]
                assert SERVICE_NAME in names
                call = _Stream(channel)
                await call.write(_request(1, 0, [5, 6, 7]))
                await call.ack()
                call.cancel()
            assert running.metrics_port
            # the scrape runs in another thread, as Prometheus' would
            text = (await asyncio.to_thread(running.metrics.exposition)).decode()
            assert 'evb_fragments_received_total{source="1"} 3.0' in text
            assert 'evb_queue_depth{source="2"} 0.0' in text
            assert (
                'evb_barriers_total{completeness="complete",homogeneity="homogeneous"} 0.0' in text
            )
            assert "evb_output_offset " in text

    run(body())


def test_a_storage_failure_stops_input_but_not_the_server(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:

            def broken(*args: object) -> None:
                raise OSError(5, "Input/output error")  # not cured by space: fatal

            running.service.arrivals.append_rows = broken  # type: ignore[method-assign]
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = _Stream(channel)
                await call.write(_request(1, 0, [1]))
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call.ack()
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                health = health_pb2_grpc.HealthStub(channel)
                await asyncio.wait_for(running.service.failure.wait(), 10)
                for _ in range(100):  # the watcher task sets NOT_SERVING right after
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
                    if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        break
                    await asyncio.sleep(0.01)
                assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
                assert (await get_stats_async(target(running))).next_offset == 0

    run(body())


def test_arrival_times_never_decrease(tmp_path: Path) -> None:
    """Each intake pass takes what the orderer's thread found queued at one time, strictly after
    the time of every earlier pass; the messages of one pass share it (intake.py)."""

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (_running, channel):
            call = _Stream(channel)
            for k in range(50):
                await call.write(_request(1, k, [k]))
                await call.write(pb.SubmitRequest(watermark=pb.Watermark(source=2, watermark=k)))
            assert await call.close() == grpc.StatusCode.OK
        arrivals = ArrivalLog.open(tmp_path / "arrivals")
        times = np.concatenate([b.column("t").to_numpy() for b in arrivals.batches()])
        assert len(times) == 100 and bool((np.diff(times) >= 0).all())
        assert len(np.unique(times)) > 1

    run(body())


def test_configs_from_a_custom_resource_style_mapping() -> None:
    config, service = configs_from_mapping(
        {"buildWindow": 3, "sources": [1, 2], "dataDir": "/data", "strictSources": True}
    )
    assert config.build_window == 3 and config.sources == (1, 2)
    assert service.strict_sources and str(service.data_dir) == "/data"
    with pytest.raises(ValueError, match="fsync"):
        configs_from_mapping({"fsync": "sometimes"})
    with pytest.raises(ValueError, match="buildWindw"):
        configs_from_mapping({"buildWindw": 3})


def test_a_second_server_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG):
            with pytest.raises(ValueError, match="--data-dir: is in use by another evb serve"):
                async with serving(tmp_path, CONFIG):
                    pass
        async with serving(tmp_path, CONFIG):  # released by the first one's stop
            pass

    run(body())


def test_retention_drops_old_sealed_segments_of_the_ordered_log(tmp_path: Path) -> None:
    async def body() -> None:
        served = serving_channel(
            tmp_path, OrdererConfig(startup_delay=0.0), segment_bytes=4096, retention_bytes=8192
        )
        async with served as (running, channel):
            call = _Stream(channel)
            for step in range(40):
                await call.write(_request(1, step * 50, list(range(step * 50, step * 50 + 50))))
                await call.ack()
            stats = await get_stats_async(target(running))
            assert stats.next_offset == 2000
            segments = sorted((tmp_path / "ordered").glob("*.arrow"))
            assert 1 <= len(segments) <= 4
            first = int(segments[0].stem.rsplit("-", 1)[1])
            assert first > 0
            # what is left reads on; what retention removed is refused with a clear error
            batches = [b async for b in subscribe(target(running), first, until=2000)]
            assert sum(len(b) for b in batches) == 2000 - first
            with pytest.raises(Exception, match="removed by retention"):
                async for _ in subscribe(target(running), 0, until=2000):
                    pass
            call.cancel()

    run(body())


def test_a_disk_behind_the_network_holds_the_clients_back_not_the_servers_memory(
    tmp_path: Path,
) -> None:
    """While writes lag (here: the arrival log stalls), the service stops reading Submit
    streams once ``max_unwritten`` records wait: HTTP/2 flow control then blocks the sender,
    and everything goes through once the disk catches up."""
    batches, per_batch = 200, 1000  # 100 kB messages, 20 MB in all: more than gRPC buffers
    payloads = [bytes(100)] * per_batch

    def request(k: int) -> pb.SubmitRequest:
        timestamps = list(range(k * per_batch, (k + 1) * per_batch))
        batch = FragmentBatch.from_arrays(source=1, timestamp=timestamps, payloads=payloads)
        return pb.SubmitRequest(batch=convert.batch_to_pb(batch, k * per_batch))

    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            service = running.service
            service.max_unwritten = 5000
            with arrival_writes_stalled(service) as disk:
                async with grpc.aio.insecure_channel(target(running)) as channel:
                    call = _Stream(channel)

                    async def send_all() -> None:
                        for k in range(batches):
                            await call.write(request(k))

                    sender = asyncio.create_task(send_all())
                    await asyncio.sleep(2.0)
                    taken = await _received(running, 1)
                    assert 5000 <= taken <= 5000 + 10 * per_batch  # of 200,000 sent
                    assert not sender.done()  # held back by flow control
                    disk.set()
                    await asyncio.wait_for(sender, 30)
                    assert await call.close() == grpc.StatusCode.OK
            assert await _received(running, 1) == batches * per_batch

    run(body())
