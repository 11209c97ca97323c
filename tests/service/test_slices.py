"""One run over several orderers, the orderer's side (docs/scale-out.md, issue 38 item 1): an
``evb serve`` that knows it is orderer K of N with slices of T ticks.

- the flags and the ``--config`` keys, and what is refused with one line (T missing for N > 1,
  K >= N, peers that are not N addresses, another N, K or T on a restart: exit 2, nothing
  written, nothing lost); a plain orderer is what it was (orderer 0 of 1, its
  ``parameters.json`` as before);
- ``GetStats`` shows where the orderer stands, ``evb stats`` and ``evb top`` say it;
- an ordinary fragment of another orderer's slice ends its Submit stream INVALID_ARGUMENT
  naming it, with nothing of its message taken and everything acknowledged before kept;
  barriers, watermarks and ends are taken at every orderer;
- the slice index (``GetSliceIndex``) is the piece rule over the orderer's durable output,
  checked against a small oracle written here, live, at the end and after a restart, and the
  cutter that makes it cuts any split of an output as the whole.

Every server is real: gRPC on loopback, fragments sent over Submit streams as a source sends
them (raw messages, so that a wrong one can be sent on purpose). The kill -9 of a serving
process is tests/e2e/test_sliced_orderer.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.apps.console import top_frame, write
from orderer.apps.stats import write_stats
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.cli import build_parser
from orderer.cli.config_file import serve_settings
from orderer.client import end_run_async, get_slice_index_async, get_stats_async, subscribe
from orderer.config import OrdererConfig
from orderer.errors import ConfigError, InterfaceError
from orderer.formats import log_format
from orderer.replay.slicing import Slicing
from orderer.service.server import RunningServer
from orderer.service.settings import ServiceConfig
from orderer.service.slices import PieceCutter, PieceIndex
from orderer.stats import Piece, SliceIndex, SliceRole
from orderer.wire import convert
from tests.service.harness import run, serving, target
from tests.service.test_server import _Stream

ROOT = Path(__file__).resolve().parents[2]
CONFIG = OrdererConfig(build_window=0.05, startup_delay=0.0, barrier_timeout=30.0, sources=(1, 2))


def _batch(source: int, first: int | None, timestamps: list[int], barriers: Any = None) -> Any:
    batch = FragmentBatch.from_arrays(source=source, timestamp=timestamps, barrier=barriers)
    return pb.SubmitRequest(batch=convert.batch_to_pb(batch, first))


def _oracle(
    ts: list[int], barrier: list[int], orderers: int, index: int, ticks: int
) -> list[Piece]:
    """The pieces of orderer ``index``'s output, by docs/scale-out.md's words, row by row: a
    piece begins at each kept row (ordinary, or a barrier of a slice this orderer owns) whose
    slice is above every slice of the kept rows before; its highest timestamp is the highest
    ordinary one in it; its kept rows, those of it in the merged stream."""
    pieces: list[list[Any]] = []
    for offset, (stamp, kind) in enumerate(zip(ts, barrier, strict=True)):
        s = stamp // ticks
        if kind != 0 and s % orderers != index:
            continue  # a copy that only held this orderer
        if not pieces or s > pieces[-1][0]:
            pieces.append([s, offset, None, 0])
        pieces[-1][3] += 1
        if kind == 0:
            top = pieces[-1][2]
            pieces[-1][2] = stamp if top is None else max(top, stamp)
    return [Piece(*piece) for piece in pieces]


async def _output(running: RunningServer, until: int) -> EmittedBatch:
    batches = [b async for b in subscribe(target(running), 0, until=until)]
    return EmittedBatch.concat(batches)


def _oracle_of(output: EmittedBatch, orderers: int, index: int, ticks: int) -> list[Piece]:
    return _oracle(output.timestamp.tolist(), output.barrier.tolist(), orderers, index, ticks)


def _settings(*argv: str) -> ServiceConfig:
    return serve_settings(build_parser().parse_args(["serve", *argv])).service


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orderer.cli", "serve", "--listen", "127.0.0.1:0", *argv],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "LOCK"
    }


# ------------------------------------------------------------------ flags, keys, refusals


def test_the_flags_and_the_config_keys_say_which_orderer_of_which_run(tmp_path: Path) -> None:
    service = _settings(
        "--orderers", "3", "--orderer-index", "2", "--slice-ticks", "1000000",
        "--peers", "o-0:50051,o-1:50051,o-2:50051",
    )  # fmt: skip
    assert service.slice_role == SliceRole(3, 2, 10**6, ("o-0:50051", "o-1:50051", "o-2:50051"))
    assert service.slicing == Slicing(3, 10**6)
    path = tmp_path / "evb.yaml"
    path.write_text(
        "orderers: 2\nordererIndex: 1\nsliceTicks: 500\npeers: [a:1, b:2]\nbuildWindow: 2\n"
    )
    assert _settings("--config", str(path)).slice_role == SliceRole(2, 1, 500, ("a:1", "b:2"))
    # a flag over the file's key; the peers as one comma list in the file
    path.write_text("orderers: 2\norderer_index: 1\nslice_ticks: 500\npeers: a:1,b:2\n")
    service = _settings("--config", str(path), "--orderer-index", "0")
    assert service.slice_role == SliceRole(2, 0, 500, ("a:1", "b:2"))
    # a plain orderer, as before: orderer 0 of 1, no slice length, no slicing rule
    plain = _settings()
    assert plain.slice_role == SliceRole() and plain.slicing is None
    # a slice length alone: one orderer that keeps its slice index
    assert _settings("--slice-ticks", "7").slicing == Slicing(1, 7)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--orderers", "3"],
         "--slice-ticks: is needed for a run over 3 orderers: every source computes a "
         "fragment's orderer from it"),
        (["--orderers", "2", "--orderer-index", "2", "--slice-ticks", "5"],
         "--orderer-index: must be below the number of orderers, 2 (they are numbered 0 to 1)"
         " (got 2)"),
        (["--orderer-index", "1"],
         "--orderer-index: must be below the number of orderers, 1 (they are numbered 0 to 0)"
         " (got 1)"),
        (["--orderers", "2", "--slice-ticks", "5", "--peers", "a:1,b:2,c:3"],
         "--peers: must name every orderer of the run, 2, in index order (3 given)"
         " (got 'a:1,b:2,c:3')"),
        (["--orderers", "2000", "--slice-ticks", "5"],
         "--orderers: must be an integer from 1 to 1024 (got 2000)"),
    ],
)  # fmt: skip
def test_a_role_that_cannot_be_is_refused_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _settings(*argv)
    assert str(refused.value) == message


def test_a_bad_key_of_the_file_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "evb.yaml"
    path.write_text("orderers: 3\nordererIndex: 3\nsliceTicks: 10\n")
    with pytest.raises(ConfigError) as refused:
        _settings("--config", str(path))
    assert str(refused.value).startswith(f"{path}:2: ordererIndex: must be below the number")
    path.write_text("orderers: 2\nsliceTicks: 10\npeers: ['a:1', '']\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: peers: '' is not an address"):
        _settings("--config", str(path))


def test_evb_serve_refuses_a_run_over_several_orderers_without_a_slice_length(
    tmp_path: Path,
) -> None:
    done = _serve("--data-dir", str(tmp_path / "d"), "--orderers", "3")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "evb serve: --slice-ticks: is needed for a run over 3 orderers: every source computes"
        " a fragment's orderer from it"
    ]
    assert not (tmp_path / "d").exists()  # refused before anything was made
    bad = _serve("--data-dir", str(tmp_path / "d"), "--slice-ticks", "0")
    assert bad.returncode == 2 and "--slice-ticks" in bad.stderr and len(bad.stderr.splitlines())


def test_another_role_on_a_restart_is_refused_with_one_line_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    role = {"orderers": 2, "orderer_index": 1, "slice_ticks": 100}

    async def first_run() -> int:
        async with (
            serving(data, CONFIG, **role) as running,
            grpc.aio.insecure_channel(target(running)) as channel,
        ):
            call = _Stream(channel)
            await call.write(_batch(1, 0, [100, 120, 130]))
            assert await call.ack() == (1, 3)
            await call.write(_batch(2, 0, [110, 300]))
            assert await call.ack() == (2, 2)
            assert await call.close() == grpc.StatusCode.OK
            return (await get_stats_async(target(running))).totals.received

    assert run(first_run()) == 5
    recorded = json.loads((data / log_format.PARAMETERS).read_text())
    assert recorded["slicing"] == {"orderers": 2, "index": 1, "slice_ticks": 100}
    before = _digest(data)
    said = f"the run in {data} is orderer 1 of 2 with slices of 100 ticks, not "
    tail = (
        ", and which slices an orderer owns cannot change during a run: start it as the run "
        "began (--orderers, --orderer-index, --slice-ticks), or begin a new run in another "
        "data directory"
    )
    for argv, written, other in [
        (["--orderers", "2", "--orderer-index", "0", "--slice-ticks", "100"],
         "--orderer-index", "orderer 0 of 2 with slices of 100 ticks"),
        (["--orderers", "3", "--orderer-index", "1", "--slice-ticks", "100"],
         "--orderers", "orderer 1 of 3 with slices of 100 ticks"),
        (["--orderers", "2", "--orderer-index", "1", "--slice-ticks", "101"],
         "--slice-ticks", "orderer 1 of 2 with slices of 101 ticks"),
        ([], "--orderers", "a run of one orderer"),  # a bare restart does not become plain
    ]:  # fmt: skip
        done = _serve("--data-dir", str(data), *argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [f"evb serve: {written}: {said}{other}{tail}"]
        assert _digest(data) == before

    async def again() -> None:  # the run's own role: everything is there
        async with serving(data, CONFIG, **role, peers=("a:1", "b:2")) as running:
            stats = await get_stats_async(target(running))
            assert stats.totals.received == 5
            assert stats.slicing == SliceRole(2, 1, 100, ("a:1", "b:2"))

    run(again())


def test_a_plain_run_stays_plain(tmp_path: Path) -> None:
    """A plain orderer records nothing of a slicing (its ``parameters.json`` is what it was),
    and a restart that would make it an orderer of several is refused; a directory recorded
    before slicing existed reads as a plain orderer's."""
    data = tmp_path / "d"

    async def plain() -> None:
        async with serving(data, CONFIG) as running:
            stats = await get_stats_async(target(running))
            assert stats.slicing == SliceRole()
            with pytest.raises(InterfaceError, match=r"keeps no slice index: .*--slice-ticks"):
                await get_slice_index_async(target(running))

    run(plain())
    recorded = json.loads((data / log_format.PARAMETERS).read_text())
    assert set(recorded) == {"format", "orderer"}
    assert log_format.read_slice_role(data) == SliceRole()
    done = _serve("--data-dir", str(data), "--orderers", "2", "--slice-ticks", "100")
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"evb serve: --orderers: the run in {data} is a run of one orderer, not orderer 0 of 2"
    )
    assert len(done.stderr.splitlines()) == 1
    alone = _serve("--data-dir", str(data), "--slice-ticks", "100")
    assert alone.returncode == 2 and alone.stderr.startswith("evb serve: --slice-ticks: ")
    run(plain())  # and it goes on as it was


# ------------------------------------------------------------------ GetStats and the views


def _views(stats: Any) -> str:
    out = io.StringIO()
    write_stats(stats, out)
    write(out, lambda width, plain: top_frame(stats, target="t", plain=plain, width=width))
    return out.getvalue()


def test_getstats_shows_where_the_orderer_stands_and_the_views_say_it(tmp_path: Path) -> None:
    async def body() -> None:
        peers = ("h0:1", "h1:1", "h2:1")
        async with serving(
            tmp_path / "sliced", CONFIG, orderers=3, orderer_index=1, slice_ticks=10**6,
            peers=peers,
        ) as running:  # fmt: skip
            stats = await get_stats_async(target(running))
            assert stats.slicing == SliceRole(3, 1, 10**6, peers)
            assert stats.to_json()["slicing"] == {
                "orderers": 3,
                "index": 1,
                "slice_ticks": 10**6,
                "peers": list(peers),
            }
            assert _views(stats).count("orderer 1 of 3, slices of 1000000 ticks") == 2
        async with serving(tmp_path / "plain", CONFIG) as running:
            stats = await get_stats_async(target(running))
            assert stats.slicing == SliceRole()
            assert "orderer 0 of 1" not in _views(stats) and "slices of" not in _views(stats)
            # the message itself: always set, orderer 0 of 1
            reply = convert.stats_to_pb(running.service.stats())
            assert reply.HasField("slicing") and reply.slicing.orderers == 1

    run(body())


# ------------------------------------------------------------------ routing


def test_a_fragment_of_another_orderers_slice_ends_the_stream_and_nothing_acked_is_lost(
    tmp_path: Path,
) -> None:
    """Orderer 1 of 3, slices of 100: it owns slices 1, 4, 7, ... ([100, 200), [400, 500))."""

    async def body() -> None:
        role = {"orderers": 3, "orderer_index": 1, "slice_ticks": 100}
        async with (
            serving(tmp_path, CONFIG, **role) as running,
            grpc.aio.insecure_channel(target(running)) as channel,
        ):
            call = _Stream(channel)
            await call.write(_batch(1, 0, [100, 150]))
            assert await call.ack() == (1, 2)
            await call.write(_batch(2, 0, [120, 410]))
            assert await call.ack() == (2, 2)
            await call.write(_batch(1, 2, [160, 250, 420]))  # 250: slice 2, orderer 2's
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.ack()
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details() == (
                "source 1: fragment at timestamp 250 is in slice 2, owned by orderer 2; this is"
                " orderer 1 of 3"
            )
            assert running.service.next_sequence(1) == 2  # nothing of that message was taken
            # a batch of several sources names the source of the fragment
            call = _Stream(channel)
            several = FragmentBatch.from_arrays(source=[2, 1], timestamp=[430, 99])
            await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(several)))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.ack()
            assert caught.value.details() == (
                "source 1: fragment at timestamp 99 is in slice 0, owned by orderer 0; this is"
                " orderer 1 of 3"
            )
            # the source sends again what it was refused, routed right: taken
            call = _Stream(channel)
            await call.write(_batch(1, 2, [160, 420]))
            assert await call.ack() == (1, 4)
            assert await call.close() == grpc.StatusCode.OK
            end = await end_run_async(target(running))
            output = await _output(running, end)
            got = sorted(zip(output.source.tolist(), output.timestamp.tolist(), strict=True))
            assert got == [(1, 100), (1, 150), (1, 160), (1, 420), (2, 120), (2, 410)]

    run(body())


def test_barriers_watermarks_and_ends_are_taken_at_every_orderer(tmp_path: Path) -> None:
    """The records a source sends every orderer: a barrier whose slice is orderer 0's (a copy
    that only holds the others), a watermark, an end of source; each orderer takes them all."""

    async def at(index: int) -> None:
        config = OrdererConfig(build_window=0.05, startup_delay=0.0, sources=(1,))
        role = {"orderers": 3, "orderer_index": index, "slice_ticks": 100}
        async with (
            serving(tmp_path / str(index), config, **role) as running,
            grpc.aio.insecure_channel(target(running)) as channel,
        ):
            call = _Stream(channel)
            await call.write(_batch(1, 0, [20], [1]))  # slice 0: orderer 0's
            assert await call.ack() == (1, 1)
            await call.write(pb.SubmitRequest(watermark=pb.Watermark(source=1, watermark=5000)))
            await call.write(pb.SubmitRequest(end_of_source=pb.EndOfSource(source=1)))
            assert await call.close() == grpc.StatusCode.OK
            stats = await get_stats_async(target(running))
            assert stats.sources[1].ended and stats.sources[1].watermark == 5000
            assert stats.barriers.complete == 1 and stats.next_offset == 1
            index_reply = await get_slice_index_async(target(running))
            # only orderer 0 keeps its copy: the others' output holds no piece
            assert index_reply.pieces == ((Piece(0, 0, None, 1),) if index == 0 else ())

    async def body() -> None:
        for index in range(3):
            await at(index)

    run(body())


# ------------------------------------------------------------------ the slice index


def test_the_slice_index_is_the_piece_rule_over_the_durable_output(tmp_path: Path) -> None:
    """Orderer 1 of 2, slices of 50: it owns the odd slices. Its output holds pieces opened by
    ordinary fragments and by a kept barrier, copies it does not keep, and late fragments (of a
    slice below their piece's); the index is the oracle's over the output, live (as far as the
    output is durable) and at the end, read whole or a few pieces at a time."""
    orderers, index, ticks = 2, 1, 50

    async def body() -> None:
        async with (
            serving(
                tmp_path, CONFIG, orderers=orderers, orderer_index=index, slice_ticks=ticks
            ) as running,
            grpc.aio.insecure_channel(target(running)) as channel,
        ):
            t = target(running)
            call = _Stream(channel)
            sequence = {1: 0, 2: 0}

            async def send(source: int, timestamps: list[int], barriers: Any = None) -> None:
                await call.write(_batch(source, sequence[source], timestamps, barriers))
                sequence[source] += len(timestamps)
                while (await call.ack()) != (source, sequence[source]):
                    pass

            async def settled(offset: int) -> SliceIndex:
                for _ in range(1000):
                    reply = await get_slice_index_async(t)
                    if reply.next_offset >= offset:
                        return reply
                    await asyncio.sleep(0.01)
                raise AssertionError(f"the output did not reach {offset}")

            assert await get_slice_index_async(t) == SliceIndex((), False, 0)
            await send(1, [50, 60, 70])
            await send(2, [55, 65])
            await send(1, [160, 170])
            await send(2, [155, 180])
            live = await settled(7)  # what both sources passed: up to 170
            output = await _output(running, live.next_offset)
            assert list(live.pieces) == _oracle_of(output, orderers, index, ticks)
            assert not live.complete
            await send(2, [75])  # late: below the high-water mark, in piece 3
            await send(1, [210], [2])  # a barrier of slice 4 (orderer 0's): a copy not kept
            await send(2, [212], [2])
            await send(1, [260], [3])  # a barrier of slice 5: kept, it opens piece 5
            await send(2, [262], [3])
            await send(1, [270, 280, 470])
            await send(2, [275, 460])
            assert await call.close() == grpc.StatusCode.OK
            end = await end_run_async(t)
            output = await _output(running, end)
            expected = _oracle_of(output, orderers, index, ticks)
            assert [p.slice for p in expected] == [1, 3, 5, 9]
            assert bool(output.late.any())  # 75 came late, inside piece 3
            whole = await get_slice_index_async(t)
            assert whole == SliceIndex(tuple(expected), True, end)
            # a few at a time, from a slice on
            assert (await get_slice_index_async(t, 2, limit=2)).pieces == tuple(expected[1:3])
            assert (await get_slice_index_async(t, 4)).pieces == tuple(expected[2:])
            assert (await get_slice_index_async(t, 10)).pieces == ()
        # a restart rebuilds it from the arrival log, whatever the ordered log kept
        async with serving(
            tmp_path, CONFIG, orderers=orderers, orderer_index=index, slice_ticks=ticks
        ) as running:
            assert await get_slice_index_async(target(running)) == whole

    run(body())


@st.composite
def _outputs(draw: st.DrawFn) -> tuple[int, int, int, list[int], list[int], list[int]]:
    """An orderer's output (timestamps, barrier types), its place in a run and a split of the
    output into emitted batches."""
    orderers = draw(st.integers(1, 4))
    index = draw(st.integers(0, orderers - 1))
    ticks = draw(st.integers(1, 20))
    n = draw(st.integers(0, 60))
    ts = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n))
    barrier = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2]), min_size=n, max_size=n))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return orderers, index, ticks, ts, barrier, cuts


@settings(max_examples=300, deadline=None)
@given(_outputs())
def test_any_split_of_an_output_is_cut_as_the_whole(
    case: tuple[int, int, int, list[int], list[int], list[int]],
) -> None:
    """The service cuts each emitted batch alone, the piece carried from one to the next; the
    index so made is the oracle's over the whole output, however it was split."""
    orderers, index, ticks, ts, barrier, cuts = case
    cutter = PieceCutter(Slicing(orderers, ticks), index)
    pieces = PieceIndex()
    bounds = [0, *cuts, len(ts)]
    for a, b in itertools.pairwise(bounds):
        n = b - a
        emitted = EmittedBatch(
            a, np.zeros(n), np.ones(n, np.uint32), np.array(ts[a:b], np.uint64),
            np.array(barrier[a:b], np.uint32), np.zeros(n, np.bool_), np.zeros(n + 1, np.uint64),
            np.zeros(0, np.uint8),
        )  # fmt: skip
        pieces.add(cutter.cut(emitted))
        pieces.durable(b)
    reply = pieces.read(0, 0, complete=True)
    assert list(reply.pieces) == _oracle(ts, barrier, orderers, index, ticks)
    assert reply.next_offset == len(ts)
