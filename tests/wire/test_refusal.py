"""The refusal carried in a ``Submit`` stream's initial metadata (grpc/grpc#36066 aside)."""

from __future__ import annotations

import grpc

from orderer.wire.refusal import REFUSAL_KEY, refusal_from, refusal_metadata


def test_a_refusal_reads_back_as_its_status() -> None:
    details = "the log volume of /data/été refuses writes (No space left on device)"
    metadata = refusal_metadata(grpc.StatusCode.UNAVAILABLE, details)
    assert refusal_from(metadata) == (grpc.StatusCode.UNAVAILABLE, details)
    as_received = [("other", "x"), *((key, bytes(value)) for key, value in metadata)]
    assert refusal_from(as_received) == (grpc.StatusCode.UNAVAILABLE, details)


def test_metadata_without_a_known_refusal_reads_as_none() -> None:
    assert refusal_from(None) is None
    assert refusal_from([("other", "UNAVAILABLE x")]) is None
    assert refusal_from([(REFUSAL_KEY, b"NO_SUCH_CODE x")]) is None
