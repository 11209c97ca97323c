"""The run table of ``GetStats`` (``Stats.runs``): every run the server has served with the
output offsets it holds, kept from BeginRun and EndRun and rebuilt by recovery from the arrival
log, so a restarted server gives the same table (docs/ordering.md, "Runs one after another")."""

from __future__ import annotations

from pathlib import Path

import grpc

from orderer import OrdererConfig
from orderer.client import begin_run_async, end_run_async, get_stats_async
from orderer.stats import RunSpan
from tests.service.harness import run, serving_channel, target
from tests.service.test_server import _request, _Stream


async def _send(channel: grpc.aio.Channel, first: int, timestamps: list[int]) -> None:
    call = _Stream(channel)
    await call.write(_request(1, first, timestamps))
    await call.ack()
    call.cancel()


async def _runs(address: str) -> list[RunSpan]:
    return list((await get_stats_async(address)).runs)


def test_two_runs_and_a_restart_give_the_same_table(tmp_path: Path) -> None:
    config = OrdererConfig(startup_delay=0.0)

    async def body() -> None:
        async with serving_channel(tmp_path, config, run=7) as (running, channel):
            address = target(running)
            assert await _runs(address) == [RunSpan(run=7, start_offset=0, end_offset=None)]
            await _send(channel, 0, [10, 20, 30])
            assert await end_run_async(address) == 3
            assert await _runs(address) == [RunSpan(run=7, start_offset=0, end_offset=3)]
            # input after an end of run reopens the run: still run 7's, the end open again
            await _send(channel, 3, [40, 50])
            assert (await _runs(address))[0].end_offset is None
            assert await end_run_async(address) == 5
            assert await begin_run_async(address) == RunSpan(run=8, start_offset=5)
            assert await _runs(address) == [
                RunSpan(run=7, start_offset=0, end_offset=5),
                RunSpan(run=8, start_offset=5, end_offset=None),
            ]
            await _send(channel, 5, [1, 2, 3, 4])
            assert await end_run_async(address) == 9
            assert await begin_run_async(address, 10) == RunSpan(run=10, start_offset=9)
            before = await _runs(address)
        assert before == [
            RunSpan(run=7, start_offset=0, end_offset=5),
            RunSpan(run=8, start_offset=5, end_offset=9),
            RunSpan(run=10, start_offset=9, end_offset=None),
        ]
        # recovery replays the arrival log: the same table, the current run still open
        async with serving_channel(tmp_path, config, run=7) as (running, channel):
            address = target(running)
            assert await _runs(address) == before
            await _send(channel, 9, [5, 6])
            assert await end_run_async(address) == 11
            ended = await _runs(address)
        assert ended[-1] == RunSpan(run=10, start_offset=9, end_offset=11)
        async with serving_channel(tmp_path, config, run=7) as (running, _):
            assert await _runs(target(running)) == ended

    run(body())
