"""The service's Prometheus metrics (orderer/service/metrics.py), scraped over HTTP from a real
in-process server on loopback, as Prometheus would: barriers counted once by completeness and
homogeneity, no precomputed rate, the arrival-to-emission latency and fsync histograms, the
logs' sizes, the degraded flag, committed offsets per consumer and the build info."""

from __future__ import annotations

import asyncio
import errno
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from orderer import FragmentBatch, OrdererConfig
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.service.metrics import ArrivalLatency, Histogram
from orderer.service.server import RunningServer
from orderer.wire import convert
from tests.service.harness import run, serving, serving_channel, target

CONFIG = OrdererConfig(build_window=0.3, startup_delay=0.0, sources=(1, 2))

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(running: RunningServer) -> Samples:
    """GET /metrics on the server's metrics port: {(sample name, sorted labels): value}."""
    url = f"http://127.0.0.1:{running.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape_async(running: RunningServer) -> Samples:
    return await asyncio.to_thread(scrape, running)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def submit(
    channel: grpc.aio.Channel,
    source: int,
    timestamps: Sequence[int],
    barrier: Sequence[int] | None = None,
    first: int = 0,
) -> None:
    """One sequenced batch, returned once acknowledged (durable)."""
    batch = FragmentBatch.from_arrays(source=source, timestamp=timestamps, barrier=barrier)
    call = pb_grpc.OrdererStub(channel).Submit()
    await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch, first)))
    async for reply in call:
        if reply.WhichOneof("item") == "ack" and reply.ack.durable_sequence >= first + 1:
            break
    call.cancel()


def test_each_barrier_is_counted_once_by_both_kinds(tmp_path: Path) -> None:
    """Three barriers: complete heterogeneous, complete homogeneous, incomplete (drained at
    the end of run). The sum over both labels is 3; the one label of before summed to 6.
    A restart recovers the same counts from the arrival log."""
    expected = {
        ("complete", "heterogeneous"): 1.0,
        ("complete", "homogeneous"): 1.0,
        ("incomplete", "homogeneous"): 1.0,
        ("incomplete", "heterogeneous"): 0.0,
    }

    def barriers(samples: Samples) -> dict[tuple[str, str], float]:
        return {
            (dict(labels)["completeness"], dict(labels)["homogeneity"]): v
            for (name, labels), v in samples.items()
            if name == "evb_barriers_total"
        }

    async def body() -> None:
        async with serving(tmp_path, CONFIG, metrics_port=0) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                await submit(channel, 1, [10, 20, 30], barrier=[1, 3, 4])
                await submit(channel, 2, [10, 20], barrier=[2, 3])
                await pb_grpc.OrdererStub(channel).EndRun(pb.EndRunRequest())
            samples = await scrape_async(running)
            assert barriers(samples) == expected
            assert sum(barriers(samples).values()) == 3
        async with serving(tmp_path, CONFIG, metrics_port=0) as running:
            assert barriers(await scrape_async(running)) == expected

    run(body())


def test_latency_fsync_logs_consumers_and_build_info(tmp_path: Path) -> None:
    """Source 2 never sends, so source 1's fragments leave by the window rule, build_window
    (0.3 s) after their arrival: the latency histogram counts every one of them at about
    0.3 s. Each write round syncs both logs; the logs have bytes on disk; a consumer's commit
    shows; the ingest rate is left to rate() over the received counter."""

    async def body() -> None:
        async with serving(tmp_path, CONFIG, metrics_port=0) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                await submit(channel, 1, [1, 2, 3, 4, 5])
                for _ in range(200):  # until the window rule emitted them all
                    if running.service.durable_offset == 5:
                        break
                    await asyncio.sleep(0.05)
                await pb_grpc.OrdererStub(channel).Commit(
                    pb.CommitRequest(consumer="spark", offset=4)
                )
            samples = await scrape_async(running)
        count = value(samples, "evb_emission_latency_seconds_count")
        mean = value(samples, "evb_emission_latency_seconds_sum") / count
        assert count == 5
        assert 0.29 <= mean < 5.0, mean
        assert value(samples, "evb_emission_latency_seconds_bucket", le="0.25") == 0
        assert value(samples, "evb_emission_latency_seconds_bucket", le="+Inf") == 5
        for log in ("arrival", "ordered"):
            assert value(samples, "evb_fsync_duration_seconds_count", log=log) >= 1
            assert value(samples, "evb_log_bytes", log=log) > 0
        assert value(samples, "evb_log_volume_size_bytes") >= value(
            samples, "evb_log_volume_free_bytes"
        ) > 0
        assert value(samples, "evb_degraded") == 0
        assert value(samples, "evb_consumer_committed_offset", consumer="spark") == 4
        assert value(samples, "evb_consumer_lag_seconds", consumer="spark") > 0  # 5th not done
        assert value(samples, "evb_output_offset") == 5
        assert value(samples, "evb_fragments_received_total", source="1") == 5
        assert value(samples, "evb_source_idle_seconds", source="1") >= 0.29
        assert value(samples, "evb_source_idle_seconds", source="2") >= value(
            samples, "evb_source_idle_seconds", source="1"
        )  # never sent: idle since the run's start, before source 1's arrival
        assert value(samples, "evb_source_dead", source="1") == 0
        assert value(samples, "evb_source_ended", source="1") == 0
        versions = [dict(k[1])["version"] for k in samples if k[0] == "evb_build_info"]
        assert len(versions) == 1 and versions[0] != ""
        assert not any(name == "evb_ingest_rate" for name, _ in samples)

    run(body())


def test_a_declared_source_that_never_sent_has_its_series_from_the_start(tmp_path: Path) -> None:
    """Sources 1-3 declared, only 1 sends: source 3 has every per-source series, its idle time
    counted from the run's start (the service's clock starts at 0) and evb_source_arrived 0,
    where before it had no idle series at all and no alert could see it. A restart recovers
    which sources were heard from."""
    config = OrdererConfig(build_window=0.3, startup_delay=0.0, sources=(1, 2, 3))

    async def body() -> None:
        async with serving_channel(tmp_path, config, metrics_port=0) as (running, channel):
            await asyncio.sleep(0.3)
            await submit(channel, 1, [1, 2, 3])
            samples = await scrape_async(running)
            now = running.service.metrics_snapshot().now
        idle = value(samples, "evb_source_idle_seconds", source="3")
        assert 0.3 <= idle <= now
        assert idle > value(samples, "evb_source_idle_seconds", source="1") + 0.25
        assert value(samples, "evb_source_arrived", source="1") == 1
        for name in ("evb_source_arrived", "evb_source_dead", "evb_queue_depth"):
            assert value(samples, name, source="3") == 0, name
        assert value(samples, "evb_fragments_received_total", source="3") == 0
        async with serving(tmp_path, config, metrics_port=0) as running:
            samples = await scrape_async(running)
        assert value(samples, "evb_source_arrived", source="1") == 1
        assert value(samples, "evb_source_arrived", source="3") == 0
        assert value(samples, "evb_source_idle_seconds", source="3") >= 0.3

    run(body())


def test_the_run_ended_flag_follows_end_run_and_begin_run(tmp_path: Path) -> None:
    """evb_run_ended is 0 while the run goes on, 1 once evb end-run ended it and its output is
    durable (the source alerts go quiet then), 0 again after evb begin-run."""
    config = OrdererConfig(build_window=0.2, startup_delay=0.0, sources=(1, 2))

    async def body() -> None:
        async with serving_channel(tmp_path, config, metrics_port=0) as (running, channel):
            await submit(channel, 1, [1, 2, 3])
            assert value(await scrape_async(running), "evb_run_ended") == 0
            await running.service.end_run()
            assert value(await scrape_async(running), "evb_run_ended") == 1
            await running.service.begin_run()
            assert value(await scrape_async(running), "evb_run_ended") == 0

    run(body())


def test_the_degraded_flag_follows_a_full_log_volume(tmp_path: Path) -> None:
    """A write the volume refuses (ENOSPC) sets evb_degraded to 1; the retry that succeeds
    clears it."""

    async def body() -> None:
        async with serving(tmp_path, CONFIG, metrics_port=0) as running:
            real = running.service.arrivals.append_rows
            refusals = [0]

            def full(*args: object) -> None:
                if refusals[0] < 2:
                    refusals[0] += 1
                    raise OSError(errno.ENOSPC, "No space left on device")
                real(*args)  # type: ignore[arg-type]

            running.service.arrivals.append_rows = full  # type: ignore[method-assign,assignment]
            async with grpc.aio.insecure_channel(target(running)) as channel:
                call = pb_grpc.OrdererStub(channel).Submit()
                batch = FragmentBatch.from_arrays(source=1, timestamp=[1])
                await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch, 0)))
                for _ in range(100):
                    if running.service.degraded is not None:
                        break
                    await asyncio.sleep(0.01)
                assert value(await scrape_async(running), "evb_degraded") == 1
                call.cancel()
                for _ in range(400):  # retried every STORAGE_RETRY (1 s)
                    if running.service.degraded is None:
                        break
                    await asyncio.sleep(0.01)
                assert value(await scrape_async(running), "evb_degraded") == 0

    run(body())


def test_latency_matches_fragments_first_in_first_out() -> None:
    """Two passes (3 fragments at t=1, 2 at t=2) leaving in two calls: the first call at t=4
    takes 4 (3 of the first pass, 1 of the second), the second at t=5 the last one."""
    latency = ArrivalLatency(queued=0)
    latency.arrived(1.0, 3)
    latency.arrived(2.0, 2)
    latency.left(4.0, queued=1)
    latency.left(5.0, queued=0)
    data = latency.histogram.data()
    assert data.cumulative[-1] == 5
    assert data.total == 3 * 3.0 + 1 * 2.0 + 1 * 3.0


def test_recovered_queue_content_is_not_observed() -> None:
    latency = ArrivalLatency(queued=2)  # arrival times unknown: not observed
    latency.arrived(1.0, 1)
    latency.left(1.5, queued=1)
    assert latency.histogram.data().cumulative[-1] == 0
    latency.left(2.0, queued=0)
    assert latency.histogram.data().cumulative[-1] == 1
    assert latency.histogram.data().total == 1.0


def test_histogram_bounds_are_inclusive() -> None:
    histogram = Histogram((0.1, 1.0))
    histogram.observe(0.1)
    histogram.observe(1.0, 2)
    histogram.observe(3.0)
    data = histogram.data()
    assert data.buckets() == [("0.1", 1.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert data.total == 0.1 + 2.0 + 3.0


def test_an_orderer_of_a_sliced_run_labels_every_series_with_its_index(tmp_path: Path) -> None:
    """Orderer 1 of 3: every sample carries ``orderer="1"`` (its run's series told apart
    wherever they are scraped from) and ``evb_orderers`` is 3; a plain orderer's samples carry
    no such label (its series as before) and ``evb_orderers`` 1."""

    async def scraped(data_dir: Path, stamps: list[int], **role: object) -> Samples:
        async with serving(data_dir, CONFIG, metrics_port=0, **role) as running:
            async with grpc.aio.insecure_channel(target(running)) as channel:
                await submit(channel, 1, stamps)
            return await scrape_async(running)

    sliced = run(  # slice 0 of 1000 ticks, orderer 0's; slice 1, orderer 1's
        scraped(tmp_path / "sliced", [1, 2, 3], orderers=3, orderer_index=0, slice_ticks=1000)
    )
    other = run(
        scraped(tmp_path / "other", [1001, 1002], orderers=3, orderer_index=1, slice_ticks=1000)
    )
    plain = run(scraped(tmp_path / "plain", [1, 2, 3]))
    for samples, index in ((sliced, "0"), (other, "1")):
        assert len(samples) > 30
        assert all(dict(labels).get("orderer") == index for _, labels in samples)
        assert value(samples, "evb_orderers", orderer=index) == 3
    assert value(sliced, "evb_fragments_received_total", source="1", orderer="0") == 3
    assert value(other, "evb_fragments_received_total", source="1", orderer="1") == 2
    assert not any("orderer" in dict(labels) for _, labels in plain)
    assert value(plain, "evb_orderers") == 1
    # the same families and the same samples but for the label
    assert {(name, tuple(k for k in labels if k[0] != "orderer")) for name, labels in sliced} \
        == set(plain)
