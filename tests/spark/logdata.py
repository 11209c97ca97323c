"""A finished run's data directory written straight by the orderer's own log writer
(:class:`orderer.service.logs.OrderedLog`), without a server: the ``--path`` input of the
Spark job in a fraction of a second, for tests and benchmarks that need a given stream (late
fragments, barriers) or a large one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from orderer.batch import EmittedBatch
from orderer.service.logs import OrderedLog
from orderer.service.segments import FsyncPolicy

__all__ = ["write_ordered_log"]


def write_ordered_log(data_dir: Path, table: pa.Table, *, batch: int = 65536) -> Path:
    """Write ``table`` (the data source's rows, offsets from 0, e.g.
    :func:`tests.spark.oracle.random_stream`) as ``data_dir/ordered/``; returns ``data_dir``."""
    log = OrderedLog.open(Path(data_dir) / "ordered", fsync=FsyncPolicy.NEVER)
    try:
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
            log.append(
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
    finally:
        log.close()
    return Path(data_dir)
