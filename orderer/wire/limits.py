"""The limits both ends of the wire keep: the largest reply a plain reader accepts, the service's
bound on a reply and on a payload, a commit's metadata, the reserved timestamp, and
:class:`~orderer.wire.submit.BatchLimits` (what one service accepts, from its flags).

Why a module of its own: the service's settings, its store and the client library need these
numbers, and none of them needs protobuf for it; :mod:`orderer.wire.convert`, which does, reads
them from here too.
"""

from __future__ import annotations

from orderer.wire.submit import BatchLimits

__all__ = [
    "DEFAULT_READER_MAX_BYTES",
    "MAX_COMMIT_METADATA",
    "MAX_PAYLOAD_BYTES",
    "REPLY_MAX_BYTES",
    "RESERVED_TIMESTAMP",
    "BatchLimits",
    "ordered_batch_bytes",
]

RESERVED_TIMESTAMP = 2**64 - 1
"""The core's +infinity frontier; no fragment may carry it."""

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
    """An upper bound (within ~80 bytes) on the encoded size of an ``OrderedBatch``
    (:func:`~orderer.wire.convert.emitted_to_pb`) of ``fragments`` fragments holding
    ``payload_bytes`` of payload. Why a bound and not the payload alone: the per-fragment
    columns are 25-33 bytes a fragment, 2 MiB for 65,536 fragments, which took a reply of 4 MiB
    of payload past a default reader's limit."""
    per_fragment = _COLUMN_BYTES + (_OFFSET_BYTES if payload else 0)
    return _FRAMING_BYTES + per_fragment * fragments + (payload_bytes if payload else 0)


MAX_PAYLOAD_BYTES = DEFAULT_READER_MAX_BYTES - ordered_batch_bytes(1, 0)
"""The largest payload the service may accept: a reply holding one such fragment still fits a
reader with gRPC's default limit (a reply always holds at least one fragment)."""
