"""Built events written as NSCLDAQ's glom writes them (``evb spark-job --format nscldaq``).

Each event row becomes one PHYSICS_EVENT ring item: the ring item header, a body header with the
event's timestamp (by the timestamp policy) and glom's source id (``--glom-source-id``), a u32
that counts itself and the fragments that follow, then the event's fragments in the
event-builder fragment layout (header ``{timestamp, source id, payload size, barrier type}``,
then the payload as it arrived). A fragment that came from ``evb send --nscldaq`` carries the
whole ring item as its payload, so reading a written event back gives the original items byte
for byte. A barrier row is written as its payload when that payload is a ring item (a state
change from NSCLDAQ: it passes through as it came); a barrier whose payload is not a ring item is
wrapped as glom wraps it, in an EVB_UNKNOWN_PAYLOAD item (ring item header, then the fragment,
header and payload). The layouts are :mod:`orderer.nscldaq.format`'s; the facts and how evb
differs from glom are in docs/nscldaq.md ("Built events").

Files (:class:`NscldaqSink`): one per micro-batch and partition, ``<batch>-<partition>.evt``
with both numbers zero-padded, so that the names sort in offset order and
``cat OUTPUT/events/run=RUN/*.evt`` is the run's built stream. Why a sink of its own: Spark's
file sink knows no binary format, so the job writes through ``foreachBatch``, which Spark calls
again with the same batch id and the same data after a restart; the sink makes that call write
nothing twice. Each file is written under a temporary name and renamed, and a batch counts as
written only once its manifest ``_nscldaq/<batch>.json`` exists (written last, the same way):
a batch with a manifest is skipped, one without has its leftovers removed and is written again.
The summary needs the events' columns without payloads, which a ring item does not hold (the
fragments' offsets, lateness); the sink writes them beside, as Parquet under ``_index/<batch>``
(hidden from readers of the directory by the leading underscore).

The encoding (:func:`ring_items`, :func:`encode_partition`) is pure pyarrow and struct, testable
without Spark; the executors encode, the driver writes the files (one partition in memory at a
time), so that any Hadoop URI works as the output as it does for the other formats.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from orderer.errors import ConfigError
from orderer.job_config import DEFAULT_GLOM_SOURCE_ID
from orderer.nscldaq.format import (
    ABNORMAL_ENDRUN,
    BEGIN_RUN,
    END_RUN,
    EVB_FRAGMENT,
    EVB_GLOM_INFO,
    EVB_UNKNOWN_PAYLOAD,
    MONITORED_VARIABLES,
    PACKET_TYPES,
    PAUSE_RUN,
    PERIODIC_SCALERS,
    PHYSICS_EVENT,
    PHYSICS_EVENT_COUNT,
    RESUME_RUN,
    RING_FORMAT,
    RING_HEADER_SIZE,
    pack_fragment,
    pack_fragment_header,
    pack_ring_item,
)
from orderer.spark.output.files import Directory

__all__ = [
    "CHUNK_SPARK_SCHEMA",
    "NscldaqSink",
    "check_glom_source_id",
    "encode_partition",
    "ring_items",
]

KNOWN_ITEM_TYPES = frozenset(
    {
        BEGIN_RUN, END_RUN, PAUSE_RUN, RESUME_RUN, ABNORMAL_ENDRUN, PACKET_TYPES,
        MONITORED_VARIABLES, RING_FORMAT, PERIODIC_SCALERS, PHYSICS_EVENT, PHYSICS_EVENT_COUNT,
        EVB_FRAGMENT, EVB_UNKNOWN_PAYLOAD, EVB_GLOM_INFO,
    }
)
"""The item types glom takes a barrier's payload to be a ring item by (NSCLDAQ's ring item
factory's known types)."""

CHUNK_SPARK_SCHEMA = "partition int, items binary"
"""What the executors hand the driver: a partition's ring items, in pieces, in order."""

_U32 = struct.Struct("<I")
_RING_HEADER = struct.Struct("<II")
_U64_MASK = 2**64 - 1
_NAME = re.compile(r"(\d{12})-\d{5}\.evt")


def check_glom_source_id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ConfigError("--glom-source-id", value, "must be an integer from 0 to 4294967295")
    return value


def is_ring_item(payload: bytes) -> bool:
    """Whether a payload is one whole ring item of a type NSCLDAQ knows: its size word equals
    its length (stricter than glom, which trusts the size word: a payload whose size word
    disagrees would be written cut or overrun) and its type is known."""
    if len(payload) < RING_HEADER_SIZE:
        return False
    size, item_type = _RING_HEADER.unpack_from(payload, 0)
    return size == len(payload) and item_type in KNOWN_ITEM_TYPES


def ring_items(events: pa.RecordBatch | pa.Table, glom_source_id: int) -> bytes:
    """The ring items of event rows (``orderer.building.glom.EVENT_SCHEMA``, payloads included),
    back to back in row order."""
    out: list[bytes] = []
    columns = events.select(["timestamp", "barrier", "fragments"]).to_pydict()
    for stamp, barrier, fragments in zip(
        columns["timestamp"], columns["barrier"], columns["fragments"], strict=True
    ):
        if barrier:
            (fragment,) = fragments  # a barrier row holds its barrier alone
            payload = fragment["payload"]
            if is_ring_item(payload):
                out.append(payload)
            else:  # glom's wrapping: ring item header, then the whole fragment
                out.append(_RING_HEADER.pack(
                    RING_HEADER_SIZE + 20 + len(payload), EVB_UNKNOWN_PAYLOAD
                ))
                out.append(pack_fragment(
                    fragment["timestamp"] & _U64_MASK, fragment["source"], barrier, payload
                ))
            continue
        body: list[bytes] = []
        for fragment in fragments:
            payload = fragment["payload"]
            body.append(pack_fragment_header(
                fragment["timestamp"] & _U64_MASK, fragment["source"], len(payload), 0
            ))
            body.append(payload)
        joined = b"".join(body)
        out.append(pack_ring_item(
            PHYSICS_EVENT,
            _U32.pack(len(joined) + 4) + joined,  # the size word counts itself
            timestamp=stamp & _U64_MASK,
            source=glom_source_id,
            barrier=0,
        ))
    return b"".join(out)


def encode_partition(
    batches: Iterable[pa.RecordBatch], glom_source_id: int, partition: int
) -> Iterator[pa.RecordBatch]:
    """One partition's event batches -> its ring items as CHUNK_SPARK_SCHEMA rows, one per
    non-empty batch, in order (the executors' step; iterator to iterator)."""
    for batch in batches:
        if batch.num_rows:
            yield pa.RecordBatch.from_pydict(
                {"partition": [partition], "items": [ring_items(batch, glom_source_id)]},
                schema=pa.schema([("partition", pa.int32()), ("items", pa.binary())]),
            )


def _encoder(glom_source_id: int) -> Any:
    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        return encode_partition(batches, glom_source_id, partition)

    return encode


def _summary_columns(events: Any) -> Any:
    """The event rows less the payloads (``orderer.spark.output.summary.SUMMARY_SCHEMA``)."""
    from pyspark.sql import functions as F

    inner = F.transform(
        "fragments",
        lambda f: F.struct(
            f["offset"].alias("offset"),
            f["source"].alias("source"),
            f["timestamp"].alias("timestamp"),
            f["late"].alias("late"),
        ),
    )
    return events.select(
        "event", "timestamp", "multiplicity", "barrier", "late", inner.alias("fragments")
    )


@dataclass
class NscldaqSink:
    """Writes each micro-batch's events into ``directory`` once (the module docstring says
    how); an instance is the ``foreachBatch`` function, and the batch job calls it with batch 0."""

    spark: Any
    directory: str
    glom_source_id: int = DEFAULT_GLOM_SOURCE_ID

    MANIFESTS = "_nscldaq"
    INDEX = "_index"

    def __call__(self, events: Any, batch_id: int) -> None:
        files = Directory(self.spark, self.directory)
        manifest = f"{self.MANIFESTS}/{batch_id:012d}.json"
        if files.exists(manifest):  # written before a restart: Spark calls again, we do not
            return
        for name in files.names():  # what an interrupted attempt at this batch left
            match = _NAME.fullmatch(name)
            if (match and int(match.group(1)) == batch_id) or name.startswith(".tmp-"):
                files.remove(name)
        events = events.persist()
        try:
            index = f"{self.directory}/{self.INDEX}/{batch_id:012d}"
            _summary_columns(events).write.mode("overwrite").parquet(index)
            written = self._write_items(files, events, batch_id)
        finally:
            events.unpersist()
        files.write(manifest, [json.dumps({"batch": batch_id, "files": written}).encode()])

    def _write_items(self, files: Directory, events: Any, batch_id: int) -> dict[str, int]:
        """The batch's ring items, one file per partition in partition order (= offset order:
        the source plans a batch's partitions in offset order); returns name -> bytes."""
        chunks = events.mapInArrow(_encoder(self.glom_source_id), CHUNK_SPARK_SCHEMA)
        rows = chunks.toLocalIterator(prefetchPartitions=False)
        written: dict[str, int] = {}
        pending: Any = next(rows, None)
        while pending is not None:
            partition = int(pending["partition"])
            name = f"{batch_id:012d}-{partition:05d}.evt"

            def same_partition(first: Any = pending, partition: int = partition) -> Iterator[bytes]:
                nonlocal pending
                yield bytes(first["items"])
                for row in rows:
                    if int(row["partition"]) != partition:
                        pending = row
                        return
                    yield bytes(row["items"])
                pending = None

            written[name] = files.write(name, same_partition())
        return written

    def committed(self) -> list[int]:
        """The batch ids written whole (with a manifest), ascending."""
        files = Directory(self.spark, self.directory)
        return sorted(
            int(name.removesuffix(".json"))
            for name in files.names(self.MANIFESTS)
            if name.endswith(".json") and not name.startswith(".")
        )

    def drop_uncommitted(self) -> list[str]:
        """Remove ring-item files of batches without a manifest (a driver that died inside a
        batch, never restarted to finish it); returns their names."""
        files = Directory(self.spark, self.directory)
        done = set(self.committed())
        dropped = []
        for name in files.names():
            match = _NAME.fullmatch(name)
            if (match and int(match.group(1)) not in done) or name.startswith(".tmp-"):
                files.remove(name)
                dropped.append(name)
        return dropped

    def summary_rows(self, schema: str) -> Any:
        """The committed batches' event rows less the payloads, for the run summary."""
        paths = [f"{self.directory}/{self.INDEX}/{batch:012d}" for batch in self.committed()]
        if not paths:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(*paths)
