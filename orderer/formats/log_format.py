"""The on-disk format of the orderer's two logs: what the service writes and every reader reads.

Why one module: the service writes the logs (:mod:`orderer.service.logs`), and they are read
back outside it too: recovery and ``export_replay`` read the arrival log, and the Spark job's
file reader (:mod:`orderer.spark.source.readers`) reads a finished run's ordered log straight from
disk. Were the format written in one place and read again by hand in another, a change to one would
break the other silently. Here are the schemas (and so the column names), the segment naming,
the torn-tail rule and the conversions between the logs' record batches and the orderer's
columnar types; this module imports nothing above :mod:`orderer.batch`.

**Layout.** A data directory holds ``arrivals/`` (the arrival log), ``ordered/`` (the ordered
log), ``consumers.json`` and ``parameters.json``, the orderer's parameters the run began with
(:data:`PARAMETERS`; live changes follow in the arrival log). A log is a directory of segment files
``<log>-<first row number, 20 digits>.arrow`` (``ordered-00000000000000065536.arrow``); rows
are numbered from 0 across the segments of a log, and the ordered log's row number is the
fragment's offset. Each segment is an Arrow IPC *stream*, a standard columnar format any Arrow
reader opens: the schema, record batches, and the end-of-stream marker once the segment is
sealed (readers do without it).

**Torn-tail rule.** A writer that crashes in the middle of a write leaves a segment whose last
record batch (or even its schema) is incomplete. Readers stop at the first record batch that
cannot be read whole and leave out what follows (:class:`SegmentReader`); the writer, when it
opens the log, cuts that tail off (a segment with nothing whole in it, not even the schema, is
removed) and appends to a new segment.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from orderer.batch import ArrivalRecords, EmittedBatch
from orderer.config import OrdererConfig
from orderer.errors import ConfigError, InternalOrdererError
from orderer.stats import SliceRole

__all__ = [
    "ARRIVALS",
    "ARRIVAL_SCHEMA",
    "END_OF_STREAM",
    "ORDERED",
    "ORDERED_SCHEMA",
    "ORDERED_SCHEMA_WITH_PAYLOADS",
    "PARAMETERS",
    "SegmentReader",
    "arrivals_from_arrow",
    "arrivals_to_arrow",
    "emitted_from_arrow",
    "emitted_to_arrow",
    "first_row",
    "log_segments",
    "ordered_format_of",
    "ordered_segments",
    "parameters_bytes",
    "read_batch_at",
    "read_parameters",
    "read_slice_role",
    "segment_path",
]

ARRIVALS = "arrivals"
"""The arrival log: its directory in a data directory, and its segments' name prefix."""
ORDERED = "ordered"
"""The ordered log: its directory in a data directory, and its segments' name prefix."""

PARAMETERS = "parameters.json"
"""The orderer's parameters a run began with, in its data directory: ``{"format": 1,
"orderer": {...}}``, the parameters as :meth:`~orderer.config.OrdererConfig.to_mapping` spells
them. Written once, when the run's logs are created, before the first record; the arrival log
holds every live change after it. A file beside the logs rather than a first arrival record:
the arrival log's records are what ``evb replay`` walks, and a record setting every parameter
would override the flags of a what-if replay or a sweep of the same log. A data directory
without it was written before parameters were recorded. An orderer of a run over several
(docs/scale-out.md) records there too where it stands in it, ``"slicing": {"orderers": N,
"index": K, "slice_ticks": T}``, fixed for the run like the parameters; a file without it is a
plain orderer's (:func:`read_slice_role`)."""
_PARAMETERS_FORMAT = 1

ARRIVAL_SCHEMA = pa.schema(
    [
        ("kind", pa.uint8()),  # ArrivalKind
        ("t", pa.float64()),  # arrival time: when the orderer took the record in
        ("source", pa.uint32()),
        ("value", pa.uint64()),  # timestamp of a fragment, or the watermark
        ("barrier", pa.uint32()),
        ("sequence", pa.uint64()),  # per-source sequence number, null when unsequenced
        ("payload", pa.large_binary()),  # fragment payload, or the JSON of a configuration change
    ]
)

ORDERED_SCHEMA = pa.schema(
    [
        ("offset", pa.uint64()),
        ("t", pa.float64()),  # time of the flush that emitted the fragment
        ("source", pa.uint32()),
        ("timestamp", pa.uint64()),
        ("barrier", pa.uint32()),
        ("late", pa.bool_()),
        ("payload_row", pa.uint64()),  # the fragment's row in the arrival log: its payload
    ]
)
"""The ordered log's record batches. The payloads are not here: each payload byte is written
once, in the arrival log, and readers gather them by ``payload_row``
(:class:`orderer.formats.payloads.ArrivalPayloads`)."""

ORDERED_SCHEMA_WITH_PAYLOADS = pa.schema(
    [*[ORDERED_SCHEMA.field(i) for i in range(6)], pa.field("payload", pa.large_binary())]
)
"""The ordered stream with its payloads in itself: ``evb replay``'s ``.arrow`` and ``.parquet``
outputs (files that stand alone), and the ordered log as evb wrote it before it stopped writing
each payload twice. Such an ordered log is still read (:func:`~orderer.formats.payloads.
ordered_batches`, the Spark job's ``--path``); a service does not continue its run."""

_NO_BYTES = np.zeros(0, dtype=np.uint8)
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The IPC stream format's end-of-stream marker (continuation token, zero length)."""
_SEGMENT_DIGITS = 20


# ------------------------------------------------------------------------------ segments


def segment_path(directory: Path, log: str, first: int) -> Path:
    """The segment of ``log`` whose first row is ``first``."""
    return directory / f"{log}-{first:0{_SEGMENT_DIGITS}d}.arrow"


def log_segments(directory: Path, log: str) -> list[Path]:
    """The segments of ``log`` in ``directory``, in row order (the names sort as numbers)."""
    return sorted(Path(directory).glob(f"{log}-*.arrow"))


def first_row(segment: Path) -> int:
    """Row number of a segment's first row, from its name."""
    return int(segment.stem.rsplit("-", 1)[1])


class SegmentReader:
    """The whole record batches of one segment, in order, under the torn-tail rule.

    Iterating yields ``(byte position of the batch's IPC message, record batch)``; the batches
    are views of the memory-mapped file. Once iterated, :attr:`whole` is the length of the
    segment's whole part in bytes: the whole file when it ends cleanly, the end of the last whole
    batch when its tail is torn, 0 when nothing in it is whole (not even the schema); and
    :attr:`schema` the segment's, one of the ``schemas`` it may have (another is an error).
    """

    __slots__ = ("schema", "schemas", "segment", "whole")

    def __init__(self, segment: Path, *schemas: pa.Schema) -> None:
        self.segment = Path(segment)
        self.schemas = schemas
        self.schema: pa.Schema | None = None
        self.whole = 0

    def __iter__(self) -> Iterator[tuple[int, pa.RecordBatch]]:
        self.whole = 0
        with pa.memory_map(str(self.segment)) as source:
            try:
                reader = pa.ipc.open_stream(source)
            except (pa.ArrowInvalid, OSError):
                return  # a torn schema
            self.schema = next((s for s in self.schemas if reader.schema.equals(s)), None)
            if self.schema is None:
                raise InternalOrdererError(f"{self.segment}: unexpected schema {reader.schema}")
            position = source.tell()
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    self.whole = source.tell()
                    return
                except (pa.ArrowInvalid, OSError):
                    return  # a torn tail: keep what was whole
                self.whole = source.tell()
                yield position, batch
                position = self.whole


def read_batch_at(segment: Path, position: int, schema: pa.Schema) -> pa.RecordBatch:
    """The record batch whose IPC message starts at byte ``position`` of ``segment``, as views
    of the mapped file (the map lives as long as they do): a reader of a few rows of a large
    batch touches only their pages, where reading the batch copied all of it (a reply of a
    few thousand fragments read a 65,536-row batch each time)."""
    with pa.memory_map(str(segment)) as source:
        source.seek(position)
        return pa.ipc.read_record_batch(pa.ipc.read_message(source), schema)


def ordered_segments(path: Path) -> list[Path]:
    """The ordered log's segments: ``path`` is a data directory or its ``ordered/``; empty
    when it holds none."""
    path = Path(path)
    directory = path / ORDERED if (path / ORDERED).is_dir() else path
    return log_segments(directory, ORDERED)


def ordered_format_of(directory: Path) -> pa.Schema | None:
    """The schema of the first segment of the ordered log in ``directory`` (its ``ordered/``):
    :data:`ORDERED_SCHEMA`, :data:`ORDERED_SCHEMA_WITH_PAYLOADS`, or None without a readable
    one."""
    for segment in log_segments(Path(directory), ORDERED):
        reader = SegmentReader(segment, ORDERED_SCHEMA, ORDERED_SCHEMA_WITH_PAYLOADS)
        for _ in reader:
            break
        if reader.schema is not None:
            return reader.schema
    return None


# ------------------------------------------------------------------------------ columns


def _column(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A zero-copy Arrow view of a numpy column (``valid``: which rows are not null).

    Not ``pa.array``: its first call imports pandas to look for pandas input, a second of a
    live server's time spent in the middle of a run."""
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [validity, pa.py_buffer(bits)])
    values = np.ascontiguousarray(values)
    dtype = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(dtype, len(values), [validity, pa.py_buffer(values)])


_NUMPY_OF_ARROW = {
    pa.uint8(): np.uint8,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.int64(): np.int64,
    pa.float64(): np.float64,
}


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a numeric or boolean column, a view where Arrow's layout allows one; the
    inverse of :func:`_column`, and like it without pandas. Nulls are not looked at."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n, start = len(column), column.offset
    data = column.buffers()[1]
    if column.type == pa.bool_():
        if data is None:
            return np.zeros(n, dtype=np.bool_)
        bits = np.frombuffer(data, dtype=np.uint8)
        return np.unpackbits(bits, count=start + n, bitorder="little")[start:].view(np.bool_)
    dtype = np.dtype(_NUMPY_OF_ARROW[column.type])
    if data is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=n, offset=start * dtype.itemsize)


def _columns(batch: pa.RecordBatch, *names: str) -> list[np.ndarray]:
    """The named numeric or boolean columns of a record batch (:func:`_numpy`)."""
    return [_numpy(batch.column(name)) for name in names]


def _binary_column(offsets: np.ndarray, payload: np.ndarray, n: int) -> pa.Array:
    """A large_binary column over packed payloads, without copying them."""
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int64)), pa.py_buffer(payload)],
    )


def _unpack_binary(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(n + 1 offsets from 0, payload bytes) of a large_binary column."""
    _, offsets_buffer, data_buffer = column.buffers()
    n = len(column)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=n + 1, offset=column.offset * 8)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[start:stop]
        if data_buffer is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return (offsets - start).astype(np.uint64), data


# ------------------------------------------------------------------------------ record batches


def arrivals_to_arrow(records: ArrivalRecords) -> pa.RecordBatch:
    """Arrival records (with their arrival times) as one record batch of the arrival log."""
    n = len(records)
    if records.sequence is None:  # null everywhere
        sequence = _column(np.zeros(n, dtype=np.uint64), valid=np.zeros(n, dtype=np.bool_))
    else:
        sequence = _column(records.sequence, valid=records.sequenced)
    return pa.record_batch(
        [
            _column(records.kind),
            _column(records.times()),
            _column(records.source),
            _column(records.value),
            _column(records.barrier),
            sequence,
            _binary_column(records.payload_offsets, records.payload, n),
        ],
        schema=ARRIVAL_SCHEMA,
    )


def arrivals_from_arrow(batch: pa.RecordBatch) -> ArrivalRecords:
    """A record batch of the arrival log as arrival records (views where Arrow allows)."""
    sequences = batch.column("sequence")
    sequence = sequenced = None
    if sequences.null_count < len(sequences):
        sequence = _numpy(sequences)
        if sequences.null_count:
            sequenced = _numpy(sequences.is_valid())
    kind, t, source, value, barrier = _columns(batch, "kind", "t", "source", "value", "barrier")
    offsets, payload = _unpack_binary(batch.column("payload"))
    return ArrivalRecords(kind, t, source, value, barrier, offsets, payload, sequence, sequenced)


def emitted_to_arrow(emitted: EmittedBatch, schema: pa.Schema = ORDERED_SCHEMA) -> pa.RecordBatch:
    """Emitted fragments as one record batch of ``schema`` (offsets from ``first_seq``): the
    ordered log's, which keeps where each payload lies (``payload_row``, which they must have),
    or :data:`ORDERED_SCHEMA_WITH_PAYLOADS`, which keeps the payloads."""
    first, n = emitted.first_seq, len(emitted)
    if schema.equals(ORDERED_SCHEMA_WITH_PAYLOADS):
        last = _binary_column(emitted.payload_offsets, emitted.payload, n)
    elif emitted.payload_row is None:
        raise InternalOrdererError("the ordered log keeps payload rows: emitted without them")
    else:
        last = _column(emitted.payload_row)
    return pa.record_batch(
        [
            _column(np.arange(first, first + n, dtype=np.uint64)),
            _column(emitted.t),
            _column(emitted.source),
            _column(emitted.timestamp),
            _column(emitted.barrier),
            _column(emitted.late),
            last,
        ],
        schema=schema,
    )


def emitted_from_arrow(batch: pa.RecordBatch, *, payload: bool = True) -> EmittedBatch:
    """A record batch of the ordered log as emitted fragments (views where Arrow allows): with
    ``payload_row`` and no payloads, or with the payloads of a log that held them (left out
    without ``payload``)."""
    first = int(batch.column("offset")[0].as_py()) if batch.num_rows else 0
    t, source, timestamp, barrier, late = _columns(
        batch, "t", "source", "timestamp", "barrier", "late"
    )
    n = batch.num_rows
    if batch.schema.get_field_index("payload_row") >= 0:
        rows = _numpy(batch.column("payload_row"))
        none = np.zeros(n + 1, dtype=np.uint64)
        return EmittedBatch(first, t, source, timestamp, barrier, late, none, _NO_BYTES, None, rows)
    if not payload:
        none = np.zeros(n + 1, dtype=np.uint64)
        return EmittedBatch(first, t, source, timestamp, barrier, late, none, _NO_BYTES)
    offsets, data = _unpack_binary(batch.column("payload"))
    return EmittedBatch(first, t, source, timestamp, barrier, late, offsets, data)


def parameters_bytes(config: OrdererConfig, role: SliceRole | None = None) -> bytes:
    """The content of :data:`PARAMETERS` for ``config``, and with ``role`` where the orderer
    stands in a run over several (``"slicing": {"orderers", "index", "slice_ticks"}``, its
    peers left out: addresses may change from one start to the next). A plain orderer's
    (orderer 0 of 1, no slice length) is not written: its file is what it always was, and a
    file without it means a plain orderer."""
    document: dict[str, Any] = {"format": _PARAMETERS_FORMAT, "orderer": config.to_mapping()}
    if role is not None and role != SliceRole(peers=role.peers):
        document["slicing"] = {
            "orderers": role.orderers, "index": role.index, "slice_ticks": role.slice_ticks
        }
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def _parameters_document(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """:data:`PARAMETERS` of ``directory`` read and checked as a whole; None: there is none."""
    path = Path(directory) / PARAMETERS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else error.strerror
        raise ConfigError(str(path), None, f"cannot be read: {why}") from None
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ConfigError(str(path), None, f"is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("format") != _PARAMETERS_FORMAT:
        raise ConfigError(
            str(path), None, f'is not a run\'s parameters file (no "format": {_PARAMETERS_FORMAT})'
        )
    return path, document


def read_parameters(directory: Path) -> OrdererConfig | None:
    """The parameters the run in data directory ``directory`` began with; None when it has no
    :data:`PARAMETERS` (a new directory, or one written before they were recorded). A file that
    does not hold them (edited by hand, another program's) is a :class:`ConfigError` naming it:
    recovering with other parameters than the run's would rebuild another run."""
    read = _parameters_document(directory)
    if read is None:
        return None
    path, document = read
    parameters = document.get("orderer")
    if not isinstance(parameters, dict):
        raise ConfigError(str(path), None, 'has no "orderer" mapping of parameters')
    try:
        return OrdererConfig.from_mapping(parameters)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error.parameter}", error.value, error.why) from None


def read_slice_role(directory: Path) -> SliceRole | None:
    """Where the orderer of the run in ``directory`` stands in it (without peers, which are
    not recorded); None when the directory has no :data:`PARAMETERS`. A file without
    ``"slicing"`` is a plain orderer's (orderer 0 of 1), as every file written before it was."""
    read = _parameters_document(directory)
    if read is None:
        return None
    path, document = read
    recorded = document.get("slicing")
    if recorded is None:
        return SliceRole()
    keys = ("orderers", "index", "slice_ticks")
    if (
        not isinstance(recorded, dict)
        or set(recorded) != set(keys)
        or not all(isinstance(recorded[k], int) and not isinstance(recorded[k], bool)
                   for k in keys[:2])
        or not (recorded["slice_ticks"] is None or isinstance(recorded["slice_ticks"], int))
    ):
        raise ConfigError(
            f"{path}: slicing",
            recorded,
            "must hold the whole numbers orderers, index and slice_ticks",
        )
    return SliceRole(recorded["orderers"], recorded["index"], recorded["slice_ticks"])
