"""A finished run's data directory written straight by the orderer's own log writers
(:class:`orderer.service.logs.ArrivalLog` and :class:`~orderer.service.logs.OrderedLog`),
without a server: the ``--path`` input of the Spark job in a fraction of a second, for tests and
benchmarks that need a given stream (late fragments, barriers) or a large one.

The arrival log holds the stream's fragments in offset order (so a fragment's row there is its
offset) and the ordered log points at them, as the service's logs do: the pair reads as the
service's would. It is not a run an orderer made of those arrivals (``evb replay`` of it would
order them anew): it is what the readers of the ordered stream are given."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from orderer.batch import ArrivalRecords, EmittedBatch, FragmentBatch
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.segments import FsyncPolicy

__all__ = ["RunWriter", "run_writer", "write_ordered_log"]


class RunWriter:
    """Appends emitted fragments (with their payloads) to both logs of a data directory."""

    def __init__(self, arrivals: ArrivalLog, ordered: OrderedLog) -> None:
        self.arrivals, self.ordered = arrivals, ordered

    def append(self, emitted: EmittedBatch) -> None:
        """``emitted`` (its ``first_seq`` the next offset): payloads to the arrival log, the
        rest to the ordered log with the rows where its payloads went."""
        n = len(emitted)
        if n == 0:
            return
        row = self.arrivals.records
        fragments = FragmentBatch(
            emitted.source, emitted.timestamp, emitted.barrier, emitted.payload_offsets,
            emitted.payload,
        )
        self.arrivals.append_rows(
            float(emitted.t[0]), ArrivalRecords.fragments(fragments)
        )
        rows = np.arange(row, row + n, dtype=np.uint64)
        self.ordered.append(
            replace(
                emitted,
                payload_offsets=np.zeros(n + 1, np.uint64),
                payload=np.zeros(0, np.uint8),
                payload_row=rows,
            )
        )


@contextmanager
def run_writer(data_dir: Path) -> Iterator[RunWriter]:
    """A :class:`RunWriter` on ``data_dir``'s logs, closed at the end of the block."""
    arrivals = ArrivalLog.open(Path(data_dir) / "arrivals", fsync=FsyncPolicy.NEVER)
    ordered = OrderedLog.open(Path(data_dir) / "ordered", fsync=FsyncPolicy.NEVER)
    try:
        yield RunWriter(arrivals, ordered)
    finally:
        arrivals.close()
        ordered.close()


def write_ordered_log(data_dir: Path, table: pa.Table, *, batch: int = 65536) -> Path:
    """Write ``table`` (the data source's rows, offsets from 0, e.g.
    :func:`tests.spark.oracle.random_stream`) as ``data_dir``'s logs; returns ``data_dir``."""
    with run_writer(data_dir) as writer:
        for start in range(0, table.num_rows, batch):
            part = table.slice(start, batch).combine_chunks()
            payload = part.column("payload").chunk(0) if part.num_rows else None
            if payload is None:
                continue
            offsets = np.frombuffer(payload.buffers()[1], np.int32)[
                payload.offset : payload.offset + len(payload) + 1
            ]
            data = payload.buffers()[2]
            raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
            writer.append(
                EmittedBatch(
                    first_seq=start,
                    t=np.zeros(part.num_rows),
                    source=part.column("source").to_numpy().astype(np.uint32),
                    timestamp=part.column("timestamp").to_numpy().view(np.uint64),
                    barrier=part.column("barrier").to_numpy().astype(np.uint32),
                    late=part.column("late").to_numpy(zero_copy_only=False),
                    payload_offsets=(offsets - offsets[0]).astype(np.uint64),
                    payload=raw[offsets[0] : offsets[-1]],
                )
            )
    return Path(data_dir)
