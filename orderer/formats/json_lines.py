"""The JSON Lines format of ``evb replay``: its input (a run's records, one JSON object a line,
sorted by arrival time ``t``) and its output (one JSON object per emitted fragment).

Why a module of its own: the format is read and written well beyond ``evb replay``. ``evb
send`` sends an input file to a live server, ``evb tail`` prints the ordered output as replay
output lines, the service's ``export_replay`` writes its arrival log as an input file
(:mod:`orderer.service.logs`), and the synthetic runs are written in it
(:mod:`orderer.replay.synthetic`). The records are :class:`~orderer.batch.ArrivalRecords`; a
malformed record is refused with ``line N: <what is wrong>`` (:class:`~orderer.errors.RecordError`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch
from orderer.errors import RecordError

__all__ = ["read_records", "write_emitted", "write_records"]

FRAGMENT, WATERMARK, END = ArrivalKind.FRAGMENT, ArrivalKind.WATERMARK, ArrivalKind.END_OF_SOURCE
STATE = ArrivalKind.SOURCE_STATE
"""The kinds of record the input format holds."""
_U32 = 2**32 - 1
_U64 = 2**64 - 1
_FRAGMENT_KEYS = frozenset({"t", "source", "ts", "barrier", "payload"})
_WATERMARK_KEYS = frozenset({"t", "source", "watermark"})
_END_KEYS = frozenset({"t", "source", "end"})
_STATE_KEYS = frozenset({"t", "source", "dead"})
_KINDS = {
    "ts": (FRAGMENT, _FRAGMENT_KEYS),
    "watermark": (WATERMARK, _WATERMARK_KEYS),
    "end": (END, _END_KEYS),
    "dead": (STATE, _STATE_KEYS),
}
"""The field that makes a record of each kind: the kind, and the fields such a record may have."""


def _integer(record: dict[str, Any], key: str, top: int, line: int) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(line, f"{key} must be an integer, got {value!r}")
    if not 0 <= value <= top:
        raise RecordError(line, f"{key}={value} is outside 0..{top}")
    return value


def _parse_line(text: str, line: int, previous_t: float) -> tuple[int, float, int, int, int, bytes]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(line, f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise RecordError(line, f"a record must be a JSON object, got {type(record).__name__}")
    if "t" not in record:
        raise RecordError(line, "missing field 't'")
    if "source" not in record:
        raise RecordError(line, "missing field 'source'")
    t = record["t"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise RecordError(line, f"t must be a finite number of seconds, got {t!r}")
    t = float(t)
    if t < previous_t:
        raise RecordError(line, f"t={t} is before the previous record's t={previous_t}")
    source = _integer(record, "source", _U32, line)
    kinds = [key for key in _KINDS if key in record]
    if len(kinds) != 1:
        raise RecordError(
            line,
            "a record needs exactly one of 'ts', 'watermark', 'end', 'dead'"
            + (f", got {kinds}" if kinds else ""),
        )
    kind = kinds[0]
    allowed = _KINDS[kind][1]
    unknown = sorted(set(record) - allowed)
    if unknown:
        raise RecordError(line, f"unknown field {unknown[0]!r} in a {kind} record")
    if kind == "ts":
        ts = _integer(record, "ts", _U64 - 1, line)
        barrier = _integer(record, "barrier", _U32, line) if "barrier" in record else 0
        payload = b""
        if "payload" in record:
            encoded = record["payload"]
            if not isinstance(encoded, str):
                raise RecordError(line, f"payload must be a base64 string, got {encoded!r}")
            try:
                payload = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise RecordError(line, "payload is not valid base64") from None
        return FRAGMENT, t, source, ts, barrier, payload
    if kind == "watermark":
        return WATERMARK, t, source, _integer(record, "watermark", _U64, line), 0, b""
    if kind == "dead":
        if not isinstance(record["dead"], bool):
            raise RecordError(line, f"dead must be true or false, got {record['dead']!r}")
        return STATE, t, source, int(record["dead"]), 0, b""
    if record["end"] is not True:
        raise RecordError(line, f"end must be true, got {record['end']!r}")
    return END, t, source, 0, 0, b""


_KIND_OF_KEYS: dict[frozenset[str], int] = {}
for _key, (_kind, _keys) in _KINDS.items():
    _required = {"t", "source", _key}
    _optional = sorted(_keys - _required)
    for _mask in range(1 << len(_optional)):
        _subset = {_optional[b] for b in range(len(_optional)) if _mask >> b & 1}
        _KIND_OF_KEYS[frozenset(_required | _subset)] = _kind


class _NeedsCheckedPath(Exception):
    """Something the fast path does not vouch for: parse again line by line for the error."""


def _integers(values: list[Any], dtype: type[np.generic], top: int) -> npt.NDArray:
    if not set(map(type, values)) <= {int}:
        raise _NeedsCheckedPath
    try:
        array = np.asarray(values, dtype=np.int64 if top < 2**63 else np.uint64)
    except (OverflowError, ValueError):
        raise _NeedsCheckedPath from None
    if array.size and (int(array.min()) < 0 or int(array.max()) > top):
        raise _NeedsCheckedPath
    return array.astype(dtype, copy=False)


def _read_fast(lines: list[str]) -> ArrivalRecords:
    """All records at once: one ``json.loads`` and column-wise checks. Raises
    :class:`_NeedsCheckedPath` at the first doubt; it never reports an error itself."""
    try:
        records = json.loads("[" + ",".join(lines) + "]")
    except (json.JSONDecodeError, RecursionError):
        raise _NeedsCheckedPath from None
    if not set(map(type, records)) <= {dict}:
        raise _NeedsCheckedPath
    layouts = list(map(tuple, records))
    kind_of_layout = {}
    for layout in set(layouts):
        layout_kind = _KIND_OF_KEYS.get(frozenset(layout))
        if layout_kind is None or len(layout) != len(set(layout)):
            raise _NeedsCheckedPath
        kind_of_layout[layout] = layout_kind
    kind = np.fromiter(map(kind_of_layout.__getitem__, layouts), dtype=np.uint8, count=len(layouts))
    times = [r["t"] for r in records]
    if not set(map(type, times)) <= {int, float}:
        raise _NeedsCheckedPath
    t = np.asarray(times, dtype=np.float64)
    if not np.isfinite(t).all() or (t.size > 1 and bool((np.diff(t) < 0).any())):
        raise _NeedsCheckedPath
    source = _integers([r["source"] for r in records], np.uint32, _U32)
    timestamp = _integers([r.get("ts", 0) for r in records], np.uint64, _U64 - 1)
    watermark = _integers([r.get("watermark", 0) for r in records], np.uint64, _U64)
    barrier = _integers([r.get("barrier", 0) for r in records], np.uint32, _U32)
    if not all(r["end"] is True for r in records if "end" in r):
        raise _NeedsCheckedPath
    dead = [r.get("dead", False) for r in records]
    if not set(map(type, dead)) <= {bool}:
        raise _NeedsCheckedPath
    value = np.where(kind == WATERMARK, watermark, timestamp)
    value = np.where(kind == STATE, np.asarray(dead, dtype=np.uint64), value)
    lengths = np.zeros(len(records), dtype=np.uint64)
    blobs: list[bytes] = []
    if any(frozenset(layout) >= {"payload"} for layout in kind_of_layout):
        for i, record in enumerate(records):
            if "payload" in record:
                encoded = record["payload"]
                if not isinstance(encoded, str):
                    raise _NeedsCheckedPath
                try:
                    blob = base64.b64decode(encoded, validate=True)
                except (binascii.Error, ValueError):
                    raise _NeedsCheckedPath from None
                lengths[i] = len(blob)
                blobs.append(blob)
    offsets = np.zeros(len(records) + 1, dtype=np.uint64)
    np.cumsum(lengths, out=offsets[1:])
    return ArrivalRecords(
        kind=kind,
        t=t,
        source=source,
        value=value.astype(np.uint64, copy=False),
        barrier=barrier,
        payload_offsets=offsets,
        payload=np.frombuffer(b"".join(blobs), dtype=np.uint8),
    )


def read_records(lines: Iterable[str]) -> ArrivalRecords:
    """Parse and check every record (1-based line numbers in errors); blank lines are skipped.

    A fast column-wise path takes well-formed input; at the first doubt the input is parsed
    again record by record, which names the line and what is wrong with it.
    """
    lines = list(lines)
    try:
        return _read_fast([line for line in lines if line.strip()])
    except _NeedsCheckedPath:
        return _read_checked(lines)


def _read_checked(lines: Iterable[str]) -> ArrivalRecords:
    """Record by record, with an exact error for the first bad one."""
    kinds: list[int] = []
    times: list[float] = []
    sources: list[int] = []
    values: list[int] = []
    barriers: list[int] = []
    lengths: list[int] = []
    payloads: list[bytes] = []
    previous_t = -math.inf
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        kind, t, source, value, barrier, payload = _parse_line(text, line, previous_t)
        previous_t = t
        kinds.append(kind)
        times.append(t)
        sources.append(source)
        values.append(value)
        barriers.append(barrier)
        lengths.append(len(payload))
        if payload:
            payloads.append(payload)
    offsets = np.zeros(len(lengths) + 1, dtype=np.uint64)
    np.cumsum(np.asarray(lengths, dtype=np.uint64), out=offsets[1:])
    return ArrivalRecords(
        kind=np.asarray(kinds, dtype=np.uint8),
        t=np.asarray(times, dtype=np.float64),
        source=np.asarray(sources, dtype=np.uint32),
        value=np.asarray(values, dtype=np.uint64),
        barrier=np.asarray(barriers, dtype=np.uint32),
        payload_offsets=offsets,
        payload=np.frombuffer(b"".join(payloads), dtype=np.uint8),
    )


def _json_lines(emitted: EmittedBatch, payload: bool) -> Iterator[str]:
    t = emitted.t.tolist()
    source = emitted.source.tolist()
    ts = emitted.timestamp.tolist()
    barrier = emitted.barrier.tolist()
    late = emitted.late.tolist()
    seq = emitted.first_seq
    for i in range(len(ts)):
        line = (
            f'{{"seq": {seq + i}, "t": {t[i]!r}, "source": {source[i]}, "ts": {ts[i]}, '
            f'"barrier": {barrier[i]}, "late": {"true" if late[i] else "false"}'
        )
        if payload:
            line += f', "payload": "{base64.b64encode(emitted.payload_of(i)).decode()}"'
        yield line + "}\n"


def write_emitted(emitted: EmittedBatch, out: IO[str], *, payload: bool = False) -> None:
    """The OUT file of ``evb replay``: one JSON object per emitted fragment; with ``payload``,
    each with its payload in base64 (``evb tail --payload``)."""
    out.writelines(_json_lines(emitted, payload))


def write_records(records: ArrivalRecords, out: IO[str]) -> None:
    """Records in the input format, one JSON object per line: fragments as ``{"t", "source",
    "ts"}`` plus ``barrier`` when non-zero and ``payload`` (base64) when non-empty, watermarks as
    ``{"t", "source", "watermark"}``, ends of source as ``{"t", "source", "end"}``, a source
    marked dead or revived as ``{"t", "source", "dead": true|false}``; the kinds the format has
    no record for (a live configuration change, end of run) are left out. ``t`` is
    written with ``repr`` so that it reads back as exactly the same double."""
    kind = records.kind.tolist()
    t = records.times().tolist()
    source = records.source.tolist()
    value = records.value.tolist()
    barrier = records.barrier.tolist()
    offsets = records.payload_offsets.tolist()
    payload = records.payload.tobytes()

    def lines() -> Iterator[str]:
        for i in range(len(kind)):
            head = f'{{"t": {t[i]!r}, "source": {source[i]}, '
            if kind[i] == FRAGMENT:
                extra = f', "barrier": {barrier[i]}' if barrier[i] else ""
                if offsets[i + 1] > offsets[i]:
                    encoded = base64.b64encode(payload[offsets[i] : offsets[i + 1]]).decode()
                    extra += f', "payload": "{encoded}"'
                yield f'{head}"ts": {value[i]}{extra}}}\n'
            elif kind[i] == WATERMARK:
                yield f'{head}"watermark": {value[i]}}}\n'
            elif kind[i] == END:
                yield f'{head}"end": true}}\n'
            elif kind[i] == STATE:
                yield f'{head}"dead": {"true" if value[i] else "false"}}}\n'

    out.writelines(lines())
