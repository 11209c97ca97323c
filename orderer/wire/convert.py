"""Conversions between the gRPC messages of ``proto/evb/v1`` and the orderer's API types.

Why a module of its own: the servicer methods only convert between messages and API types, so
every check of what a client sent happens once, here, in pure functions that raise
:class:`~orderer.errors.InterfaceError` naming the proto field; the service turns that into
``INVALID_ARGUMENT``. Arrays travel as packed little-endian bytes and are read with
``numpy.frombuffer``, never one Python object per fragment. A ``Submit`` message is read from
its raw bytes by :mod:`orderer.wire.submit`, which :func:`batch_from_pb` goes through too. The
client library (:mod:`orderer.client`) uses the same functions the other way round.

Callers: the service (:mod:`orderer.service.servicer`, :mod:`orderer.service.orderer_service`,
:mod:`orderer.service.subscriptions`, :mod:`orderer.service.settings`), the client library
(:mod:`orderer.client`) and ``evb stats``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from orderer._core.core import check_fragment_rules
from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.config import (
    LIVE_PARAMETERS,
    SOURCE_COUNTERS,
    TOTAL_COUNTERS,
    OrdererConfig,
    snake_case,
)
from orderer.errors import ConfigError, InterfaceError
from orderer.wire import submit
from orderer.wire.submit import BatchLimits, IncomingBatch

__all__ = [
    "DEFAULT_READER_MAX_BYTES",
    "MAX_PAYLOAD_BYTES",
    "REPLY_MAX_BYTES",
    "BatchLimits",
    "IncomingBatch",
    "batch_from_pb",
    "batch_to_pb",
    "check_timestamps",
    "config_to_mapping",
    "config_to_pb",
    "configure_changes_from_pb",
    "configure_request",
    "emitted_from_pb",
    "emitted_to_pb",
    "end_of_source_from_pb",
    "ordered_batch_bytes",
    "stats_to_mapping",
    "stats_to_pb",
    "watermark_from_pb",
]

RESERVED_TIMESTAMP = 2**64 - 1
"""The core's +infinity frontier; no fragment may carry it."""

_LE_U32 = np.dtype("<u4")
_LE_U64 = np.dtype("<u8")
_LE_F64 = np.dtype("<f8")
_NO_OFFSETS = np.zeros(0, dtype=np.uint64)


_BARRIER_COUNTERS = ("complete", "incomplete", "homogeneous", "heterogeneous")

DEFAULT_READER_MAX_BYTES = 4 * 1024 * 1024
"""gRPC's default receive limit (4 MiB): the largest reply a reader with a plain generated stub,
on a channel without options, accepts; one byte more and its call ends RESOURCE_EXHAUSTED."""
MAX_COMMIT_METADATA = 65536
"""The most bytes of metadata a ``Commit`` may carry (it is rewritten, with every consumer's, on
each commit that moves an offset)."""
REPLY_MAX_BYTES = 3584 * 1024
"""The service's default bound on one encoded ``OrderedBatch`` (3.5 MiB): headroom under
:data:`DEFAULT_READER_MAX_BYTES`."""
_COLUMN_BYTES = 4 + 8 + 4 + 1 + 8
"""Per fragment, without payload: source, timestamp, barrier type, late flag, emit time."""
_OFFSET_BYTES = 8
"""Per fragment with payloads: its entry of ``payload_offsets`` (which has one more)."""
_FRAMING_BYTES = 3 * (1 + 10) + 7 * (1 + 5) + _OFFSET_BYTES
"""At most, beyond the columns and the payload: three uint64 fields (tag and a varint of up to
10 bytes), seven bytes fields (tag and a length varint of up to 5 bytes, lengths < 32 GiB), and
the extra entry of ``payload_offsets``."""


def ordered_batch_bytes(fragments: int, payload_bytes: int, *, payload: bool = True) -> int:
    """An upper bound (within ~80 bytes) on the encoded size of :func:`emitted_to_pb`'s message
    for ``fragments`` fragments holding ``payload_bytes`` of payload. Why a bound and not the
    payload alone: the per-fragment columns are 25-33 bytes a fragment, 2 MiB for 65,536
    fragments, which took a reply of 4 MiB of payload past a default reader's limit."""
    per_fragment = _COLUMN_BYTES + (_OFFSET_BYTES if payload else 0)
    return _FRAMING_BYTES + per_fragment * fragments + (payload_bytes if payload else 0)


MAX_PAYLOAD_BYTES = DEFAULT_READER_MAX_BYTES - ordered_batch_bytes(1, 0)
"""The largest payload the service may accept: a reply holding one such fragment still fits a
reader with gRPC's default limit (a reply always holds at least one fragment)."""


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
    message = pb.OrdererConfig(
        build_window=config.build_window,
        startup_delay=config.startup_delay,
        late_policy=config.late_policy,
        sources=list(config.sources),
        reset_on_begin_run=config.reset_on_begin_run,
    )
    if config.barrier_timeout is not None:
        message.barrier_timeout = config.barrier_timeout
    if config.source_timeout is not None:
        message.source_timeout = config.source_timeout
    return message


def config_to_mapping(message: pb.OrdererConfig) -> dict[str, Any]:
    """The spec-named parameters of a config message (``source_timeout`` ``off`` when unset)."""
    return {
        "build_window": message.build_window,
        "startup_delay": message.startup_delay,
        "barrier_timeout": (
            message.barrier_timeout if message.HasField("barrier_timeout") else None
        ),
        "source_timeout": message.source_timeout if message.HasField("source_timeout") else "off",
        "late_policy": message.late_policy,
        "sources": list(message.sources),
        "reset_on_begin_run": message.reset_on_begin_run,
    }


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


def stats_to_pb(
    *,
    counters: Mapping[str, Any],
    states: Mapping[int, Mapping[str, Any]],
    next_offset: int,
    high_water_mark: int | None,
    queued: int,
    now: float,
    run_ended: bool,
    config: OrdererConfig,
    consumers: Mapping[str, Mapping[str, Any]] | None = None,
    barrier_log: Sequence[Mapping[str, Any]] = (),
    barriers_by_type: Mapping[int, int] | None = None,
    connections: Sequence[Mapping[str, Any]] = (),
    wall_time: float = 0.0,
    run: int = 0,
    run_start_offset: int = 0,
    runs: Sequence[tuple[int, int, int | None]] = (),
) -> pb.Stats:
    """``GetStats`` from ``Orderer.counters()`` and ``Orderer.source_states()``, with each
    known consumer (``{"offset", "last_commit", "lag_seconds"}`` by name), the resolved
    barriers (``Orderer.take_barrier_log()`` entries, oldest first), the open Submit streams
    (``{"peer", "sources", "since", "messages", "bytes", "acked"}``) and the run table
    (``(run, start offset, end offset or None)``, in order)."""
    missing = counters.get("missing", {})
    sources = []
    per_source = counters.get("sources", {})
    for source in sorted(set(states) | {int(s) for s in per_source}):
        values = per_source.get(str(source), {})
        sources.append(
            _source_to_pb(source, values, states.get(source, {}), missing.get(str(source), 0))
        )
    barriers = counters.get("barriers", {})
    stats = pb.Stats(
        sources=sources,
        barriers=pb.BarrierCounters(
            by_type=barriers_by_type or {},
            **{k: int(barriers.get(k, 0)) for k in _BARRIER_COUNTERS},
        ),
        next_offset=next_offset,
        queued=queued,
        now=now,
        run_ended=run_ended,
        run=run,
        run_start_offset=run_start_offset,
        runs=[pb.RunRecord(run=r, start_offset=start, end_offset=end) for r, start, end in runs],
        config=config_to_pb(config),
        consumers=[
            pb.ConsumerOffset(
                consumer=name,
                offset=int(state["offset"]),
                last_commit=state.get("last_commit"),
                lag_seconds=float(state.get("lag_seconds", 0.0)),
            )
            for name, state in sorted((consumers or {}).items())
        ],
        barrier_log=[
            pb.BarrierRecord(
                offset=int(entry["offset"]),
                t=entry["t"],
                complete=entry["complete"],
                homogeneous=entry["homogeneous"],
                types=entry.get("types", {}),
                missing=entry["missing"],
            )
            for entry in barrier_log
        ],
        connections=[pb.Connection(**connection) for connection in connections],
        wall_time=wall_time,
    )
    if high_water_mark is not None:
        stats.high_water_mark = high_water_mark
    return stats


def _source_to_pb(
    source: int, values: Mapping[str, Any], state: Mapping[str, Any], missing: int
) -> pb.SourceCounters:
    """One source's counters (``Orderer.counters()``) and queue state (``source_states()``)."""
    message = pb.SourceCounters(
        source=source,
        missing=int(missing),
        queued=int(state.get("queued", 0)),
        paused=bool(state.get("paused", False)),
        ended=bool(state.get("ended", False)),
        dead=bool(state.get("dead", False)),
        queued_bytes=int(state.get("queued_bytes", 0)),
        marked_dead=bool(state.get("marked_dead", False)),
        out_of_order_last=[
            pb.OutOfOrder(previous=int(o["previous"]), timestamp=int(o["timestamp"]), t=o["t"])
            for o in state.get("out_of_order_last", ())
        ],
        **{name: int(values.get(name, 0)) for name in SOURCE_COUNTERS},
    )
    for field in ("watermark", "oldest_ts", "newest_ts"):
        if state.get(field) is not None:
            setattr(message, field, int(state[field]))
    if state.get("last_arrival") is not None:
        message.last_arrival = float(state["last_arrival"])
    return message


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


def stats_to_mapping(stats: pb.Stats) -> dict[str, Any]:
    """``GetStats`` as plain data (``evb stats --json``): the ``evb replay --stats`` layout
    (``totals``, ``barriers``, ``missing``, ``sources``) plus the live state of the service:
    the barrier log (oldest first), the connections, and the consumers (``{"committed", "lag",
    "lag_seconds", "last_commit"}`` by name; ``lag`` in fragments). Map keys are strings."""
    sources: dict[str, dict[str, Any]] = {}
    for message in stats.sources:
        entry: dict[str, Any] = {name: getattr(message, name) for name in SOURCE_COUNTERS}
        entry.update(
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
            out_of_order_last=[
                {"previous": o.previous, "timestamp": o.timestamp, "t": o.t}
                for o in message.out_of_order_last
            ],
        )
        sources[str(message.source)] = entry
    barriers: dict[str, Any] = {name: getattr(stats.barriers, name) for name in _BARRIER_COUNTERS}
    barriers["by_type"] = {str(k): v for k, v in sorted(stats.barriers.by_type.items())}
    return {
        "totals": {name: sum(s[name] for s in sources.values()) for name in TOTAL_COUNTERS},
        "barriers": barriers,
        "missing": {str(m.source): m.missing for m in stats.sources if m.missing},
        "sources": sources,
        "next_offset": stats.next_offset,
        "high_water_mark": _optional(stats, "high_water_mark"),
        "queued": stats.queued,
        "now": stats.now,
        "wall_time": stats.wall_time,
        "run_ended": stats.run_ended,
        "run": stats.run,
        "run_start_offset": stats.run_start_offset,
        "runs": [
            {"run": r.run, "start_offset": r.start_offset, "end_offset": _optional(r, "end_offset")}
            for r in stats.runs
        ],
        "config": config_to_mapping(stats.config),
        "barrier_log": [
            {
                "offset": b.offset,
                "t": b.t,
                "complete": b.complete,
                "homogeneous": b.homogeneous,
                "types": {str(k): v for k, v in sorted(b.types.items())},
                "missing": list(b.missing),
            }
            for b in stats.barrier_log
        ],
        "connections": [
            {
                "peer": c.peer,
                "sources": list(c.sources),
                "since": c.since,
                "messages": c.messages,
                "bytes": c.bytes,
                "acked": {str(k): v for k, v in sorted(c.acked.items())},
            }
            for c in stats.connections
        ],
        "consumers": {
            c.consumer: {
                "committed": c.offset,
                "lag": max(0, stats.next_offset - c.offset),
                "lag_seconds": c.lag_seconds,
                "last_commit": _optional(c, "last_commit"),
            }
            for c in stats.consumers
        },
    }
