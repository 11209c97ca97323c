"""The orderer's own thread (orderer/service/orderer_thread.py, ingest.py) in a real server:
the loop stops reading Submit streams while the thread is behind, what was received before a
stop is still taken in, commands see the input received before them, and the service's
threads carry their names."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import numpy as np
import pytest

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.client import end_run_async
from orderer.service import orderer_thread
from orderer.service.ingest import Ingest
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.wire import convert
from tests.service.harness import arrival_writes_stalled, run, serving, serving_channel, target
from tests.service.test_server import _Stream

CONFIG = OrdererConfig(build_window=0.3, startup_delay=0.0, sources=(1,))
FRAGMENTS = 1000  # per message: 1000 timestamps and payloads, about 33 kB on the wire


PAYLOAD = 16  # bytes a fragment


def _message(k: int) -> pb.SubmitRequest:
    timestamps = np.arange(k * FRAGMENTS, (k + 1) * FRAGMENTS, dtype=np.uint64)
    batch = FragmentBatch.from_arrays(
        source=1, timestamp=timestamps, payloads=[bytes(PAYLOAD)] * FRAGMENTS
    )
    return pb.SubmitRequest(batch=convert.batch_to_pb(batch, k * FRAGMENTS))


def test_the_loop_stops_reading_while_the_orderer_thread_is_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 5 * len(_message(0).SerializeToString())
    monkeypatch.setattr(orderer_thread, "MAX_QUEUED_BYTES", limit)

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            ingest = running.service._ingest
            call = _Stream(channel)
            with ingest.lock:  # the orderer's thread stops at its next cycle
                writer = asyncio.create_task(_write(call, 60))
                await asyncio.sleep(1.0)
                queued = ingest._thread.queued_bytes
                size = len(_message(0).SerializeToString())
                # reading stopped once the limit was passed: one message over it at most
                assert limit < queued <= limit + size + 64
            await asyncio.wait_for(writer, 30)
            while (await call.ack()) != (1, 60 * FRAGMENTS):
                pass
            assert await call.close() == grpc.StatusCode.OK
        arrivals = ArrivalLog.open(tmp_path / "arrivals")
        assert sum(b.num_rows for b in arrivals.batches()) == 60 * FRAGMENTS

    run(body())


@pytest.mark.parametrize("bound", ["records", "payload bytes"])
def test_the_orderer_thread_takes_in_no_more_than_the_writes_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """With the arrival log's writes stalled, the orderer's thread stops taking messages in
    once ``max_unwritten`` records (or ``max_unwritten_bytes`` of their payloads) wait to be
    written (what the loop read waits as raw bytes), however much its queue holds; once the disk
    catches up, everything goes in."""
    monkeypatch.setattr(orderer_thread, "MAX_QUEUED_BYTES", 1 << 30)

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            service = running.service
            if bound == "records":
                service.max_unwritten = 5000
            else:
                service.max_unwritten_bytes = 5000 * PAYLOAD
            with arrival_writes_stalled(service):
                call = _Stream(channel)
                ingest = service._ingest
                with ingest.lock:  # all 40 received before the thread takes any
                    await _queue(call, ingest, 40)
                await asyncio.sleep(1.0)
                taken = sum(source.received for source in service.stats().sources.values())
                assert 5000 <= taken < 5000 + FRAGMENTS
            while (await call.ack()) != (1, 40 * FRAGMENTS):
                pass
            assert await call.close() == grpc.StatusCode.OK

    run(body())


async def _write(call: _Stream, messages: int) -> None:
    for k in range(messages):
        await call.write(_message(k))


async def _queue(call: _Stream, ingest: Ingest, messages: int) -> None:
    """Write ``messages`` and return once the server received them all (the orderer's thread
    held, none taken in)."""
    await _write(call, messages)
    while ingest._thread.queued_bytes < messages * len(_message(0).SerializeToString()):
        await asyncio.sleep(0.01)


def test_what_was_received_before_a_stop_is_taken_in(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            ingest = running.service._ingest
            call = _Stream(channel)
            with ingest.lock:
                await _queue(call, ingest, 5)
                running.service.begin_shutdown()
            # the five are taken in and acknowledged, then the stream ends UNAVAILABLE
            while (await call.ack()) != (1, 5 * FRAGMENTS):
                pass
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await call.ack()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        arrivals = ArrivalLog.open(tmp_path / "arrivals")
        assert sum(b.num_rows for b in arrivals.batches()) == 5 * FRAGMENTS

    run(body())


def test_a_command_sees_the_input_received_before_it(tmp_path: Path) -> None:
    """An end of run queued behind messages the orderer's thread has not taken yet drains
    them: the run's output holds every fragment received before it."""

    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (running, channel):
            ingest = running.service._ingest
            call = _Stream(channel)
            with ingest.lock:
                await _queue(call, ingest, 3)
                ended = asyncio.create_task(end_run_async(target(running)))
                await asyncio.sleep(0.2)  # the end of run is queued behind the three
                assert not ended.done()
            assert await asyncio.wait_for(ended, 30) == 3 * FRAGMENTS
            assert await call.close() == grpc.StatusCode.OK
        ordered = OrderedLog.open(tmp_path / "ordered")
        assert ordered.next_offset == 3 * FRAGMENTS

    run(body())


def test_the_service_threads_carry_their_names(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving_channel(tmp_path, CONFIG) as (_running, channel):
            call = _Stream(channel)
            await call.write(_message(0))
            assert await call.ack() == (1, FRAGMENTS)
            names = set()
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as comm:
                    names.add(comm.read().strip())
            assert {"evb-orderer", "evb-arrival-log", "evb-ordered-log"} <= names
            assert await call.close() == grpc.StatusCode.OK

    run(body())


def test_a_stopped_server_leaves_no_thread_behind(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(tmp_path, CONFIG) as running:
            thread = running.service._ingest._thread._thread
            assert thread.is_alive()
        assert not thread.is_alive()

    run(body())
