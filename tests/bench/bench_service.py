"""Benchmark of the gRPC service: ingest to durable ordered log, bare gRPC peers, latency, memory.

Not a pytest test: run it as ``python tests/bench/bench_service.py [--fragments N]`` (with the
repository on ``PYTHONPATH``, or from the checkout). Every figure comes from one run on
synthetic data (:mod:`orderer.replay.synthetic`: 16 sources, per-source increasing timestamps
interleaved in arrival order, batches of 1000 fragments with 32-byte payloads, or at each size
of the payload sweep), generated and encoded up front and never timed. The servers run in
subprocesses on 127.0.0.1; this process is the sender (one asyncio loop, a few ``Submit``
streams on their own channels, the sources spread over them), so on a two-core machine the
server gets one core and the sender the other.

The sender writes pre-encoded ``SubmitRequest`` messages (bytes, no serialiser) on raw stubs:
what the server can take, not what a client costs. ``1b`` sends the same batches through the
client library (:class:`orderer.client.AsyncSourceClient`, which encodes, numbers and keeps them
until acknowledged) to show what a data source gets.

1. ingest -> order -> durable log: ``evb serve`` (fresh data directory, ``--fsync batch``,
   ``--build-window 1``, ``--startup-delay 0``, the 16 sources declared), every batch, then an
   end of source per source so that everything drains; timed from the first write to the moment
   ``GetStats`` shows every fragment emitted and durable (``next_offset``);
2. the peer baseline: a bare ``grpc.aio`` server (``--bare-server``, this file) on the same proto
   whose ``Submit`` only parses the messages, counts the fragments and acknowledges (one ack per
   source per wake-up, like evb); the same sender; the ratio evb / bare. Both phases give the
   server's and the sender's CPU per 1000 fragments, and with them the CPU budget of the target:
   what the host's cores give per 1000 fragments at the target rate, what is left once the
   sender and a server that only receives (the bare peer) are paid, against what evb spends
   beyond that transport;
2b. the transport-plus-disk baseline: the durable bare peer (``--bare-server --durable DIR``)
   takes each Submit message as raw bytes, parses what its ack needs, appends the bytes once to
   one file (a writer thread) and acknowledges only once an ``fdatasync`` (a sync thread) that
   started after the write returns, one sync for all that came meanwhile, as in evb's group
   commit (:class:`GroupSync`); ``GetStats`` counts only what is synced. The ratio
   evb / durable bare is what evb's ordering and its logs' format cost over writing each byte
   once and syncing like evb.

1, 2 and 2b run as a payload sweep (``--payloads``, 32, 256, 1024 and 4096 bytes by default):
at each size the three alternate (evb, bare, durable, then the reverse order; best of
``--repeat``), with ``min(--fragments, --bytes-budget / payload)`` fragments, so each size sends
about the same bytes. The sweep's table gives at each size the rates, evb over both baselines,
the servers' CPU, evb's busiest thread and the bytes evb's data directory holds (its ``*.arrow``
files) per payload byte received; the main table gives 1, 2 and 2b at ``--payload`` (else at the
sweep's first size), the size that 1b, 3 and 4 use;
3. latency at paced loads (``--latency-points RATE@N,...``: N fragments per message, RATE in
   all; the first, 1 M/s in messages of 250, has every source send every 4 ms), each on a fresh
   server: the same fragments re-cut into messages of N per source, each written at the
   production time of its last fragment, ``--latency-seconds`` of that schedule (a sender that
   falls behind gives up at three times that; what it sent still counts). After the run the
   arrival log and the ordered log (:mod:`orderer.service.logs`) give per fragment arrival and
   emission times on the server's clock (matched per source in order, timestamps checked). The
   send times of this process are put on the server's clock with ``GetStats.now`` (offset from
   the fastest of a few round trips); a ``Subscribe`` in this process records when output is
   delivered. Arrival -> emission is the orderer waiting for the other sources (the emitting
   flush runs at the arrival time of the batch that releases a fragment, so the server's own
   processing never shows there); send -> arrival is transport and server backlog; emission ->
   delivered is the group commit and ``Subscribe``. The first ``--latency-warmup`` seconds of a
   point are left out (a fresh server's first messages);
4. memory under a stalled source: a 17th declared source never sends, the build window is long
   (``--stall-window``), the others stream for ``--stall-seconds`` honouring flow control (XOFF
   stops a source's writes until XON); the server's ``VmRSS`` is sampled. Then the stalled source
   ends (one flush releases the backlog up to the others' mark), then every source ends.

``--json PATH`` writes the figures as JSON (the sweep under ``payload_sweep``, a dict per size).
``--profile py-spy|cprofile`` profiles the server of phase 1's first run at the main table's size
(``--profile-out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

try:
    import orderer  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc
import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer._proto.evb.v1 import orderer_pb2_grpc as pb_grpc
from orderer.batch import FragmentBatch
from orderer.replay.synthetic import SyntheticRun, iter_batches
from orderer.service.threads import single_thread
from orderer.wire import convert

MANY_CORES = (os.cpu_count() or 1) >= 8
TARGET_THROUGHPUT = 4e6
"""Fragments/s durable (issue 27: 4 M/s on the 2-core machines; more cores only add to it)."""
TARGET_RATIO = 0.6 if MANY_CORES else 0.45
"""evb's rate over the bare peer's of the same run (issue 27: 0.45 on 2 cores, where the server
and the sender share them; 0.6 with 16 sources on a host of 8 cores or more)."""
TARGET_BUSIEST_THREAD_US = 60.0
"""No server thread above this many microseconds of CPU per 1000 fragments at full ingest
(issue 27): what lets one pod's rate grow with its cores."""
TARGET_P99 = 0.020
TARGET_DELIVERED_P99 = 0.100
"""p99 of send -> delivered to a subscriber, all sources live (issue 18)."""
_TARGETS = {"arrival_to_emission": TARGET_P99, "send_to_delivered": TARGET_DELIVERED_P99}
ROOT = Path(__file__).resolve().parents[2]
SUBMIT = "/evb.v1.Orderer/Submit"
STATS = "/evb.v1.Orderer/GetStats"
SUBSCRIBE = "/evb.v1.Orderer/Subscribe"
START_TIMEOUT = 60.0
OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]


# ---------------------------------------------------------------------------------- data


@dataclasses.dataclass
class Message:
    """One pre-encoded ``SubmitRequest`` of one source."""

    source: int
    count: int
    data: bytes
    at: float  # when to send it, seconds from the start of the run (paced phases)


@dataclasses.dataclass
class Data:
    sources: tuple[int, ...]
    fragments: int
    payload_size: int
    rate: float  # fragments/s of all sources together, in timestamp time
    batches: list[Message]  # the batches of the run, in arrival order
    timestamps: dict[int, np.ndarray]  # each source's timestamps, in its order
    payloads: dict[int, np.ndarray]  # each source's payloads, packed
    origin: int  # timestamp at time 0
    tick_rate: float


def _encode(batch: FragmentBatch, first: int) -> bytes:
    return pb.SubmitRequest(batch=convert.batch_to_pb(batch, first)).SerializeToString()


def generate(
    args: argparse.Namespace, *, payload: int, fragments: int, columns: bool = True
) -> Data:
    """The run: synthetic batches in arrival order, encoded once. ``columns`` also keeps every
    source's timestamps and payloads (what the paced phases re-cut); the payload sweep leaves
    them out, since at its larger payloads they would double the sender's memory."""
    spec = SyntheticRun(
        n_sources=args.sources,
        fragments_per_source=max(1, fragments // args.sources),
        rate=args.data_rate / args.sources,
        jitter=args.jitter,
        batch_size=args.batch,
        barriers=False,
        end_of_source=False,
        payload_size=payload,
        seed=args.seed,
    )
    batches: list[Message] = []
    sequence: Counter[int] = Counter()
    parts: dict[int, list[FragmentBatch]] = defaultdict(list)
    for t, batch in iter_batches(spec):
        source = int(batch.source[0])
        batches.append(Message(source, len(batch), _encode(batch, sequence[source]), t))
        sequence[source] += len(batch)
        if columns:
            parts[source].append(batch)
    return Data(
        sources=spec.source_ids,
        fragments=sum(m.count for m in batches),
        payload_size=payload,
        rate=args.data_rate,
        batches=batches,
        timestamps={s: np.concatenate([c.timestamp for c in p]) for s, p in parts.items()},
        payloads={s: np.concatenate([c.payload for c in p]) for s, p in parts.items()},
        origin=spec.timestamp_origin,
        tick_rate=spec.tick_rate,
    )


def paced_messages(data: Data, rate: float, batch: int, seconds: float) -> list[Message]:
    """The same fragments re-cut into messages of ``batch`` per source, each to be sent at the
    production time of its last fragment with time scaled to ``rate`` fragments/s in all;
    ``seconds`` of that schedule, in send order."""
    scale = data.rate / rate
    size = data.payload_size
    messages = []
    for source in data.sources:
        timestamps, payload = data.timestamps[source], data.payloads[source]
        for start in range(0, len(timestamps), batch):
            stop = min(start + batch, len(timestamps))
            at = scale * float(timestamps[stop - 1] - data.origin) / data.tick_rate
            if at > seconds:
                break
            n = stop - start
            part = FragmentBatch(
                source=np.full(n, source, dtype=np.uint32),
                timestamp=timestamps[start:stop],
                barrier=np.zeros(n, dtype=np.uint32),
                payload_offsets=np.arange(n + 1, dtype=np.uint64) * np.uint64(size),
                payload=payload[start * size : stop * size],
            )
            messages.append(Message(source, n, _encode(part, start), at))
    messages.sort(key=lambda m: (m.at, m.source))
    return messages


def _control(kind: str, source: int) -> bytes:
    if kind == "end":
        return pb.SubmitRequest(end_of_source=pb.EndOfSource(source=source)).SerializeToString()
    raise ValueError(kind)


# ---------------------------------------------------------------------------------- processes


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


class Server:
    """A server subprocess that prints ``... listening on HOST:PORT`` first."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, env=_environment()
            )
        self.log_path = log_path
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            ready = selector.select(START_TIMEOUT)
        line = self.process.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.kill()
            raise SystemExit(f"server did not start ({line!r}); see {log_path}")
        self.target = "127.0.0.1:" + line.rsplit(":", 1)[1].strip()
        self.pid = self.process.pid

    def rss(self) -> int:
        """Resident set size in bytes (``VmRSS``); 0 once gone."""
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def cpu(self) -> float:
        """User + system CPU seconds of the process, all its threads."""
        return self._cpu(f"/proc/{self.pid}/stat")

    def loop_cpu(self) -> float:
        """User + system CPU seconds of the main thread alone: the event loop's, where every
        message is read and every orderer call made (one core's worth at most)."""
        return self._cpu(f"/proc/{self.pid}/task/{self.pid}/stat")

    def thread_cpu(self) -> dict[int, tuple[str, float]]:
        """Per thread of the process: its name and its user + system CPU seconds. The busiest
        thread bounds one process's rate whatever the cores (issue 27's figure)."""
        threads: dict[int, tuple[str, float]] = {}
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return threads
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm", encoding="utf-8") as comm:
                    name = comm.read().strip()
            except OSError:
                continue
            threads[int(tid)] = (name, self._cpu(f"/proc/{self.pid}/task/{tid}/stat"))
        return threads

    def _cpu(self, path: str) -> float:
        try:
            with open(path, encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return 0.0

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` of the server's stderr."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:]) + "\n"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)


def _threads(figures: dict[str, Any], top: int = 4) -> str:
    """The busiest server threads of a phase, ``name us`` per 1000 fragments."""
    return ", ".join(
        f"{name} {us:.0f}" for name, us in figures.get("server_threads_us_per_1000", [])[:top]
    )


def _thread_use(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> list[tuple[str, float]]:
    """Every thread's CPU seconds between two :meth:`ServerProcess.thread_cpu` readings (one
    started meanwhile counts from 0), busiest first: ``(name, seconds)``."""
    used = [
        (name, cpu - before.get(tid, (name, 0.0))[1]) for tid, (name, cpu) in after.items()
    ]
    return sorted(used, key=lambda named: -named[1])


def start_evb(
    data_dir: Path,
    log_path: Path,
    sources: tuple[int, ...],
    build_window: float,
    profile: str | None = None,
    profile_out: Path | None = None,
) -> Server:
    flags = [
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
        "--build-window", str(build_window), "--startup-delay", "0",
        "--sources", ",".join(map(str, sources)), "--stop-grace", "2", "--log-level", "warning",
        *os.environ.get("EVB_BENCH_SERVE_FLAGS", "").split(),
    ]
    python = [sys.executable]
    if profile == "cprofile":
        assert profile_out is not None
        python += ["-m", "cProfile", "-o", str(profile_out)]
    return Server([*python, "-m", "orderer.cli", *flags], log_path)


def start_bare(log_path: Path, durable: Path | None = None) -> Server:
    """The bare peer (this file, ``--bare-server``); with ``durable`` a directory, the durable
    one, which appends every message to a file there and syncs before it acknowledges."""
    flags = [] if durable is None else ["--durable", str(durable)]
    return Server(
        [sys.executable, str(Path(__file__).resolve()), "--bare-server", *flags], log_path
    )


class PySpy:
    """``py-spy record`` attached to a process, collapsed stacks, until stopped."""

    def __init__(self, pid: int, out: Path) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.out = out
        self.process = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
             "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        time.sleep(0.5)  # attached before the sending starts

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def summarise_collapsed(path: Path, top: int = 20) -> list[tuple[str, float, float]]:
    """(function, self %, inclusive %) of the functions with the most samples of their own in a
    collapsed-stack file, as shares of all samples; functions of threads other than the main
    one (the fsync worker, gRPC's poller) are marked ``[thread]``."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        main = stack.startswith("_run_module_as_main")
        frames = [
            ("" if main else "[thread] ") + frame.rsplit(":", 1)[0] + ")"
            if ":" in frame else frame
            for frame in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return []
    return [(f, 100 * n / total, 100 * inclusive[f] / total) for f, n in own.most_common(top)]


# ---------------------------------------------------------------------------------- sender


@dataclasses.dataclass
class Sent:
    seconds: float  # first write to every fragment emitted and durable
    writes_seconds: float  # first write to the last write
    fragments: int
    wire_bytes: int
    sender_cpu: float
    server_cpu: float
    server_loop_cpu: float = 0.0  # the server's main (event-loop) thread alone
    server_threads: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    """Each server thread's name and CPU seconds, busiest first."""
    started: float = 0.0  # time.monotonic() of the start
    send_times: list[float] | None = None  # per message, paced phases
    xoff_at: float | None = None
    xoff_events: int = 0
    replies: int = 0  # SubmitReply messages received (acks, flow control)


class StreamState:
    """One ``Submit`` stream: its sources' pause states, the acks seen."""

    def __init__(self) -> None:
        self.paused: set[int] = set()
        self.resumed = asyncio.Event()
        self.acked: dict[int, int] = {}
        self.xoff_events = 0
        self.first_xoff: float | None = None
        self.replies = 0

    async def read(self, call: Any) -> None:
        async for reply in call:
            self.replies += 1
            item = reply.WhichOneof("item")
            if item == "ack":
                self.acked[reply.ack.source] = reply.ack.durable_sequence
            elif item == "flow_control":
                source, paused = reply.flow_control.source, reply.flow_control.paused
                if paused:
                    self.paused.add(source)
                    self.xoff_events += 1
                    if self.first_xoff is None:
                        self.first_xoff = time.monotonic()
                else:
                    self.paused.discard(source)
                    self.resumed.set()


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def stats(channel: grpc.aio.Channel) -> pb.Stats:
    call = channel.unary_unary(
        STATS,
        request_serializer=pb.GetStatsRequest.SerializeToString,
        response_deserializer=pb.Stats.FromString,
    )
    return await call(pb.GetStatsRequest(), timeout=30, wait_for_ready=True)


async def _end_sources(channel: grpc.aio.Channel, sources: list[int]) -> None:
    """End of source for each of ``sources`` on a stream of its own; returns once durable."""
    call = channel.stream_stream(
        SUBMIT, request_serializer=None, response_deserializer=pb.SubmitReply.FromString
    )()
    for source in sources:
        await call.write(_control("end", source))
    await call.done_writing()
    async for _ in call:
        pass


async def wait_offset(channel: grpc.aio.Channel, wanted: int, timeout: float = 300.0) -> float:
    """Poll ``GetStats`` until ``next_offset`` (durable output) reaches ``wanted``; the time."""
    give_up = time.monotonic() + timeout
    while True:
        reply = await stats(channel)
        if reply.next_offset >= wanted:
            return time.monotonic()
        if time.monotonic() > give_up:
            raise SystemExit(f"output stuck at {reply.next_offset} of {wanted}")
        await asyncio.sleep(0.002)


async def send(
    target: str,
    messages: list[Message],
    sources: tuple[int, ...],
    server: Server,
    *,
    streams: int,
    paced: bool = False,
    honour_flow: bool = False,
    deadline: float | None = None,
    end_sources: bool = True,
    expect: int | None = None,
) -> Sent:
    """Write ``messages`` on ``streams`` Submit streams (source ``s`` on stream ``i % streams``
    for the i-th source), then end every source and close the streams; return once ``GetStats``
    shows ``expect`` fragments of durable output (default: all of them)."""
    stream_of = {source: i % streams for i, source in enumerate(sources)}
    queues: list[list[int]] = [[] for _ in range(streams)]
    for index, message in enumerate(messages):
        queues[stream_of[message.source]].append(index)
    channels = [grpc.aio.insecure_channel(target, options=OPTIONS) for _ in range(streams)]
    control = grpc.aio.insecure_channel(target, options=OPTIONS)
    try:
        await stats(control)  # connected and serving
        for channel in channels:
            await channel.channel_ready()
        submits = [
            ch.stream_stream(SUBMIT, request_serializer=None,
                             response_deserializer=pb.SubmitReply.FromString)
            for ch in channels
        ]
        calls = [submit() for submit in submits]
        states = [StreamState() for _ in range(streams)]
        readers = [asyncio.create_task(s.read(c)) for s, c in zip(states, calls, strict=True)]
        send_times = [0.0] * len(messages)
        written = [0] * streams
        stop_at = None if deadline is None else time.monotonic() + deadline
        gc.collect()
        cpu0, server_cpu0, loop_cpu0 = _cpu_self(), server.cpu(), server.loop_cpu()
        threads0 = server.thread_cpu()
        start = time.monotonic()

        async def writer(i: int) -> None:
            call, state = calls[i], states[i]
            for index in queues[i]:
                message = messages[index]
                if paced:
                    delay = start + message.at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if honour_flow:
                    while message.source in state.paused:
                        state.resumed.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(state.resumed.wait(), 0.05)
                        if stop_at is not None and time.monotonic() > stop_at:
                            break
                if stop_at is not None and time.monotonic() > stop_at:
                    break
                send_times[index] = time.monotonic()
                await call.write(message.data)
                written[i] += message.count
            if end_sources:
                for source, stream in stream_of.items():
                    if stream == i:
                        await call.write(_control("end", source))
            await call.done_writing()

        await asyncio.gather(*(writer(i) for i in range(streams)))
        writes_done = time.monotonic()
        total = sum(written)
        done = await wait_offset(control, total if expect is None else expect)
        cpu1, server_cpu1, loop_cpu1 = _cpu_self(), server.cpu(), server.loop_cpu()
        threads = _thread_use(threads0, server.thread_cpu())
        for reader in readers:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await asyncio.wait_for(reader, 60)
        xoffs = [s.first_xoff for s in states if s.first_xoff is not None]
        return Sent(
            seconds=done - start,
            writes_seconds=writes_done - start,
            fragments=total,
            wire_bytes=sum(
                len(messages[k].data) for q in queues for k in q if send_times[k]
            ),
            sender_cpu=cpu1 - cpu0,
            server_cpu=server_cpu1 - server_cpu0,
            server_loop_cpu=loop_cpu1 - loop_cpu0,
            server_threads=threads,
            started=start,
            send_times=send_times if paced else None,
            xoff_at=min(xoffs) - start if xoffs else None,
            xoff_events=sum(s.xoff_events for s in states),
            replies=sum(s.replies for s in states),
        )
    finally:
        for channel in [*channels, control]:
            await channel.close()


async def send_with_client(
    target: str, data: Data, server: Server, *, streams: int, batches: list[FragmentBatch]
) -> Sent:
    """Phase 1b: the same batches through ``AsyncSourceClient`` (one client per stream)."""
    from orderer.client import AsyncSourceClient

    sources = data.sources
    stream_of = {source: i % streams for i, source in enumerate(sources)}
    clients = [
        AsyncSourceClient(
            target,
            sources=[s for s in sources if stream_of[s] == i],
            batch_size=max(len(b) for b in batches),
            linger=None,
        )
        for i in range(streams)
    ]
    control = grpc.aio.insecure_channel(target, options=OPTIONS)
    try:
        for client in clients:
            await client.start()
        for client in clients:  # the hellos are answered: every source knows its sequence
            for source in sources:
                while client.registered(source) and client.next_sequence(source) is None:
                    await asyncio.sleep(0.001)
        gc.collect()
        cpu0, server_cpu0, loop_cpu0 = _cpu_self(), server.cpu(), server.loop_cpu()
        threads0 = server.thread_cpu()
        start = time.monotonic()

        async def feed(i: int) -> None:
            client = clients[i]
            for batch in batches:
                if stream_of[int(batch.source[0])] == i:
                    await client.send_fragments(batch)
                    await asyncio.sleep(0)  # a producer yields: the writer ships meanwhile
            for source, stream in stream_of.items():
                if stream == i:
                    await client.end_source(source)

        await asyncio.gather(*(feed(i) for i in range(streams)))
        writes_done = time.monotonic()
        done = await wait_offset(control, data.fragments)
        cpu1, server_cpu1, loop_cpu1 = _cpu_self(), server.cpu(), server.loop_cpu()
        threads = _thread_use(threads0, server.thread_cpu())
        for client in clients:
            await client.close()
        return Sent(
            seconds=done - start,
            writes_seconds=writes_done - start,
            fragments=data.fragments,
            wire_bytes=sum(len(m.data) for m in data.batches),
            sender_cpu=cpu1 - cpu0,
            server_cpu=server_cpu1 - server_cpu0,
            server_loop_cpu=loop_cpu1 - loop_cpu0,
            server_threads=threads,
        )
    finally:
        for client in clients:
            await client.abort()
        await control.close()


# ---------------------------------------------------------------------------------- phases


def _throughput(sent: Sent, payload_size: int) -> dict[str, Any]:
    return {
        "payload_bytes": payload_size,
        "fragments": sent.fragments,
        "seconds": sent.seconds,
        "writes_seconds": sent.writes_seconds,
        "fragments_per_s": sent.fragments / sent.seconds,
        "payload_mb_per_s": sent.fragments * payload_size / sent.seconds / 1e6,
        "wire_mb_per_s": sent.wire_bytes / sent.seconds / 1e6,
        "server_cpu_s": sent.server_cpu,
        "sender_cpu_s": sent.sender_cpu,
        "server_cpu_us_per_1000": 1e9 * sent.server_cpu / sent.fragments,
        "server_loop_cpu_us_per_1000": 1e9 * sent.server_loop_cpu / sent.fragments,
        "server_busiest_thread": sent.server_threads[0][0] if sent.server_threads else "",
        "server_busiest_thread_cpu_us_per_1000": (
            1e9 * sent.server_threads[0][1] / sent.fragments if sent.server_threads else 0.0
        ),
        "server_threads_us_per_1000": [
            (name, 1e9 * cpu / sent.fragments) for name, cpu in sent.server_threads
            if 1e9 * cpu / sent.fragments >= 1.0
        ],
        "sender_cpu_us_per_1000": 1e9 * sent.sender_cpu / sent.fragments,
        "replies_per_1000": 1e3 * sent.replies / sent.fragments,
    }


def _drive(
    args: argparse.Namespace, data: Data, server: Server, spy: PySpy | None = None
) -> Sent:
    """Phase 1, 2 or 2b's sender against ``server``, which is stopped after (``spy`` first).
    On a failure the end of the server's log goes to stderr: the work directory, logs and all,
    is gone once the benchmark exits."""
    failed = True
    try:
        sent = asyncio.run(send(server.target, data.batches, data.sources, server,
                                streams=args.streams))
        failed = False
        return sent
    finally:
        if spy is not None:
            spy.stop()
        server.stop()
        if failed:
            sys.stderr.write(f"--- the end of {server.log_path.name}:\n{server.log_tail()}")


def _ingest_once(
    args: argparse.Namespace, data: Data, work: Path, tag: str, profile: str | None
) -> dict[str, Any]:
    """1. One run of evb serve on a fresh data directory, raw stubs, everything, ends; until
    durable. Also the bytes evb's logs hold afterwards (``data_dir_bytes``)."""
    data_dir = work / f"ingest-{tag}"
    profile_out = args.profile_out if profile else None
    server = start_evb(data_dir, work / f"ingest-{tag}.log", data.sources, args.build_window,
                       profile, profile_out)
    spy = PySpy(server.pid, args.profile_out) if profile == "py-spy" else None
    figures = _throughput(_drive(args, data, server, spy), data.payload_size)
    figures["data_dir_bytes"] = sum(p.stat().st_size for p in data_dir.rglob("*.arrow"))
    shutil.rmtree(data_dir, ignore_errors=True)
    os.sync()  # the next run does not start under the writeback of this one
    return figures


def _bare_once(
    args: argparse.Namespace, data: Data, work: Path, tag: str, profile: str | None
) -> dict[str, Any]:
    """2. One run of the bare grpc.aio peer, same sender (``profile``: not for this one)."""
    server = start_bare(work / f"bare-{tag}.log")
    return _throughput(_drive(args, data, server), data.payload_size)


def _durable_once(
    args: argparse.Namespace, data: Data, work: Path, tag: str, profile: str | None
) -> dict[str, Any]:
    """2b. One run of the durable bare peer (every message appended to one file, acknowledged
    once an fdatasync covers it), same sender; also the bytes its file holds afterwards."""
    directory = work / f"durable-{tag}"
    directory.mkdir()
    server = start_bare(work / f"durable-{tag}.log", durable=directory)
    figures = _throughput(_drive(args, data, server), data.payload_size)
    figures["file_bytes"] = sum(p.stat().st_size for p in directory.iterdir())
    shutil.rmtree(directory, ignore_errors=True)
    os.sync()
    return figures


SWEEP_PHASES = {"ingest": _ingest_once, "bare": _bare_once, "durable": _durable_once}
"""The phases of the payload sweep, in the order of a first round."""


def sweep_fragments(args: argparse.Namespace, payload: int) -> int:
    """Fragments sent at one payload size: ``--fragments``, fewer where that would be more than
    ``--bytes-budget`` bytes of payload, so every size sends about the same bytes (and the
    pre-encoded messages of the largest fit in memory)."""
    return max(args.sources, min(args.fragments, args.bytes_budget // payload))


def sweep_point(
    args: argparse.Namespace, data: Data, work: Path, phases: list[str], profile: bool
) -> dict[str, Any]:
    """Phases 1, 2 and 2b at one payload size, alternated: round k runs them in order, round
    k + 1 in the reverse order (whatever drifts over a run, page cache, writeback, a noisy
    neighbour, falls on each alike); best of ``--repeat`` rounds each. ``profile``: the first
    evb run is profiled (``--profile``)."""
    best: dict[str, dict[str, Any]] = {}
    for attempt in range(args.repeat):
        order = phases if attempt % 2 == 0 else phases[::-1]
        tag = f"{data.payload_size}-{attempt}"
        for name in order:
            spy = args.profile if profile and name == "ingest" and attempt == 0 else None
            figures = SWEEP_PHASES[name](args, data, work, tag, spy)
            if name not in best or figures["fragments_per_s"] > best[name]["fragments_per_s"]:
                best[name] = figures
    if profile and args.profile and "ingest" in best:  # of the first run, maybe not the best
        best["ingest"]["profile"] = str(args.profile_out)
        if args.profile == "py-spy" and args.profile_out.exists():
            best["ingest"]["profile_top"] = summarise_collapsed(args.profile_out)
    payload_bytes = data.fragments * data.payload_size
    point: dict[str, Any] = {
        "payload_bytes": data.payload_size,
        "fragments": data.fragments,
        "payload_total_bytes": payload_bytes,
        "wire_bytes": sum(len(m.data) for m in data.batches),
        **best,
    }
    ingest, bare, durable = best.get("ingest"), best.get("bare"), best.get("durable")
    if ingest and bare:
        point["ratio_evb_over_bare"] = ingest["fragments_per_s"] / bare["fragments_per_s"]
    if ingest and durable:
        point["ratio_evb_over_durable"] = ingest["fragments_per_s"] / durable["fragments_per_s"]
    if ingest:
        point["evb_data_dir_bytes_per_payload_byte"] = ingest["data_dir_bytes"] / payload_bytes
    if durable:
        point["durable_file_bytes_per_payload_byte"] = durable["file_bytes"] / payload_bytes
    return point


def phase_client(args: argparse.Namespace, data: Data, work: Path) -> dict[str, Any]:
    """1b. The same through the client library."""
    batches = []
    for message in data.batches:
        request = pb.SubmitRequest.FromString(message.data)
        batches.append(convert.batch_from_pb(request.batch).batch)
    best: dict[str, Any] | None = None
    for attempt in range(args.repeat):
        data_dir = work / f"client-{attempt}"
        server = start_evb(data_dir, work / f"client-{attempt}.log", data.sources,
                           args.build_window)
        try:
            sent = asyncio.run(send_with_client(server.target, data, server,
                                                streams=args.streams, batches=batches))
        finally:
            server.stop()
            shutil.rmtree(data_dir, ignore_errors=True)
            os.sync()
        figures = _throughput(sent, data.payload_size)
        if best is None or figures["fragments_per_s"] > best["fragments_per_s"]:
            best = figures
    assert best is not None
    return best


async def _clock_offset(target: str, samples: int = 20) -> tuple[float, float]:
    """``server clock - time.monotonic()`` from the fastest GetStats round trip, and that RTT
    (the offset is good to half of it)."""
    best = (0.0, float("inf"))
    async with grpc.aio.insecure_channel(target, options=OPTIONS) as channel:
        for _ in range(samples):
            t0 = time.monotonic()
            reply = await stats(channel)
            t1 = time.monotonic()
            if t1 - t0 < best[1]:
                best = (reply.now - (t0 + t1) / 2, t1 - t0)
    return best


async def _subscribe(target: str, record: list[tuple[float, int, int]]) -> None:
    """Receive the ordered output from offset 0 until cancelled; (time, first offset, count)."""
    async with grpc.aio.insecure_channel(target, options=OPTIONS) as channel:
        call = channel.unary_stream(
            SUBSCRIBE,
            request_serializer=pb.SubscribeRequest.SerializeToString,
            response_deserializer=pb.OrderedBatch.FromString,
        )(pb.SubscribeRequest(from_offset=0), wait_for_ready=True)
        async for message in call:
            record.append((time.monotonic(), message.first_offset, len(message.timestamps) // 8))


class _Pinger:
    """``GetStats`` round trips every 10 ms while in the block; ``worst`` is the longest (how
    long the server's loop left a caller waiting)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with grpc.aio.insecure_channel(self.target, options=OPTIONS) as channel:
            while True:
                t0 = time.monotonic()
                await stats(channel)
                self.worst = max(self.worst, time.monotonic() - t0)
                await asyncio.sleep(0.01)

    async def __aenter__(self) -> _Pinger:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0.05)  # connected
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def _per_source_rank(source: np.ndarray) -> np.ndarray:
    """Position of each row among the rows of its source (rows in their order)."""
    order = np.argsort(source, kind="stable")
    ranks = np.empty(len(source), dtype=np.int64)
    sorted_sources = source[order]
    starts = np.flatnonzero(np.r_[True, sorted_sources[1:] != sorted_sources[:-1]])
    lengths = np.diff(np.r_[starts, len(source)])
    ranks[order] = np.arange(len(source)) - np.repeat(starts, lengths)
    return ranks


def _quantiles(values: np.ndarray) -> dict[str, float]:
    """Quantiles in ms of what is known (NaN: not measured, e.g. never delivered)."""
    values = values[~np.isnan(values)]
    if not len(values):
        return {name: float("nan") for name in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
    p50, p99, p999 = np.quantile(values, [0.5, 0.99, 0.999])
    return {"p50_ms": 1e3 * float(p50), "p99_ms": 1e3 * float(p99),
            "p999_ms": 1e3 * float(p999), "max_ms": 1e3 * float(values.max()),
            "mean_ms": 1e3 * float(values.mean()), "min_ms": 1e3 * float(values.min()),
            "count": len(values)}


def _parse_points(text: str) -> list[tuple[float, int]]:
    points = []
    for part in text.split(","):
        rate, _, batch = part.strip().partition("@")
        points.append((float(rate), int(batch)))
    return points


def phase_latency(args: argparse.Namespace, data: Data, work: Path) -> list[dict[str, Any]]:
    """3. Paced loads (``--latency-points``), each on a fresh server."""
    return [
        latency_point(args, data, work, rate, batch)
        for rate, batch in _parse_points(args.latency_points)
    ]


def latency_point(
    args: argparse.Namespace, data: Data, work: Path, rate: float, batch: int
) -> dict[str, Any]:
    """One paced load; latencies from the logs, the send times and a subscriber."""
    from orderer.batch import ArrivalKind
    from orderer.service.logs import ArrivalLog, OrderedLog

    messages = paced_messages(data, rate, batch, args.latency_seconds)
    data_dir = work / "latency"
    server = start_evb(data_dir, work / f"latency-{rate:g}-{batch}.log", data.sources,
                       args.build_window)
    delivered: list[tuple[float, int, int]] = []

    async def run() -> tuple[Sent, float, float]:
        offset, rtt = await _clock_offset(server.target)
        subscriber = asyncio.create_task(_subscribe(server.target, delivered))
        sent = await send(server.target, messages, data.sources, server, streams=args.streams,
                          paced=True, deadline=args.latency_seconds * 3)
        try:
            while not delivered or delivered[-1][1] + delivered[-1][2] < sent.fragments:
                await asyncio.sleep(0.01)
        finally:
            subscriber.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await subscriber
        return sent, offset, rtt

    try:
        sent, offset, rtt = asyncio.run(run())
    finally:
        server.stop()
    assert sent.send_times is not None
    send_times = np.asarray(sent.send_times)
    was_sent = send_times > 0
    counts = np.asarray([m.count for m in messages])[was_sent]
    total = int(counts.sum())
    # arrival and emission per fragment, matched per source in order
    arrivals = ArrivalLog.open(data_dir / "arrivals")
    columns: dict[str, list[np.ndarray]] = defaultdict(list)
    for record in arrivals.batches():
        keep = record.column("kind").to_numpy() == ArrivalKind.FRAGMENT
        for name in ("t", "source", "value"):
            columns[name].append(record.column(name).to_numpy()[keep])
    arrivals.close()
    a_t, a_source, a_ts = (np.concatenate(columns[k]) for k in ("t", "source", "value"))
    ordered = OrderedLog.open(data_dir / "ordered")
    out = ordered.read(0, ordered.next_offset)
    ordered.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    os.sync()
    if len(out) != total or len(a_t) != total:
        raise SystemExit(f"latency: {len(a_t)} arrived, {len(out)} emitted of {total} sent")
    # the k-th fragment of a source to arrive is its k-th emitted (nothing is late here) and
    # its k-th sent (a source is on one stream, whose messages go out in order)
    o_order = np.argsort(out.source.astype(np.int64) << 32 | _per_source_rank(out.source))
    a_order = np.argsort(a_source.astype(np.int64) << 32 | _per_source_rank(a_source))
    if not np.array_equal(a_ts[a_order], out.timestamp[o_order]):
        raise SystemExit("latency: arrival and ordered logs do not match per source")
    arrival = np.empty(total)
    arrival[o_order] = a_t[a_order]  # everything indexed by output offset from here
    emit = out.t
    s_source = np.repeat([m.source for m, ok in zip(messages, was_sent, strict=True) if ok],
                         counts)
    s_time = np.repeat(send_times[was_sent] + offset, counts)  # on the server's clock
    sent_at = np.empty(total)
    sent_at[o_order] = s_time[np.argsort(s_source.astype(np.int64) << 32
                                         | _per_source_rank(s_source))]
    recv = np.full(total, np.nan)
    for when, first, n in delivered:
        recv[first : first + n] = when + offset
    lag = send_times[was_sent] - sent.started - np.asarray([m.at for m in messages])[was_sent]
    # the first moments of a fresh server (connections, first segments, lazy imports) are
    # not the steady state: left out of the figures, their worst reported on its own
    steady = sent_at >= sent.started + offset + args.latency_warmup
    warm = {"arrival": arrival[~steady], "sent": sent_at[~steady]}
    arrival, emit, sent_at, recv = arrival[steady], emit[steady], sent_at[steady], recv[steady]
    return {
        "offered_fragments_per_s": rate,
        "message_fragments": batch,
        "messages_per_s": rate / batch,
        "source_interval_ms": 1e3 * batch * len(data.sources) / rate,
        "seconds_of_schedule": args.latency_seconds,
        "messages": int(was_sent.sum()),
        "messages_not_sent_by_the_deadline": int((~was_sent).sum()),
        "fragments": total,
        "writes_seconds": sent.writes_seconds,
        "achieved_fragments_per_s": total / sent.writes_seconds,
        "late": int(out.late.sum()),
        "clock_rtt_ms": 1e3 * rtt,
        "server_cpu_s": sent.server_cpu,
        "sender_lag_p50_ms": 1e3 * float(np.quantile(lag, 0.5)),
        "sender_lag_max_ms": 1e3 * float(lag.max()),
        "warmup_seconds": args.latency_warmup,
        "warmup_fragments_left_out": len(warm["sent"]),
        "warmup_send_to_arrival_max_ms": (
            1e3 * float((warm["arrival"] - warm["sent"]).max()) if len(warm["sent"]) else 0.0
        ),
        "arrival_to_emission": _quantiles(emit - arrival),
        "send_to_arrival": _quantiles(arrival - sent_at),
        "send_to_emission": _quantiles(emit - sent_at),
        "emission_to_delivered": _quantiles(recv - emit),
        "send_to_delivered": _quantiles(recv - sent_at),
    }


def phase_stall(args: argparse.Namespace, data: Data, work: Path) -> dict[str, Any]:
    """4. A declared source never sends; the others stream; RSS sampled."""
    silent = max(data.sources) + 1
    data_dir = work / "stall"
    server = start_evb(data_dir, work / "stall.log", (*data.sources, silent), args.stall_window)
    samples: list[tuple[float, int, int]] = []  # (seconds, rss, queued)

    async def run() -> dict[str, Any]:
        baseline = server.rss()
        stop = asyncio.Event()
        start = time.monotonic()
        queued = [0]

        async def sample() -> None:
            async with grpc.aio.insecure_channel(server.target, options=OPTIONS) as channel:
                tick = 0
                while not stop.is_set():
                    if tick % 10 == 0:
                        with contextlib.suppress(grpc.aio.AioRpcError):
                            queued[0] = (await stats(channel)).queued
                    samples.append((time.monotonic() - start, server.rss(), queued[0]))
                    tick += 1
                    await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        sent = await send(server.target, data.batches, data.sources, server,
                          streams=args.streams, honour_flow=True, deadline=args.stall_seconds,
                          end_sources=False, expect=0)
        streamed = time.monotonic() - start
        end_rss = server.rss()
        async with grpc.aio.insecure_channel(server.target, options=OPTIONS) as channel:
            before = await stats(channel)
            peak_during = max((s[1] for s in samples), default=0)
            # the stalled source ends: one flush emits everything up to the mark the others
            # now fix (their fragments above it stay queued); returns once that is durable.
            # GetStats pings meanwhile tell how long the server's loop does not answer.
            drain_start = time.monotonic()
            async with _Pinger(server.target) as drain_ping:
                await _end_sources(channel, [silent])
            drained = time.monotonic() - drain_start
            released = await stats(channel)
            # ... and once every source has ended, everything is out
            await _end_sources(channel, list(data.sources))
            await wait_offset(channel, sent.fragments, timeout=120)
            finished = time.monotonic() - drain_start
            after = await stats(channel)
            # a consumer then reads the run back with Subscribe
            record: list[tuple[float, int, int]] = []
            read_start = time.monotonic()
            async with _Pinger(server.target) as read_ping:
                reader = asyncio.create_task(_subscribe(server.target, record))
                while not record or record[-1][1] + record[-1][2] < sent.fragments:
                    if reader.done():
                        reader.result()
                        raise SystemExit("stall: Subscribe ended early")
                    await asyncio.sleep(0.01)
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await reader
            read_back = time.monotonic() - read_start
        stop.set()
        await sampler
        peak_all = max((s[1] for s in samples), default=0)
        return {
            "rss_peak_with_release_and_read_back_mb": peak_all / 2**20,
            "stall_seconds": args.stall_seconds,
            "build_window": args.stall_window,
            "streamed_seconds": streamed,
            "fragments_sent": sent.fragments,
            "xoff_after_s": sent.xoff_at,
            "xoff_messages": sent.xoff_events,
            "queued_at_end": int(before.queued),
            "paused_sources_at_end": sum(1 for s in before.sources if s.paused),
            "rss_baseline_mb": baseline / 2**20,
            "rss_peak_mb": peak_during / 2**20,
            "rss_end_of_stall_mb": end_rss / 2**20,
            "rss_after_read_back_mb": server.rss() / 2**20,
            "drain_seconds": drained,
            "emitted_by_the_release": int(released.next_offset),
            "queued_after_release": int(released.queued),
            "all_out_seconds": finished,
            "emitted_at_the_end": int(after.next_offset),
            "release_stats_rtt_max_ms": 1e3 * drain_ping.worst,
            "read_back_seconds": read_back,
            "read_back_replies": len(record),
            "read_back_stats_rtt_max_ms": 1e3 * read_ping.worst,
        }

    try:
        figures = asyncio.run(run())
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        os.sync()
    # the RSS curve, thinned to about one point a second
    step = max(1, len(samples) // max(1, int(samples[-1][0]) if samples else 1))
    figures["rss_curve_mb"] = [
        [round(t, 2), round(rss / 2**20, 1), queued] for t, rss, queued in samples[::step]
    ]
    streamed = figures["streamed_seconds"]
    half = [s[1] for s in samples if streamed / 2 <= s[0] <= streamed]
    figures["rss_peak_second_half_mb"] = max(half, default=0) / 2**20
    return figures


# ---------------------------------------------------------------------------------- bare peer


class _Stream:
    """One ``Submit`` stream of a bare peer: the acks it owes, what is not yet durable."""

    def __init__(self) -> None:
        self.acks: dict[int, int] = {}  # source -> sequence to acknowledge
        self.wake = asyncio.Event()
        self.reading = True
        self.unsynced = 0  # messages taken in and not yet durable (the durable peer)

    def ack(self, source: int, sequence: int) -> None:
        self.acks[source] = sequence
        self.wake.set()

    async def replies(self) -> AsyncIterator[pb.SubmitReply]:
        """The acks, one per source per wake-up, like evb; ends once the client has closed
        its side and everything it sent is acknowledged."""
        while True:
            if self.acks:
                source, sequence = self.acks.popitem()
                yield pb.SubmitReply(ack=pb.Ack(source=source, durable_sequence=sequence))
            elif not self.reading and not self.unsynced:
                return
            else:
                self.wake.clear()
                await self.wake.wait()


class BareServicer(pb_grpc.OrdererServicer):
    """Parses, counts and acknowledges; nothing else."""

    def __init__(self) -> None:
        self.fragments = 0

    async def Submit(self, request_iterator: Any, context: Any) -> Any:
        stream = _Stream()

        async def read() -> None:
            async for request in request_iterator:
                if request.WhichOneof("item") == "batch":
                    batch = request.batch
                    n = len(batch.timestamps) >> 3
                    self.fragments += n
                    stream.ack(batch.source, batch.first_sequence + n)
            stream.reading = False
            stream.wake.set()

        reader = asyncio.create_task(read())
        try:
            async for reply in stream.replies():
                yield reply
        finally:
            reader.cancel()

    async def GetStats(self, request: Any, context: Any) -> pb.Stats:
        return pb.Stats(next_offset=self.fragments, now=time.monotonic())


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """Append ``buffers`` to ``fd``: ``writev`` of up to ``IOV_MAX`` at a time; what a short
    write leaves is written on."""
    step = os.sysconf("SC_IOV_MAX")
    for start in range(0, len(buffers), step):
        chunk = buffers[start : start + step]
        written = os.writev(fd, chunk)
        for data in chunk:
            if written >= len(data):
                written -= len(data)
                continue
            rest = memoryview(data)[written:]
            written = 0
            while rest:
                rest = rest[os.write(fd, rest) :]


class GroupSync:
    """Every Submit message appended once to one file and made durable in rounds, as evb's
    group commit does: what a round's fdatasync covers is acknowledged only once it returns,
    and one sync covers however many messages came while the one before ran.

    The event loop only stages messages (the bare peer's work, and no more). A writer thread
    appends whatever is staged to the file, continuously; a sync thread fdatasyncs, each sync
    covering everything written before it started, then the acks owed for that are released.
    Writing and syncing overlap, so the disk is never idle while messages wait: the limit of a
    server that writes each byte once and syncs like evb, not a copy of evb's own rounds.

    Owed acks are kept per message (stream, source, sequence) and released in order, so a
    source's ack never runs ahead of what is on disk. A failed write or sync ends the rounds
    with its error, and the server with them (as in evb, where a failed fsync is fatal)."""

    FILE = "submits.bin"

    def __init__(self, directory: Path) -> None:
        self.fd = os.open(directory / self.FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.durable_fragments = 0
        self._staged: list[bytes] = []
        self._owed: deque[tuple[_Stream, int | None, int, int]] = deque()  # in staging order
        self._written = 0  # messages written, in all
        self._synced = 0  # messages synced, in all
        self._staged_more = asyncio.Event()
        self._written_more = asyncio.Event()
        self._writer = single_thread("bare-write")
        self._syncer = single_thread("bare-sync")

    def stage(self, data: bytes, stream: _Stream, source: int | None, sequence: int,
              fragments: int) -> None:
        """Take in one message: ``source`` None for one that is not a batch (nothing to ack,
        but it is written and the stream waits for it all the same)."""
        self._staged.append(data)
        self._owed.append((stream, source, sequence, fragments))
        stream.unsynced += 1
        self._staged_more.set()

    async def run(self) -> None:
        """Write and sync until cancelled or a write or sync fails."""
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._writes())
                tasks.create_task(self._syncs())
        finally:
            self._writer.shutdown(wait=True)
            self._syncer.shutdown(wait=True)
            os.close(self.fd)

    async def _writes(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._staged_more.wait()
            self._staged_more.clear()
            staged, self._staged = self._staged, []
            await loop.run_in_executor(self._writer, _write_all, self.fd, staged)
            self._written += len(staged)
            self._written_more.set()

    async def _syncs(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._written_more.wait()
            self._written_more.clear()
            covered = self._written  # all of it written before the sync starts
            await loop.run_in_executor(self._syncer, os.fdatasync, self.fd)
            for _ in range(covered - self._synced):
                stream, source, sequence, fragments = self._owed.popleft()
                stream.unsynced -= 1
                self.durable_fragments += fragments
                if source is not None:
                    stream.ack(source, sequence)
                else:
                    stream.wake.set()  # the stream may be done
            self._synced = covered


class DurableServicer:
    """The bare peer plus the disk: each Submit message, taken as raw bytes, is parsed for what
    its ack needs (as :class:`BareServicer` parses it) and appended to :class:`GroupSync`'s file
    as received, each payload byte written once; acknowledged once synced. ``GetStats`` counts
    the durable fragments, so the sender's clock stops at durable, as with evb."""

    def __init__(self, sync: GroupSync) -> None:
        self.sync = sync

    async def Submit(self, request_iterator: Any, context: Any) -> Any:
        stream = _Stream()

        async def read() -> None:
            async for data in request_iterator:
                request = pb.SubmitRequest.FromString(data)
                if request.WhichOneof("item") == "batch":
                    batch = request.batch
                    n = len(batch.timestamps) >> 3
                    self.sync.stage(data, stream, batch.source, batch.first_sequence + n, n)
                else:
                    self.sync.stage(data, stream, None, 0, 0)
            stream.reading = False
            stream.wake.set()

        reader = asyncio.create_task(read())
        try:
            async for reply in stream.replies():
                yield reply
        finally:
            reader.cancel()

    async def GetStats(self, request: Any, context: Any) -> pb.Stats:
        return pb.Stats(next_offset=self.sync.durable_fragments, now=time.monotonic())

    def handler(self) -> grpc.GenericRpcHandler:
        """Submit with no request deserializer (the servicer gets each message's bytes, to
        write them as they came), GetStats as generated."""
        return grpc.method_handlers_generic_handler("evb.v1.Orderer", {
            "Submit": grpc.stream_stream_rpc_method_handler(
                self.Submit, request_deserializer=None,
                response_serializer=pb.SubmitReply.SerializeToString,
            ),
            "GetStats": grpc.unary_unary_rpc_method_handler(
                self.GetStats, request_deserializer=pb.GetStatsRequest.FromString,
                response_serializer=pb.Stats.SerializeToString,
            ),
        })


async def _bare_server(durable: Path | None) -> None:
    """Serve until SIGTERM or SIGINT; with ``durable``, the durable peer (files in it), whose
    failed write or sync ends the process with the error."""
    server = grpc.aio.server(options=OPTIONS)
    syncing: asyncio.Task[None] | None = None
    if durable is None:
        pb_grpc.add_OrdererServicer_to_server(BareServicer(), server)
    else:
        sync = GroupSync(durable)
        syncing = asyncio.create_task(sync.run())
        server.add_generic_rpc_handlers((DurableServicer(sync).handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    kind = "bare server" if durable is None else "durable bare server"
    print(f"{kind}: listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    stopping = asyncio.create_task(stop.wait())
    waits = [stopping] if syncing is None else [stopping, syncing]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    await server.stop(1)
    if syncing is not None:
        if syncing.done():
            syncing.result()  # the failed write or sync, raised
        syncing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await syncing


# ---------------------------------------------------------------------------------- report


def _rate(value: float) -> str:
    return f"{value / 1e6:,.2f} M/s"


def _mb(value: float) -> str:
    return f"{value:,.0f} MB/s"


def sweep_table(points: list[dict[str, Any]]) -> Table:
    """The payload sweep, one row a size: each server's rate (fragments and payload bytes),
    evb's over the two baselines of the same run, the servers' CPU, evb's busiest thread and
    what evb's logs hold per payload byte received."""
    table = Table(title="payload sweep: evb against the bare and the durable bare peer "
                  "(same run, same sender)", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("payload", "fragments", "evb", "bare", "durable bare", "evb /\nbare",
                 "evb /\ndurable", "server CPU\nus / 1000\nevb", "\n\nbare", "\n\ndurable",
                 "evb busiest\nthread\nus / 1000", "evb bytes\non disk /\npayload byte"):
        table.add_column(name, justify="right")

    def rate(figures: dict[str, Any] | None) -> str:
        if not figures:
            return "-"
        return f"{_rate(figures['fragments_per_s'])}\n{_mb(figures['payload_mb_per_s'])}"

    def ratio(point: dict[str, Any], key: str) -> str:
        return f"{point[key]:.2f}" if key in point else "-"

    for point in points:
        ingest = point.get("ingest")
        cpu = [
            f"{point[name]['server_cpu_us_per_1000']:,.0f}" if name in point else "-"
            for name in ("ingest", "bare", "durable")
        ]
        busiest = (f"{ingest['server_busiest_thread_cpu_us_per_1000']:,.0f}\n"
                   f"({ingest['server_busiest_thread']})" if ingest else "-")
        written = point.get("evb_data_dir_bytes_per_payload_byte")
        table.add_row(
            f"{point['payload_bytes']:,} B", f"{point['fragments']:,}", rate(ingest),
            rate(point.get("bare")), rate(point.get("durable")),
            ratio(point, "ratio_evb_over_bare"), ratio(point, "ratio_evb_over_durable"),
            *cpu, busiest, "-" if written is None else f"{written:.2f}",
        )
    return table


def report(figures: dict[str, Any], console: Console) -> None:
    table = Table(title="evb service benchmark", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("what", no_wrap=True)
    table.add_column("figure", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="center")

    def row(what: str, figure: str, target: str = "", ok: bool | None = None) -> None:
        mark = "" if ok is None else ("[green]ok[/green]" if ok else "[red]below[/red]")
        table.add_row(what, figure, target, mark)

    ingest, bare = figures.get("ingest"), figures.get("bare")
    if ingest:
        fps = ingest["fragments_per_s"]
        row(f"1. evb serve, raw stubs: {ingest['fragments']:,} fragments of "
            f"{ingest['payload_bytes']} B", _rate(fps),
            _rate(TARGET_THROUGHPUT), fps >= TARGET_THROUGHPUT)
        row("   to durable output", f"{ingest['seconds']:.2f} s")
        row("   payload / on the wire",
            f"{ingest['payload_mb_per_s']:.0f} / {ingest['wire_mb_per_s']:.0f} MB/s")
        row("   server / sender CPU per 1000 fragments",
            f"{ingest['server_cpu_us_per_1000']:.0f} / {ingest['sender_cpu_us_per_1000']:.0f} us")
        loop = ingest["server_loop_cpu_us_per_1000"]
        row("   of the server's, its event-loop thread (one core: at most)",
            f"{loop:.0f} us ({_rate(1e9 / loop) if loop else '-'})")
        row("   per server thread", _threads(ingest))
    client = figures.get("client")
    if client:
        row("1b. evb serve, orderer.client", _rate(client["fragments_per_s"]))
        row("   sender CPU / server CPU",
            f"{client['sender_cpu_s']:.1f} / {client['server_cpu_s']:.1f} s")
    if bare:
        row("2. bare grpc.aio peer", _rate(bare["fragments_per_s"]))
        row("   server / sender CPU per 1000 fragments",
            f"{bare['server_cpu_us_per_1000']:.0f} / {bare['sender_cpu_us_per_1000']:.0f} us")
        loop = bare["server_loop_cpu_us_per_1000"]
        row("   of the server's, its event-loop thread (one core: at most)",
            f"{loop:.0f} us ({_rate(1e9 / loop) if loop else '-'})")
        row("   per server thread", _threads(bare))
    if ingest and bare:
        evb_top = ingest["server_busiest_thread_cpu_us_per_1000"]
        bare_top = bare["server_busiest_thread_cpu_us_per_1000"]
        row("   busiest server thread per 1000 fragments: evb / bare peer",
            f"{evb_top:.0f} us ({ingest['server_busiest_thread']}) / "
            f"{bare_top:.0f} us ({bare['server_busiest_thread']})",
            f"{TARGET_BUSIEST_THREAD_US:g} us", evb_top <= TARGET_BUSIEST_THREAD_US)
        if bare_top:
            row("   ratio of the busiest threads evb / bare", f"{evb_top / bare_top:.2f}")
        ratio = ingest["fragments_per_s"] / bare["fragments_per_s"]
        figures["ratio_evb_over_bare"] = ratio
        row("   ratio evb / bare", f"{ratio:.2f}", f"{TARGET_RATIO:g}", ratio >= TARGET_RATIO)
        # What the target leaves for everything but the transport: the machine's cores give
        # this much CPU per 1000 fragments at the target rate; the sender and a server that
        # only receives (the bare peer) take their share first.
        budget = 1e9 * (os.cpu_count() or 1) / TARGET_THROUGHPUT
        left = budget - bare["sender_cpu_us_per_1000"] - bare["server_cpu_us_per_1000"]
        beyond = ingest["server_cpu_us_per_1000"] - bare["server_cpu_us_per_1000"]
        figures["cpu_budget_us_per_1000"] = {"at_target": budget, "left_after_transport": left,
                                             "evb_beyond_transport": beyond}
        row(f"   CPU at {_rate(TARGET_THROUGHPUT)} on {os.cpu_count()} cores, per 1000 fragments",
            f"{budget:.0f} us")
        row("   left once sender + bare transport are paid / evb uses beyond transport",
            f"{left:.0f} / {beyond:.0f} us")
    durable = figures.get("durable")
    if durable:
        row("2b. durable bare peer (each byte written once, fdatasync'd)",
            _rate(durable["fragments_per_s"]))
        row("   payload / on the wire",
            f"{durable['payload_mb_per_s']:.0f} / {durable['wire_mb_per_s']:.0f} MB/s")
        row("   server / sender CPU per 1000 fragments",
            f"{durable['server_cpu_us_per_1000']:.0f} / "
            f"{durable['sender_cpu_us_per_1000']:.0f} us")
        row("   per server thread", _threads(durable))
    if ingest and durable:
        ratio = ingest["fragments_per_s"] / durable["fragments_per_s"]
        figures["ratio_evb_over_durable"] = ratio
        row("   ratio evb / durable bare", f"{ratio:.2f}")
    for k, point in enumerate(figures.get("latency_points", [])):
        row(f"3{'abcdefgh'[k]}. paced {_rate(point['offered_fragments_per_s'])}, "
            f"{point['message_fragments']} / message (a source every "
            f"{point['source_interval_ms']:.0f} ms)", "")
        lag = point["sender_lag_max_ms"]
        row("   achieved; sender behind its schedule by",
            f"{_rate(point['achieved_fragments_per_s'])}; {lag:,.0f} ms")
        for name in ("arrival_to_emission", "send_to_arrival", "send_to_emission",
                     "emission_to_delivered", "send_to_delivered"):
            q = point[name]
            limit = _TARGETS.get(name)
            target = "" if limit is None else f"p99 {1e3 * limit:g} ms"
            ok = None if limit is None else q["p99_ms"] < 1e3 * limit
            row(f"   {name.replace('_', ' ')} p50 / p99 / max",
                f"{q['p50_ms']:,.1f} / {q['p99_ms']:,.1f} / {q['max_ms']:,.1f} ms", target, ok)
    stall = figures.get("stall")
    if stall:
        row(f"4. stalled source, {stall['stall_seconds']:g} s streaming", "")
        row("   fragments taken in / queued at the end",
            f"{stall['fragments_sent']:,} / {stall['queued_at_end']:,}")
        xoff = stall["xoff_after_s"]
        row("   first XOFF after", "none" if xoff is None else f"{xoff:.2f} s")
        row("   RSS baseline / peak / end of stall",
            f"{stall['rss_baseline_mb']:.0f} / {stall['rss_peak_mb']:.0f} / "
            f"{stall['rss_end_of_stall_mb']:.0f} MB")
        row("   the source ends: backlog emitted and durable",
            f"{stall['emitted_by_the_release']:,} in {stall['drain_seconds']:.2f} s")
        row("   GetStats unanswered meanwhile, at most",
            f"{stall['release_stats_rtt_max_ms']:,.0f} ms")
        row("   RSS peak with the release and the read back",
            f"{stall['rss_peak_with_release_and_read_back_mb']:.0f} MB")
        row("   read back with Subscribe; GetStats at most",
            f"{stall['read_back_seconds']:.2f} s; {stall['read_back_stats_rtt_max_ms']:,.0f} ms")
    console.print(table)
    if figures.get("payload_sweep"):
        console.print(sweep_table(figures["payload_sweep"]))
    top = (ingest or {}).get("profile_top")
    if top:
        profile = Table(title="where the server's time goes (py-spy, phase 1)",
                        box=box.SIMPLE_HEAD, title_justify="left")
        profile.add_column("function")
        profile.add_column("self %", justify="right")
        profile.add_column("incl %", justify="right")
        for function, own, incl in top:
            profile.add_row(function, f"{own:.1f}", f"{incl:.1f}")
        console.print(profile)


# ---------------------------------------------------------------------------------- main


PHASES = ("ingest", "client", "bare", "durable", "latency", "stall")
PAYLOADS = "32,256,1024,4096"
"""Payload sizes (bytes) of the sweep of phases 1, 2 and 2b by default."""
BYTES_BUDGET = 1 << 30
"""Payload bytes sent at one size of the sweep at most (1 GiB): the sender holds every message
of a size encoded in memory, and the fragments of the larger sizes are cut to this."""


def _payloads(text: str) -> list[int]:
    """``--payloads``: sizes in bytes, comma-separated, each at least 1."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from error
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes of at least 1 byte wanted: {text!r}")
    return list(dict.fromkeys(sizes))


def _save(figures: dict[str, Any], path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=8_000_000,
                        help="fragments in total for phases 1 and 2 (8,000,000; fewer at the "
                        "larger payloads of the sweep, see --bytes-budget)")
    parser.add_argument("--sources", type=int, default=16, help="sources (16)")
    parser.add_argument("--batch", type=int, default=1000, help="fragments per batch (1000)")
    parser.add_argument("--payload", type=int, default=32,
                        help="payload bytes of phases 1b, 3 and 4, and of the main table's "
                        "figures of 1, 2 and 2b when among --payloads (32)")
    parser.add_argument("--payloads", type=_payloads, default=_payloads(PAYLOADS),
                        help=f"payload sizes of the sweep of phases 1, 2 and 2b ({PAYLOADS})")
    parser.add_argument("--bytes-budget", type=int, default=BYTES_BUDGET,
                        help="payload bytes at one size of the sweep at most: fragments = "
                        f"min(--fragments, this / payload) ({BYTES_BUDGET:,})")
    parser.add_argument("--jitter", type=float, default=0.0005,
                        help="mean network jitter of a batch in the arrival order, s (0.0005)")
    parser.add_argument("--streams", type=int, default=4, help="Submit streams (4)")
    parser.add_argument("--build-window", type=float, default=1.0, help="seconds (1)")
    parser.add_argument("--repeat", type=int, default=2, help="best of N for 1, 1b, 2, 2b (2)")
    parser.add_argument("--data-rate", type=float, default=1e6,
                        help="fragments/s of all sources in the data's timestamps (1e6)")
    parser.add_argument("--latency-seconds", type=float, default=5.0,
                        help="seconds of the data sent paced in phase 3 (5)")
    parser.add_argument("--latency-warmup", type=float, default=0.5,
                        help="seconds at the start of each point left out of its figures (0.5)")
    parser.add_argument("--latency-points", default="1e6@250,1e6@1000,0.5e6@1000",
                        help="phase 3 loads, RATE@FRAGMENTS_PER_MESSAGE, the first the target "
                        "(1e6@250: every source sends every 4 ms)")
    parser.add_argument("--stall-seconds", type=float, default=10.0,
                        help="seconds the others stream while a source stalls (10)")
    parser.add_argument("--stall-window", type=float, default=3600.0,
                        help="build window of phase 4, s (3600: only flow control bounds it)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"which phases ({','.join(PHASES)})")
    parser.add_argument("--profile", choices=["py-spy", "cprofile"],
                        help="profile the server of phase 1 (its first run at --payload)")
    parser.add_argument("--profile-out", type=Path, default=Path("bench-output/service.prof"))
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--durable", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_server:
        asyncio.run(_bare_server(args.durable))
        return 0
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"--phases: unknown {sorted(unknown)}")
    swept = [name for name in SWEEP_PHASES if name in phases]
    # the main table's figures of 1, 2 and 2b: those at --payload, else the first size's
    main_size = args.payload if args.payload in args.payloads else args.payloads[0]
    console = Console(width=max(Console().width, 150))
    figures: dict[str, Any] = {
        "sources": args.sources,
        "fragments": args.fragments,
        "batch": args.batch,
        "payload_bytes": args.payload,
        "payload_sizes": args.payloads if swept else [],
        "bytes_budget": args.bytes_budget,
        "main_table_payload_bytes": main_size,
        "streams": args.streams,
        "build_window": args.build_window,
        "sender": "raw stubs, pre-encoded SubmitRequest bytes (1b: orderer.client)",
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    data: Data | None = None  # at --payload: phases 1b, 3 and 4
    if any(name in phases for name in ("client", "latency", "stall")):
        console.print(f"generating {args.fragments:,} fragments of {args.payload} B ...")
        data = generate(args, payload=args.payload, fragments=args.fragments)
        figures["fragments"] = data.fragments
    if args.profile:
        args.profile_out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="evb-bench-service-"))
    try:
        if swept:
            figures["payload_sweep"] = []
            console.print(f"1, 2, 2b. {', '.join(swept)} at {len(args.payloads)} payload "
                          f"size(s), alternated, best of {args.repeat} ...")
        for size in args.payloads if swept else []:
            fragments = sweep_fragments(args, size)
            if data is not None and size == args.payload and fragments == args.fragments:
                sized = data
            else:
                console.print(f"   generating {fragments:,} fragments of {size} B ...")
                sized = generate(args, payload=size, fragments=fragments, columns=False)
            console.print(f"   {size} B: {sized.fragments:,} fragments ...")
            point = sweep_point(args, sized, work, swept, profile=size == main_size)
            del sized  # the next size's messages are not generated beside this one's
            figures["payload_sweep"].append(point)
            if size == main_size:
                figures.update({name: point[name] for name in swept})
            _save(figures, args.json)  # a later phase that fails leaves the earlier figures
        steps = [
            ("client", "1b. the same through orderer.client ...", phase_client),
            ("latency", "3. latency at a paced load ...", phase_latency),
            ("stall", "4. memory under a stalled source ...", phase_stall),
        ]
        for name, title, phase in steps:
            if name in phases:
                assert data is not None
                console.print(title)
                figures[name] = phase(args, data, work)
                if name == "latency":
                    figures["latency_points"] = figures["latency"]
                    figures["latency"] = figures["latency_points"][0]
                _save(figures, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(figures, console)
    _save(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
