"""kill -9 of an ``evb serve`` that is orderer 1 of 2 (docs/scale-out.md) in the middle of a
stream, and a restart on the same data directory and port: the slice index it served before
the crash is still the piece rule over the durable output (recovery rebuilds it from the
arrival log: orderer/service/slices.py), the source's resend from sequence 0 loses and
duplicates nothing, and at the end the index is the rule over the whole output, complete."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.client import OrderedStreamReader, end_run, get_slice_index, get_stats
from orderer.stats import SliceIndex, SliceRole
from orderer.wire import convert
from tests.e2e.conftest import ServerProcess
from tests.service.test_slices import _oracle_of

ORDERERS, INDEX, TICKS = 2, 1, 50
FLAGS = [
    "--orderers", str(ORDERERS), "--orderer-index", str(INDEX), "--slice-ticks", str(TICKS),
    "--build-window", "0.5", "--startup-delay", "0", "--sources", "1,2",
]  # fmt: skip


def _schedule(slices: range) -> list[tuple[int, FragmentBatch]]:
    """Each source's batches, interleaved: ten fragments of each odd slice (orderer 1's), and
    every eighth slice a barrier from both, in the even slice before it (orderer 0's: a copy
    orderer 1 does not keep) or in the slice itself (kept)."""
    batches: list[tuple[int, FragmentBatch]] = []
    for j in slices:
        start = (2 * j + 1) * TICKS
        for source in (1, 2):
            ts = [start + source + 4 * i for i in range(10)]
            barrier = [0] * 10
            if j % 8 == 0:
                ts.insert(0, start - TICKS // 2 if j % 16 == 0 else start)
                barrier.insert(0, 7)
            batches.append((source, FragmentBatch.from_arrays(source, ts, barrier)))
    return batches


def _requests(batches: list[tuple[int, FragmentBatch]], pause: float) -> Iterator[pb.SubmitRequest]:
    sequence = {1: 0, 2: 0}
    for source, batch in batches:
        yield pb.SubmitRequest(batch=convert.batch_to_pb(batch, sequence[source]))
        sequence[source] += len(batch)
        time.sleep(pause)


def _send(target: str, batches: list[tuple[int, FragmentBatch]], pause: float = 0.0) -> None:
    with grpc.insecure_channel(target) as channel:
        for _ in pb_grpc.OrdererStub(channel).Submit(_requests(batches, pause), timeout=120):
            pass


def _output(target: str, until: int) -> EmittedBatch:
    return EmittedBatch.concat(list(OrderedStreamReader(target, 0, until=until)))


def _check(index: SliceIndex, output: EmittedBatch) -> None:
    """The index is the rule over the output below its ``next_offset``."""
    below = output.slice(0, index.next_offset)
    assert list(index.pieces) == _oracle_of(below, ORDERERS, INDEX, TICKS)


def test_kill_9_keeps_the_slice_index_of_the_durable_output(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    server = server_factory(tmp_path / "data", *FLAGS)
    first = _schedule(range(0, 120))
    sender = threading.Thread(
        target=lambda: _swallow(lambda: _send(server.target, first, pause=0.005)), daemon=True
    )
    sender.start()
    deadline = time.monotonic() + 60
    while (index := get_slice_index(server.target)).next_offset < 600:
        assert time.monotonic() < deadline, "the output did not get going"
        time.sleep(0.02)
    assert sender.is_alive(), "the source finished before the crash"
    server.kill()
    assert "stopping" not in server.log_text()  # it died without its shutdown
    sender.join(30)
    server.start()  # same data directory, same port, same role

    stats = get_stats(server.target)
    assert stats.slicing == SliceRole(ORDERERS, INDEX, TICKS)
    recovered = get_slice_index(server.target)
    assert recovered.next_offset >= index.next_offset
    output = _output(server.target, recovered.next_offset)
    _check(index, output)  # what was served before the crash stands
    _check(recovered, output)

    # the source resends from sequence 0 (what the orderer holds is dropped), then goes on
    everything = first + _schedule(range(120, 160))
    _send(server.target, everything)
    end = end_run(server.target)
    output = _output(server.target, end)
    assert len(output) == sum(len(batch) for _, batch in everything)  # once each
    final = get_slice_index(server.target)
    assert final.complete and final.next_offset == end
    _check(final, output)
    assert len(final.pieces) > 100


def _swallow(send: Callable[[], None]) -> None:
    """The source's stream breaks when its orderer is killed."""
    with contextlib.suppress(grpc.RpcError):
        send()
