"""A synthetic run with physics as the Spark job would read it, without an orderer: its
fragments by timestamp, numbered. Shared by the tests of :mod:`orderer.replay.physics` and of
the examples (``examples/``).

Why no orderer: a run without stalls or late backlogs comes out of the orderer in timestamp
order (ties: source id, then arrival order), so sorting the generated fragments gives the same
stream, in a fraction of the time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from orderer.batch import ArrivalKind
from orderer.building.glom import FRAGMENT_SCHEMA
from orderer.replay.physics import PAYLOAD_SIZE
from orderer.replay.synthetic import SyntheticRun, generate_records


def ordered_fragments(spec: SyntheticRun) -> pa.Table:
    """The run's fragments by timestamp (ties: source, then arrival), offsets 0, 1, ...:
    FRAGMENT_SCHEMA rows, none late."""
    records = generate_records(spec)
    fragment = np.flatnonzero(records.kind == ArrivalKind.FRAGMENT)
    timestamp, source = records.value[fragment], records.source[fragment]
    order = np.lexsort((source, timestamp))
    n = order.shape[0]
    rows = records.payload.reshape(n, PAYLOAD_SIZE)[order]
    payload = pa.Array.from_buffers(
        pa.binary(),
        n,
        [
            None,
            pa.py_buffer(np.arange(n + 1, dtype=np.int32) * PAYLOAD_SIZE),
            pa.py_buffer(np.ascontiguousarray(rows)),
        ],
    )
    return pa.table(
        {
            "offset": np.arange(n, dtype=np.int64),
            "source": source[order].astype(np.int64),
            "timestamp": timestamp[order].astype(np.int64),
            "barrier": records.barrier[fragment][order].astype(np.int64),
            "late": np.zeros(n, dtype=bool),
            "payload": payload,
        },
        schema=FRAGMENT_SCHEMA,
    )
