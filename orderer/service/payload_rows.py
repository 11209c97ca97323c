"""The service's orderer carries each fragment's row in the arrival log in place of its payload.

Why: a payload is written to the disk once, in the arrival log, before its fragment is
acknowledged; the ordered log keeps where each emitted fragment's payload lies (its
``payload_row``) and readers gather the payloads from there
(:mod:`orderer.formats.payloads`). The core keeps a payload as opaque bytes beside its fragment
in the fragment's queue and hands it out in emission order, so the 8 bytes of a row number given
in place of the payload come out beside their fragment: the core needs no second mode, and holds
8 bytes per queued fragment whatever the payload's size (no payload copied into its queues and
out again, less memory under a backlog).

Live intake (:mod:`orderer.service.ingest`) and recovery (:mod:`orderer.service.recovery`)
number the rows the same way (the arrival log's own numbering, from 0 across its segments), so
a recovered orderer emits what the live one did, rows included.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from orderer.batch import ArrivalKind, ArrivalRecords, EmittedBatch, FragmentBatch, concat_payloads
from orderer.errors import InternalOrdererError

__all__ = ["ROW_BYTES", "fragments_with_rows", "records_with_rows", "rows_of"]

ROW_BYTES = 8
"""A row number in place of a payload: uint64, in the machine's byte order (it never leaves the
process; the ordered log stores it as a column)."""

_offsets = np.arange(0, ROW_BYTES * 65537, ROW_BYTES, dtype=np.uint64)


def _row_offsets(n: int) -> npt.NDArray[np.uint64]:
    """``n + 1`` payload offsets of ``n`` row numbers: a view of one array, grown when short
    (only the orderer's thread, or recovery before it starts, calls this)."""
    global _offsets
    if n + 1 > _offsets.shape[0]:
        _offsets = np.arange(0, ROW_BYTES * (2 * n + 1), ROW_BYTES, dtype=np.uint64)
    return _offsets[: n + 1]


def _row_bytes(first_row: int, n: int) -> npt.NDArray[np.uint8]:
    return np.arange(first_row, first_row + n, dtype=np.uint64).view(np.uint8)


def fragments_with_rows(batch: FragmentBatch, first_row: int) -> FragmentBatch:
    """``batch`` as the service's orderer takes it: its fragments' rows in the arrival log,
    ``first_row`` onwards, in place of their payloads."""
    n = len(batch)
    return replace(batch, payload_offsets=_row_offsets(n), payload=_row_bytes(first_row, n))


def records_with_rows(records: ArrivalRecords, first_row: int) -> ArrivalRecords:
    """Arrival records read back from the log at row ``first_row`` as the live orderer took
    them in: each record's row in place of its payload, but a configuration change's, whose
    payload is the change (recovery applies it; the core never sees it)."""
    n = len(records)
    configures = np.flatnonzero(records.kind == ArrivalKind.CONFIGURE)
    if configures.size == 0:
        return replace(records, payload_offsets=_row_offsets(n), payload=_row_bytes(first_row, n))
    parts: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]] = []
    start = 0
    for row in configures.tolist():
        if row > start:
            parts.append((_row_offsets(row - start), _row_bytes(first_row + start, row - start)))
        parts.append((records.payload_offsets[row : row + 2], records.payload))
        start = row + 1
    if start < n:
        parts.append((_row_offsets(n - start), _row_bytes(first_row + start, n - start)))
    offsets, payload = concat_payloads(parts)
    return replace(records, payload_offsets=offsets, payload=payload)


def rows_of(emitted: EmittedBatch) -> EmittedBatch:
    """The service's orderer's output with its row numbers as ``payload_row`` (and no
    payloads), as the ordered log keeps it."""
    n = len(emitted)
    size = ROW_BYTES * n
    if emitted.payload.shape[0] != size or int(emitted.payload_offsets[-1]) != size:
        raise InternalOrdererError(
            f"the orderer emitted {n} fragments with {emitted.payload.shape[0]} payload bytes, "
            f"not their {ROW_BYTES}-byte rows in the arrival log"
        )
    rows = np.frombuffer(emitted.payload, dtype=np.uint64, count=n)
    return replace(
        emitted,
        payload_offsets=np.zeros(n + 1, dtype=np.uint64),
        payload=np.zeros(0, dtype=np.uint8),
        payload_row=rows,
    )
