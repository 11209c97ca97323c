"""A ``Submit`` message from its raw bytes: checked columns, a watermark or an end of source.

Why raw bytes: the service's ``Submit`` receives each message undecoded (no protobuf
deserializer) and :func:`decode_submit` makes of it what the service takes, in one compiled
call that reads the wire format, applies every rule of a batch and copies the columns without
the GIL (``orderer/_core/submit_wire.pyx``, ``batch_fields.pyx``). The protobuf runtime would
build Python objects and copies of every field on the event loop's thread first, for every
message; deduplication against the sequence numbers the service holds is part of the same
call. Everything a client can get wrong, malformed wire data included, raises
:class:`~orderer.errors.InterfaceError` naming the field; the service turns it into
``INVALID_ARGUMENT``.

Callers: the service's servicer (:mod:`orderer.service.servicer`) and, for messages already
decoded by the protobuf runtime, :func:`orderer.wire.convert.batch_from_pb`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orderer._core import core
from orderer.batch import FragmentBatch

__all__ = [
    "BatchLimits",
    "EndOfSourceItem",
    "IncomingBatch",
    "SubmitItem",
    "WatermarkItem",
    "decode_submit",
]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What the service accepts beyond the wire format (``evb serve`` flags)."""

    max_payload_bytes: int = 1 << 20
    """Largest payload of one fragment, in bytes."""
    sources: frozenset[int] | None = None
    """With ``--strict-sources``: the declared sources, the only ones accepted. None: any."""
    compiled: core.SubmitLimits = field(init=False, repr=False, compare=False)
    """The same limits as the compiled decoder reads them (made once, not per message)."""

    def __post_init__(self) -> None:
        compiled = core.SubmitLimits(self.max_payload_bytes, self.sources)
        object.__setattr__(self, "compiled", compiled)


@dataclass(frozen=True, slots=True)
class IncomingBatch:
    """A checked ``FragmentBatch`` from a client."""

    batch: FragmentBatch
    source: int | None
    """The source of a single-source batch (also known when the batch is empty); None for a
    multi-source batch."""
    first_sequence: int | None
    """Sequence number of the first fragment; None for a multi-source batch (not deduplicated)."""
    next_sequence: int | None = None
    """The source's next sequence number once the batch is taken in: the ack it is owed (of a
    deduplicated batch: the batch may be empty, all of it held already); None for a
    multi-source batch."""
    sources: Sequence[int] = ()
    """The distinct sources of the batch, ascending (the sources its stream speaks for)."""


@dataclass(frozen=True, slots=True)
class WatermarkItem:
    """A ``Watermark``: nothing older than ``watermark`` will come from ``source``."""

    source: int
    watermark: int


@dataclass(frozen=True, slots=True)
class EndOfSourceItem:
    """An ``EndOfSource``: the source said end of stream."""

    source: int


SubmitItem = IncomingBatch | WatermarkItem | EndOfSourceItem
"""What one ``SubmitRequest`` holds, checked."""


def decode_submit(
    data: bytes, limits: BatchLimits, sequences: dict[int, int] | None = None
) -> SubmitItem:
    """The ``SubmitRequest`` encoded in ``data``, checked against ``limits``; every problem
    raises ``InterfaceError`` naming the field (or the byte where the wire data breaks).

    With ``sequences``, the next sequence number the service expects of each source (read,
    never changed: the service moves it once it has taken the batch in), a single-source batch
    is deduplicated: only the part the service does not hold yet comes back, and a batch that
    would leave a gap is refused."""
    kind, value = core.decode_submit(data, limits.compiled, sequences)
    if kind == core.ITEM_BATCH:
        source, timestamp, barrier, offsets, payload, single, first, following, sources = value
        batch = FragmentBatch(source, timestamp, barrier, offsets, payload)
        return IncomingBatch(batch, single, first, following, sources)
    if kind == core.ITEM_WATERMARK:
        return WatermarkItem(value[0], value[1])
    return EndOfSourceItem(value[0])
