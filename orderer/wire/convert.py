"""Conversions between the gRPC messages of ``proto/evb/v1`` and the orderer's API types.

Why a module of its own: the servicer methods only convert between messages and API types, so
every check of what a client sent happens once, here, in pure functions that raise
:class:`~orderer.errors.InterfaceError` naming the proto field; the service turns that into
``INVALID_ARGUMENT``. Arrays travel as packed little-endian bytes and are read with
``numpy.frombuffer``, never one Python object per fragment. A ``Submit`` message is read from
its raw bytes by :mod:`orderer.wire.submit`, which :func:`batch_from_pb` goes through too. The
client library (:mod:`orderer.client`) uses the same functions the other way round.

Statistics and parameters cross here too: the service makes typed :mod:`orderer.stats` values,
:func:`stats_to_pb` sends them and :func:`stats_from_pb` gives them back to the client, so
nothing above the wire reads a protobuf message. The limits both ends keep are
:mod:`orderer.wire.limits` (no protobuf there).

Callers: the service's servicer (:mod:`orderer.service.servicer`) and the client library
(:mod:`orderer.client`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer._core.core import check_fragment_rules
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.config import (
    LIVE_PARAMETERS,
    SOURCE_COUNTERS,
    FlowControl,
    OrdererConfig,
    snake_case,
)
from orderer.errors import ConfigError, InterfaceError
from orderer.stats import (
    BarrierCounts,
    BarrierRecord,
    Connection,
    ConsumerState,
    OutOfOrder,
    Piece,
    RunSpan,
    SliceIndex,
    SliceRole,
    SourceStats,
    Stats,
)
from orderer.wire import submit
from orderer.wire.submit import BatchLimits, IncomingBatch

__all__ = [
    "BatchLimits",
    "IncomingBatch",
    "batch_from_pb",
    "batch_to_pb",
    "check_timestamps",
    "config_from_pb",
    "config_to_pb",
    "configure_changes_from_pb",
    "configure_request",
    "emitted_from_pb",
    "emitted_to_pb",
    "end_of_source_from_pb",
    "slice_index_from_pb",
    "slice_index_to_pb",
    "slice_role_from_pb",
    "slice_role_to_pb",
    "stats_from_pb",
    "stats_to_pb",
    "watermark_from_pb",
]

_LE_U32 = np.dtype("<u4")
_LE_U64 = np.dtype("<u8")
_LE_F64 = np.dtype("<f8")
_NO_OFFSETS = np.zeros(0, dtype=np.uint64)


_ANY_SOURCE = BatchLimits()
"""The service's default limits: any source, payloads up to 1 MiB."""


def _packed(field: str, data: bytes, dtype: np.dtype, count: int | None) -> npt.NDArray:
    """A packed little-endian column as a native array (no copy on little-endian machines)."""
    if len(data) % dtype.itemsize:
        raise InterfaceError(
            f"{field}: {len(data)} bytes is not a whole number of {dtype.itemsize}-byte values"
        )
    array = np.frombuffer(data, dtype=dtype)
    if count is not None and array.shape[0] != count:
        raise InterfaceError(
            f"{field}: {array.shape[0]} values for {count} fragments (arrays of different lengths)"
        )
    return array.astype(dtype.newbyteorder("="), copy=False)


def batch_from_pb(message: pb.FragmentBatch, limits: BatchLimits = _ANY_SOURCE) -> IncomingBatch:
    """Check and convert one ``FragmentBatch`` already decoded by the protobuf runtime; every
    problem raises ``InterfaceError`` naming the field.

    Encoded again and read by :func:`~orderer.wire.submit.decode_submit`, the service's
    decoder of raw ``Submit`` messages: the rules of a batch are written once, there. Not for
    a hot path (the service never decodes ``Submit`` messages with the runtime)."""
    item = submit.decode_submit(pb.SubmitRequest(batch=message).SerializeToString(), limits)
    assert isinstance(item, IncomingBatch)
    return item


def check_timestamps(timestamps: npt.NDArray[np.uint64]) -> None:
    """The batch rule a client checks before it sends: no reserved timestamp, with the one
    message of :func:`~orderer._core.core.check_fragment_rules`. The payload rules are the
    service's to check, against its own limit (:func:`batch_from_pb`)."""
    check_fragment_rules(np.ascontiguousarray(timestamps, dtype=np.uint64), _NO_OFFSETS, 0)


def batch_to_pb(batch: FragmentBatch, first_sequence: int | None = None) -> pb.FragmentBatch:
    """Pack a batch for the wire. With ``first_sequence`` the batch must be single-source."""
    n = len(batch)
    message = pb.FragmentBatch(timestamps=batch.timestamp.astype(_LE_U64, copy=False).tobytes())
    single = n == 0 or bool((batch.source == batch.source[0]).all())
    if first_sequence is not None:
        if not single:
            raise InterfaceError(
                "first_sequence: only single-source batches carry sequence numbers"
            )
        message.first_sequence = first_sequence
    if single:
        message.source = int(batch.source[0]) if n else 0
    else:
        message.sources = batch.source.astype(_LE_U32, copy=False).tobytes()
    if n and batch.barrier.any():
        message.barrier_types = batch.barrier.astype(_LE_U32, copy=False).tobytes()
    offsets = batch.payload_offsets
    if n and int(offsets[-1]) > int(offsets[0]):
        start, stop = int(offsets[0]), int(offsets[-1])
        message.payload_offsets = (offsets - offsets[0]).astype(_LE_U64, copy=False).tobytes()
        message.payload = batch.payload[start:stop].tobytes()
    return message


def watermark_from_pb(message: pb.Watermark, limits: BatchLimits = _ANY_SOURCE) -> tuple[int, int]:
    """``(source, watermark)``; every uint64 is a valid watermark (checked as
    :func:`batch_from_pb` checks a batch)."""
    item = submit.decode_submit(pb.SubmitRequest(watermark=message).SerializeToString(), limits)
    assert isinstance(item, submit.WatermarkItem)
    return item.source, item.watermark


def end_of_source_from_pb(message: pb.EndOfSource, limits: BatchLimits = _ANY_SOURCE) -> int:
    request = pb.SubmitRequest(end_of_source=message)
    item = submit.decode_submit(request.SerializeToString(), limits)
    assert isinstance(item, submit.EndOfSourceItem)
    return item.source


def emitted_to_pb(
    emitted: EmittedBatch, *, next_offset: int, high_water_mark: int | None, payload: bool = True
) -> pb.OrderedBatch:
    """Ordered output for ``Subscribe`` (without the payloads when ``payload`` is false)."""
    offsets = emitted.payload_offsets
    start, stop = (int(offsets[0]), int(offsets[-1])) if offsets.shape[0] else (0, 0)
    message = pb.OrderedBatch(
        first_offset=emitted.first_seq,
        sources=emitted.source.astype(_LE_U32, copy=False).tobytes(),
        timestamps=emitted.timestamp.astype(_LE_U64, copy=False).tobytes(),
        barrier_types=emitted.barrier.astype(_LE_U32, copy=False).tobytes(),
        late=emitted.late.astype(np.uint8).tobytes(),
        emit_times=emitted.t.astype(_LE_F64, copy=False).tobytes(),
        next_offset=next_offset,
    )
    if payload and stop > start:
        message.payload = emitted.payload[start:stop].tobytes()
        message.payload_offsets = (offsets - np.uint64(start)).astype(_LE_U64).tobytes()
    if high_water_mark is not None:
        message.high_water_mark = high_water_mark
    return message


def emitted_from_pb(message: pb.OrderedBatch) -> EmittedBatch:
    """What a subscriber received, checked like any input from the network."""
    timestamp = _packed("timestamps", message.timestamps, _LE_U64, None)
    n = timestamp.shape[0]
    if message.payload_offsets:
        offsets = _packed("payload_offsets", message.payload_offsets, _LE_U64, n + 1)
        if n and (offsets[0] != 0 or int(offsets[-1]) != len(message.payload)):
            raise InterfaceError("payload_offsets: do not cover the payload")
    else:
        if message.payload:
            raise InterfaceError("payload: given without payload_offsets")
        offsets = np.zeros(n + 1, dtype=np.uint64)
    late = _packed("late", message.late, np.dtype(np.uint8), n)
    return EmittedBatch(
        first_seq=message.first_offset,
        t=_packed("emit_times", message.emit_times, _LE_F64, n),
        source=_packed("sources", message.sources, _LE_U32, n),
        timestamp=timestamp,
        barrier=_packed("barrier_types", message.barrier_types, _LE_U32, n),
        late=late.astype(np.bool_),
        payload_offsets=offsets,
        payload=np.frombuffer(message.payload, dtype=np.uint8),
    )


def config_to_pb(config: OrdererConfig) -> pb.OrdererConfig:
    flow = config.flow_control
    message = pb.OrdererConfig(
        build_window=config.build_window,
        startup_delay=config.startup_delay,
        late_policy=config.late_policy,
        sources=list(config.sources),
        reset_on_begin_run=config.reset_on_begin_run,
        flow_control=pb.FlowThresholds(
            global_xoff=flow.global_xoff,
            global_xon=flow.global_xon,
            queue_xoff=flow.queue_xoff,
            queue_xon=flow.queue_xon,
        ),
    )
    if config.barrier_timeout is not None:
        message.barrier_timeout = config.barrier_timeout
    if config.source_timeout is not None:
        message.source_timeout = config.source_timeout
    return message


def config_from_pb(message: pb.OrdererConfig) -> OrdererConfig:
    """The parameters a server reports (``GetStats``, ``Configure``'s reply). A server that
    does not send its flow control thresholds is taken to run the defaults (NSCLDAQ's)."""
    flow = message.flow_control
    return OrdererConfig(
        build_window=message.build_window,
        startup_delay=message.startup_delay,
        barrier_timeout=_optional(message, "barrier_timeout"),
        source_timeout=_optional(message, "source_timeout"),
        late_policy=message.late_policy,
        sources=tuple(message.sources),
        reset_on_begin_run=message.reset_on_begin_run,
        flow_control=(
            FlowControl(
                global_xoff=flow.global_xoff,
                global_xon=flow.global_xon,
                queue_xoff=flow.queue_xoff,
                queue_xon=flow.queue_xon,
            )
            if message.HasField("flow_control")
            else FlowControl()
        ),
    )


def configure_changes_from_pb(message: pb.ConfigureRequest) -> dict[str, Any]:
    """The parameters a ``Configure`` sets, by spec name; values are checked when applied
    (``OrdererConfig`` raises ``ConfigError`` naming the parameter)."""
    changes: dict[str, Any] = {}
    for name in ("build_window", "startup_delay", "barrier_timeout", "late_policy"):
        if message.HasField(name):
            changes[name] = getattr(message, name)
    if message.source_timeout_off:
        if message.HasField("source_timeout"):
            raise InterfaceError("source_timeout_off: set together with source_timeout")
        changes["source_timeout"] = None
    elif message.HasField("source_timeout"):
        changes["source_timeout"] = message.source_timeout
    return changes


def configure_request(changes: Mapping[str, Any]) -> pb.ConfigureRequest:
    """A ``ConfigureRequest`` from spec-named keys (snake_case or camelCase). ``source_timeout``
    ``off`` or None disables dead-source detection."""
    request = pb.ConfigureRequest()
    for key, value in changes.items():
        name = snake_case(key)
        parsed = OrdererConfig.from_mapping({key: value})  # checks the name and the value
        if name not in LIVE_PARAMETERS:
            raise ConfigError(key, value, "cannot be changed while the orderer runs")
        if name == "source_timeout":
            if parsed.source_timeout is None:
                request.source_timeout_off = True
            else:
                request.source_timeout = parsed.source_timeout
        elif name == "barrier_timeout" and parsed.barrier_timeout is None:
            raise ConfigError(key, value, "must be a number of seconds")
        else:
            setattr(request, name, getattr(parsed, name))
    return request


def stats_to_pb(stats: Stats) -> pb.Stats:
    """``GetStats``' reply."""
    message = pb.Stats(
        sources=[_source_to_pb(source) for source in stats.sources.values()],
        barriers=pb.BarrierCounters(
            complete=stats.barriers.complete,
            incomplete=stats.barriers.incomplete,
            homogeneous=stats.barriers.homogeneous,
            heterogeneous=stats.barriers.heterogeneous,
            by_type=stats.barriers.by_type,
        ),
        next_offset=stats.next_offset,
        queued=stats.queued,
        now=stats.now,
        wall_time=stats.wall_time,
        run_ended=stats.run_ended,
        run=stats.run,
        run_start_offset=stats.run_start_offset,
        runs=[
            pb.RunRecord(run=r.run, start_offset=r.start_offset, end_offset=r.end_offset)
            for r in stats.runs
        ],
        config=config_to_pb(stats.config),
        consumers=[
            pb.ConsumerOffset(
                consumer=c.name,
                offset=c.committed,
                last_commit=c.last_commit,
                lag_seconds=c.lag_seconds,
            )
            for c in stats.consumers.values()
        ],
        barrier_log=[
            pb.BarrierRecord(
                offset=b.offset,
                t=b.t,
                complete=b.complete,
                homogeneous=b.homogeneous,
                types=b.types,
                missing=b.missing,
            )
            for b in stats.barrier_log
        ],
        connections=[
            pb.Connection(
                peer=c.peer,
                sources=c.sources,
                since=c.since,
                messages=c.messages,
                bytes=c.bytes,
                acked=c.acked,
            )
            for c in stats.connections
        ],
    )
    message.slicing.CopyFrom(slice_role_to_pb(stats.slicing))
    if stats.high_water_mark is not None:
        message.high_water_mark = stats.high_water_mark
    return message


def slice_role_to_pb(role: SliceRole) -> pb.Slicing:
    """``Stats.slicing``: always set (a plain orderer is orderer 0 of 1), T 0 when not given."""
    return pb.Slicing(
        orderers=role.orderers,
        index=role.index,
        slice_ticks=role.slice_ticks or 0,
        peers=role.peers,
    )


def slice_role_from_pb(message: pb.Slicing) -> SliceRole:
    """``Stats.slicing``, typed; a server from before slicing sends none: orderer 0 of 1."""
    if message.orderers == 0:
        return SliceRole()
    return SliceRole(
        orderers=message.orderers,
        index=message.index,
        slice_ticks=message.slice_ticks or None,
        peers=tuple(message.peers),
    )


def slice_index_to_pb(index: SliceIndex) -> pb.SliceIndex:
    """``GetSliceIndex``' reply."""
    return pb.SliceIndex(
        pieces=[
            pb.Piece(
                slice=piece.slice,
                first_offset=piece.first_offset,
                highest_timestamp=piece.highest_timestamp,
                kept=piece.kept,
            )
            for piece in index.pieces
        ],
        complete=index.complete,
        next_offset=index.next_offset,
    )


def slice_index_from_pb(message: pb.SliceIndex) -> SliceIndex:
    """A ``GetSliceIndex`` reply, typed."""
    return SliceIndex(
        pieces=tuple(
            Piece(p.slice, p.first_offset, _optional(p, "highest_timestamp"), p.kept)
            for p in message.pieces
        ),
        complete=message.complete,
        next_offset=message.next_offset,
    )


def _source_to_pb(source: SourceStats) -> pb.SourceCounters:
    message = pb.SourceCounters(
        source=source.source,
        missing=source.missing,
        queued=source.queued,
        queued_bytes=source.queued_bytes,
        paused=source.paused,
        ended=source.ended,
        dead=source.dead,
        marked_dead=source.marked_dead,
        out_of_order_last=[
            pb.OutOfOrder(previous=o.previous, timestamp=o.timestamp, t=o.t)
            for o in source.out_of_order_last
        ],
        **{name: getattr(source, name) for name in SOURCE_COUNTERS},
    )
    for field in ("watermark", "oldest_ts", "newest_ts", "last_arrival"):
        if getattr(source, field) is not None:
            setattr(message, field, getattr(source, field))
    return message


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


def stats_from_pb(message: pb.Stats) -> Stats:
    """A ``GetStats`` reply, typed; a consumer's ``lag`` is counted from ``next_offset``."""
    return Stats(
        sources={s.source: _source_from_pb(s) for s in sorted(message.sources, key=_by_source)},
        barriers=BarrierCounts(
            complete=message.barriers.complete,
            incomplete=message.barriers.incomplete,
            homogeneous=message.barriers.homogeneous,
            heterogeneous=message.barriers.heterogeneous,
            by_type=dict(sorted(message.barriers.by_type.items())),
        ),
        next_offset=message.next_offset,
        high_water_mark=_optional(message, "high_water_mark"),
        queued=message.queued,
        now=message.now,
        wall_time=message.wall_time,
        run_ended=message.run_ended,
        run=message.run,
        run_start_offset=message.run_start_offset,
        runs=tuple(
            RunSpan(r.run, r.start_offset, _optional(r, "end_offset")) for r in message.runs
        ),
        config=config_from_pb(message.config),
        barrier_log=tuple(
            BarrierRecord(
                offset=b.offset,
                t=b.t,
                complete=b.complete,
                homogeneous=b.homogeneous,
                types=dict(sorted(b.types.items())),
                missing=tuple(b.missing),
            )
            for b in message.barrier_log
        ),
        connections=tuple(
            Connection(
                peer=c.peer,
                sources=tuple(c.sources),
                since=c.since,
                messages=c.messages,
                bytes=c.bytes,
                acked=dict(sorted(c.acked.items())),
            )
            for c in message.connections
        ),
        consumers={
            c.consumer: ConsumerState(
                name=c.consumer,
                committed=c.offset,
                lag=max(0, message.next_offset - c.offset),
                lag_seconds=c.lag_seconds,
                last_commit=_optional(c, "last_commit"),
            )
            for c in sorted(message.consumers, key=_by_consumer)
        },
        slicing=slice_role_from_pb(message.slicing),
    )


def _by_source(message: pb.SourceCounters) -> int:
    return int(message.source)


def _by_consumer(message: pb.ConsumerOffset) -> str:
    return str(message.consumer)


def _source_from_pb(message: pb.SourceCounters) -> SourceStats:
    return SourceStats(
        source=message.source,
        missing=message.missing,
        queued=message.queued,
        queued_bytes=message.queued_bytes,
        oldest_ts=_optional(message, "oldest_ts"),
        newest_ts=_optional(message, "newest_ts"),
        last_arrival=_optional(message, "last_arrival"),
        paused=message.paused,
        ended=message.ended,
        dead=message.dead,
        marked_dead=message.marked_dead,
        watermark=_optional(message, "watermark"),
        out_of_order_last=tuple(
            OutOfOrder(o.previous, o.timestamp, o.t) for o in message.out_of_order_last
        ),
        **{name: getattr(message, name) for name in SOURCE_COUNTERS},
    )
