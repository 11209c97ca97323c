"""Where the Spark job over N orderers reads (docs/scale-out.md, "The Spark source"): the run's
orderers live over gRPC (:class:`LiveHeads`, ``--target a,b,c``) or a finished run's data
directories (:class:`LogHeads`, ``--path d0,d1,d2``), for the driver's planning (slice indexes,
rows without payloads: :class:`~orderer.replay.unit_plan.HeadReader`), and for the executors'
reads of whole ranges (:class:`OrderersAt`, pickled to them); and the checks that the orderers
given are one run's, in their order (:func:`check_targets`, :func:`check_data_dirs`).

Why without pyspark: the job checks its orderers before Spark starts (a JVM start is seconds),
and the tests read N orderers through these exactly as the job does, without Spark.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from orderer.batch import EmittedBatch
from orderer.errors import ConfigError, ServiceUnavailable
from orderer.formats import log_format
from orderer.formats.payloads import ArrivalPayloads, read_ordered_range
from orderer.replay.pieces import DEFAULT_LIMIT, PieceCutter, PieceList
from orderer.replay.sliced_logs import slicing_of
from orderer.replay.slicing import Slicing
from orderer.replay.unit_plan import Range, RunStart
from orderer.spark.source.access import Outage, retried
from orderer.stats import RunSpan, SliceIndex, SliceRole

__all__ = [
    "LiveHeads",
    "LogHeads",
    "LogSpans",
    "OrderersAt",
    "RunHeads",
    "RunOrderers",
    "check_data_dirs",
    "check_targets",
    "several",
]

log = logging.getLogger("evb.spark")

def several(value: str | Path | None, flag: str) -> list[str] | None:
    """The parts of a ``--target`` or ``--path`` that names several orderers (a comma list; a
    path that exists is one, commas and all); None for one (the one-orderer job, as before)."""
    if value is None or "," not in str(value) or Path(value).exists():
        return None
    parts = [part.strip() for part in str(value).split(",")]
    if not all(parts):
        raise ConfigError(flag, str(value), "holds an empty name in its comma list")
    if len(set(parts)) != len(parts):
        raise ConfigError(flag, str(value), "names an orderer twice")
    return parts


@dataclass(frozen=True, slots=True)
class RunOrderers:
    """The run's orderers as the job found them: how the run is sliced, and whether only the
    merge's own late fragments are left out (the run's ``late_policy: drop``)."""

    slicing: Slicing
    drop_late: bool


def _check_run(config_reset: bool, late_policy: str, slicing: Slicing, flag: str, where: str) -> (
    RunOrderers
):
    if config_reset:
        raise ConfigError(
            flag, where, "is a run with reset_on_begin_run, whose merged stream forgets its "
            "high-water mark at complete begin-run barriers, which the job over several "
            "orderers does not follow yet (its late flags would differ): build it from one "
            "orderer's run, or replay it (evb replay d0,d1,d2)"
        )
    return RunOrderers(slicing, late_policy == "drop")


def check_targets(
    targets: Sequence[str], security: Any = None, connect_timeout: float | None = None
) -> RunOrderers:
    """Each target's role from its ``GetStats``: target ``k`` must be orderer ``k`` of
    ``len(targets)``, all with one slice length (refused, naming the target, as the source
    client refuses: ConfigError of ``--target``); an orderer that does not answer is
    ``ServiceUnavailable``."""
    from orderer.client import get_stats
    from orderer.client.roles import misplaced

    n = len(targets)
    roles: list[SliceRole] = []
    config = None
    for k, target in enumerate(targets):
        stats = get_stats(
            target, barrier_log_limit=1, connect_timeout=connect_timeout, security=security
        )
        role = stats.slicing
        why = misplaced(role, k, n, (roles[0] if roles else role).slice_ticks)
        if why is not None:
            raise ConfigError("--target", target, why)
        roles.append(role)
        config = config or stats.config
    assert config is not None and roles[0].slice_ticks is not None
    return _check_run(
        config.reset_on_begin_run, config.late_policy, Slicing(n, roles[0].slice_ticks),
        "--target", ",".join(targets),
    )  # fmt: skip


def check_data_dirs(data_dirs: Sequence[str]) -> RunOrderers:
    """A finished run's data directories: directory ``k`` recorded orderer ``k`` of
    ``len(data_dirs)`` (ConfigError of ``--path`` naming it otherwise), each holds an ordered
    log from offset 0 with its arrival log beside it."""
    from orderer.spark.source.access import segment_files  # the one-orderer job's check

    dirs = [Path(d) for d in data_dirs]
    for directory in dirs:
        if not directory.is_dir():
            raise ConfigError("--path", str(directory), "is not a directory")
        try:
            segment_files(directory)
        except ConfigError as error:
            raise ConfigError("--path", str(directory), error.why) from None
    slicing = slicing_of(dirs, "--path")
    config = log_format.read_parameters(dirs[0])
    assert config is not None  # slicing_of read the same file
    return _check_run(
        config.reset_on_begin_run, config.late_policy, slicing, "--path", ",".join(data_dirs)
    )


# ---------------------------------------------------------------------------- live orderers


class LiveHeads:
    """The driver's reads of the orderers live: slice indexes (every page) and rows without
    payloads."""

    __slots__ = ("_at",)

    def __init__(self, at: OrderersAt) -> None:
        self._at = at

    def index(self, orderer: int, from_slice: int) -> SliceIndex:
        from orderer.client import get_slice_index

        target = self._at.targets[orderer]
        pieces: list = []
        while True:
            reply = retried(
                functools.partial(
                    get_slice_index, target, from_slice, timeout=self._at.reconnect_timeout,
                    connect_timeout=self._at.reconnect_timeout,
                    security=self._at.channel_security(),
                ),
                target, self._at.reconnect_timeout,
            )  # fmt: skip
            if pieces and reply.pieces and reply.pieces[0].slice == pieces[-1].slice:
                pieces.pop()  # the last piece of the page before, as it stands now
            pieces.extend(reply.pieces)
            if len(reply.pieces) < DEFAULT_LIMIT:
                return SliceIndex(tuple(pieces), reply.complete, reply.next_offset)
            from_slice = reply.pieces[-1].slice

    def heads(
        self, orderer: int, first: int, until: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        batches = list(self._at.batches(orderer, first, until, payload=False))
        if not batches:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
        return (
            np.concatenate([b.timestamp for b in batches]),
            np.concatenate([b.barrier for b in batches]),
        )


class RunHeads:
    """The driver's reads of one run of the live orderers' run tables (``--follow-runs``,
    option ``run``): where the run begins in the merged stream (:attr:`start`), and each
    orderer's run cut into pieces here, from its first offset of the run on, its rows read once
    without payloads as the output grows (the orderer's own slice index runs over all its runs,
    and a piece there can hold the end of one run and the beginning of the next, or, where the
    clocks restart, the whole of the next); rows without payloads as :class:`LiveHeads`."""

    __slots__ = ("_cutters", "_live", "_pieces", "_run", "at", "start")

    def __init__(self, at: OrderersAt, run: int) -> None:
        self.at = at
        self._run = run
        self._live = LiveHeads(at)
        n = at.slicing.orderers
        spans = [self._span(k)[0] for k in range(n)]
        self._cutters = [PieceCutter(at.slicing, k) for k in range(n)]
        self._pieces = [PieceList() for _ in range(n)]
        for pieces, span in zip(self._pieces, spans, strict=True):
            pieces.next_offset = span.start_offset
        before = [self._before(k, span.start_offset) for k, span in enumerate(spans)]
        high = [h for _, h in before if h is not None]
        self.start = RunStart(
            tuple(span.start_offset for span in spans),
            sum(kept for kept, _ in before),
            max(high) if high else None,
        )

    def _span(self, orderer: int) -> tuple[RunSpan, int]:
        """The run's span in the orderer's run table, and the end of its durable output."""
        from orderer.client import get_stats

        at = self.at
        target = at.targets[orderer]
        stats = retried(
            functools.partial(
                get_stats, target, barrier_log_limit=1, timeout=at.reconnect_timeout,
                connect_timeout=at.reconnect_timeout, security=at.channel_security(),
            ),
            target, at.reconnect_timeout,
        )  # fmt: skip
        for span in stats.runs:
            if span.run == self._run:
                return span, stats.next_offset
        known = ", ".join(str(span.run) for span in stats.runs) or "none"
        raise ConfigError(
            "run", self._run, f"is not in the run table of orderer {orderer} ({target}; runs: "
            f"{known}): a run over several orderers is begun at every one"
        )

    def _before(self, orderer: int, start: int) -> tuple[int, int | None]:
        """The orderer's rows of the merged stream below ``start`` and their highest ordinary
        timestamp: from its own slice index, but for the piece the run begins in, read."""
        kept, high = 0, None
        if start == 0:
            return kept, high
        index = self._live.index(orderer, 0)
        pieces = index.pieces
        for i, piece in enumerate(pieces):
            if piece.first_offset >= start:
                break
            until = pieces[i + 1].first_offset if i + 1 < len(pieces) else index.next_offset
            if until <= start:
                kept += piece.kept
                top = piece.highest_timestamp
                if top is not None:
                    high = top if high is None else max(high, top)
                continue
            ts, barrier = self._live.heads(orderer, piece.first_offset, start)
            keep = (barrier == 0) | (self.at.slicing.owner(ts) == orderer)
            kept += int(keep.sum())
            ordinary = ts[barrier == 0]
            if ordinary.size:
                top = int(ordinary.max())
                high = top if high is None else max(high, top)
        return kept, high

    def index(self, orderer: int, from_slice: int) -> SliceIndex:
        span, durable = self._span(orderer)
        end = span.end_offset
        pieces, cutter = self._pieces[orderer], self._cutters[orderer]
        available = durable if end is None else min(end, durable)
        for batch in self.at.batches(orderer, pieces.next_offset, available, payload=False):
            pieces.fold(cutter.cut_rows(batch.first_seq, batch.timestamp, batch.barrier))
        complete = end is not None and pieces.next_offset >= end
        return pieces.read(from_slice, 2**62, complete=complete)

    def heads(
        self, orderer: int, first: int, until: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        return self._live.heads(orderer, first, until)


# ----------------------------------------------------------------------- finished run's logs


@dataclass(frozen=True, slots=True)
class LogSpans:
    """One orderer's data directory and its ordered log's segments, each with the offsets it
    holds (``first``, ``until``): what an executor needs to read a range."""

    data_dir: str
    segments: tuple[tuple[str, int, int], ...]

    def overlapping(self, first: int, until: int) -> list[Path]:
        return [Path(p) for p, lo, hi in self.segments if lo < until and hi > first]


class _Log:
    """One orderer's ordered log, read back on the driver: where each record batch lies, and
    the slice index made of it (the service's cut and fold over the log, once)."""

    def __init__(self, data_dir: Path, slicing: Slicing, orderer: int) -> None:
        self.starts: list[int] = []
        self.where: list[tuple[Path, int, pa.Schema]] = []
        cutter = PieceCutter(slicing, orderer)
        self.pieces = PieceList()
        spans = []
        expected = 0
        for segment in log_format.ordered_segments(data_dir):
            reader = log_format.SegmentReader(
                segment, log_format.ORDERED_SCHEMA, log_format.ORDERED_SCHEMA_WITH_PAYLOADS
            )
            low = None
            for position, batch in reader:
                if not batch.num_rows:
                    continue
                emitted = log_format.emitted_from_arrow(batch, payload=False)
                if emitted.first_seq != expected:
                    raise ConfigError(
                        "--path", str(data_dir), f"its ordered log holds offset "
                        f"{emitted.first_seq} where {expected} was due (retention deleted its "
                        "beginning?): the merged stream needs every orderer's output whole"
                    )
                self.starts.append(emitted.first_seq)
                assert reader.schema is not None  # set before its first batch
                self.where.append((segment, position, reader.schema))
                self.pieces.fold(cutter.cut_rows(expected, emitted.timestamp, emitted.barrier))
                low = expected if low is None else low
                expected += len(emitted)
            if low is not None:
                spans.append((str(segment), low, expected))
        self.end = expected
        self.spans = LogSpans(str(data_dir), tuple(spans))

    def heads(self, first: int, until: int) -> tuple[np.ndarray, np.ndarray]:
        ts, barrier = [], []
        at = max(0, bisect.bisect_right(self.starts, first) - 1)
        while at < len(self.starts) and self.starts[at] < until:
            segment, position, schema = self.where[at]
            batch = log_format.read_batch_at(segment, position, schema)
            emitted = log_format.emitted_from_arrow(batch, payload=False)
            low = self.starts[at]
            a, b = max(first, low) - low, min(until, low + len(emitted)) - low
            ts.append(emitted.timestamp[a:b])
            barrier.append(emitted.barrier[a:b])
            at += 1
        if not ts:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
        return np.concatenate(ts), np.concatenate(barrier)


class LogHeads:
    """The driver's reads of a finished run's data directories: each orderer's slice index made
    from its ordered log (complete: the run is over), rows without payloads."""

    __slots__ = ("_logs",)

    def __init__(self, data_dirs: Sequence[str], slicing: Slicing) -> None:
        self._logs = [_Log(Path(d), slicing, k) for k, d in enumerate(data_dirs)]

    @property
    def spans(self) -> tuple[LogSpans, ...]:
        return tuple(log.spans for log in self._logs)

    def index(self, orderer: int, from_slice: int) -> SliceIndex:
        return self._logs[orderer].pieces.read(from_slice, 2**62, complete=True)

    def heads(
        self, orderer: int, first: int, until: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        return self._logs[orderer].heads(first, until)


# ------------------------------------------------------------------------------ executors


@dataclass(frozen=True)
class OrderersAt:
    """The run's orderers as the driver and the executors reach them: live (``targets``) or a
    finished run's logs (``logs``), in index order (pickled to the executors: no channel is
    opened before a read)."""

    slicing: Slicing
    targets: tuple[str, ...] = ()
    logs: tuple[LogSpans, ...] = ()
    security: tuple[tuple[str, str], ...] = ()
    reconnect_timeout: float = 120.0
    drop_late: bool = False

    def channel_security(self) -> Any:
        from orderer.spark.source.access import channel_security

        return channel_security(self.security)

    def batches(
        self, orderer: int, first: int, until: int, *, payload: bool = True
    ) -> Iterator[EmittedBatch]:
        """A live orderer's offsets ``[first, until)``; a read the orderer broke off (killed,
        restarting) goes on from the offset it reached once the orderer is back, up to
        ``reconnect_timeout`` seconds without an answer."""
        from orderer.client import OrderedStreamReader

        outage = Outage(self.targets[orderer], self.reconnect_timeout)
        offset = first
        while offset < until:
            reader = OrderedStreamReader(
                outage.target, offset, until=until, payload=payload,
                reconnect_timeout=self.reconnect_timeout, connect_timeout=self.reconnect_timeout,
                security=self.channel_security(),
            )  # fmt: skip
            try:
                for batch in reader:
                    outage.answered()
                    offset = batch.first_seq + len(batch)
                    yield batch
                return
            except ServiceUnavailable as error:
                outage.wait_or_raise(error)

    @contextlib.contextmanager
    def reading(self) -> Iterator[Callable[[Range], Iterator[EmittedBatch]]]:
        """A read of ranges with their payloads, for one partition: a log's arrival payloads
        are opened once, at its first range, and closed at the end."""
        opened: dict[int, ArrivalPayloads] = {}

        def read(part: Range) -> Iterator[EmittedBatch]:
            if self.targets:
                yield from self.batches(part.orderer, part.first, part.until)
                return
            spans = self.logs[part.orderer]
            if part.orderer not in opened:
                opened[part.orderer] = ArrivalPayloads.of_data_dir(Path(spans.data_dir))
            segments = spans.overlapping(part.first, part.until)
            yield from read_ordered_range(
                segments, part.first, part.until, opened[part.orderer]
            )

        try:
            yield read
        finally:
            for payloads in opened.values():
                payloads.close()

