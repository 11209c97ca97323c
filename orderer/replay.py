"""``evb replay``: the deterministic simulator of ORDERING.md.

Reads a JSON Lines run (records sorted by arrival time ``t``), feeds it to the same core the live
service runs, with time taken from the records, and writes what was emitted and the counters.
A malformed record stops everything with ``line N: <what is wrong>``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from orderer.api import Orderer
from orderer.batch import EmittedBatch
from orderer.clock import SimulatedClock
from orderer.config import OrdererConfig
from orderer.errors import RecordError

__all__ = ["RecordColumns", "read_records", "replay", "replay_file", "write_emitted"]

FRAGMENT, WATERMARK, END = 0, 1, 2
_U32 = 2**32 - 1
_U64 = 2**64 - 1
_FRAGMENT_KEYS = frozenset({"t", "source", "ts", "barrier", "payload"})
_WATERMARK_KEYS = frozenset({"t", "source", "watermark"})
_END_KEYS = frozenset({"t", "source", "end"})


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """A replay input as columns, one row per record."""

    kind: npt.NDArray[np.uint8]
    t: npt.NDArray[np.float64]
    source: npt.NDArray[np.uint32]
    value: npt.NDArray[np.uint64]
    barrier: npt.NDArray[np.uint32]
    payload_offsets: npt.NDArray[np.uint64]
    payload: npt.NDArray[np.uint8]

    def __len__(self) -> int:
        return int(self.t.shape[0])


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
    kinds = [key for key in ("ts", "watermark", "end") if key in record]
    if len(kinds) != 1:
        raise RecordError(
            line,
            "a record needs exactly one of 'ts', 'watermark', 'end'"
            + (f", got {kinds}" if kinds else ""),
        )
    kind = kinds[0]
    allowed = {"ts": _FRAGMENT_KEYS, "watermark": _WATERMARK_KEYS, "end": _END_KEYS}[kind]
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
    if record["end"] is not True:
        raise RecordError(line, f"end must be true, got {record['end']!r}")
    return END, t, source, 0, 0, b""


def read_records(lines: Iterable[str]) -> RecordColumns:
    """Parse and check every record (1-based line numbers in errors); blank lines are skipped."""
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
    return RecordColumns(
        kind=np.asarray(kinds, dtype=np.uint8),
        t=np.asarray(times, dtype=np.float64),
        source=np.asarray(sources, dtype=np.uint32),
        value=np.asarray(values, dtype=np.uint64),
        barrier=np.asarray(barriers, dtype=np.uint32),
        payload_offsets=offsets,
        payload=np.frombuffer(b"".join(payloads), dtype=np.uint8),
    )


def replay(records: RecordColumns, config: OrdererConfig) -> tuple[EmittedBatch, dict[str, Any]]:
    """Run the records through an orderer on simulated time; end of run at the last ``t``."""
    orderer = Orderer(config, clock=SimulatedClock())
    orderer.replay_arrays(
        records.kind,
        records.t,
        records.source,
        records.value,
        records.barrier,
        records.payload_offsets,
        records.payload,
    )
    if len(records):
        orderer.end_run(now=float(records.t[-1]))
    return orderer.take_emitted(), orderer.counters()


def _json_lines(emitted: EmittedBatch) -> Iterator[str]:
    t = emitted.t.tolist()
    source = emitted.source.tolist()
    ts = emitted.timestamp.tolist()
    barrier = emitted.barrier.tolist()
    late = emitted.late.tolist()
    seq = emitted.first_seq
    for i in range(len(ts)):
        yield (
            f'{{"seq": {seq + i}, "t": {t[i]!r}, "source": {source[i]}, "ts": {ts[i]}, '
            f'"barrier": {barrier[i]}, "late": {"true" if late[i] else "false"}}}\n'
        )


def write_emitted(emitted: EmittedBatch, out: IO[str]) -> None:
    """The OUT file of ``evb replay``: one JSON object per emitted fragment."""
    out.writelines(_json_lines(emitted))


def replay_file(
    input_path: Path, output_path: Path, stats_path: Path | None, config: OrdererConfig
) -> dict[str, Any]:
    """``evb replay`` without the argument parsing; returns the counters."""
    with input_path.open(encoding="utf-8") as lines:
        records = read_records(lines)
    emitted, counters = replay(records, config)
    with output_path.open("w", encoding="utf-8") as out:
        write_emitted(emitted, out)
    if stats_path is not None:
        stats_path.write_text(json.dumps(counters, indent=1) + "\n", encoding="utf-8")
    return counters
