"""Why the service refused a ``Submit`` stream at its opening, carried in the stream's initial
metadata as well as in its status.

Why both: grpcio's asyncio client loses the status of a stream that the server ends while one
of the client's writes is under way: the failed write overwrites it with ``INTERNAL: Internal
error from Core`` (grpc/grpc#36066; measured here with grpcio 1.85: 2 writes lose it 7 times in
100, 20 writes 91 times). A stream refused at its opening (a full log volume, failed storage, a
service stopping) meets that race on every reconnect, since the client opens it by writing. The
initial metadata is received before the status and never overwritten, so the client reads the
reason there when the status was lost (:mod:`orderer.client.link`).
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc

__all__ = ["REFUSAL_KEY", "refusal_from", "refusal_metadata"]

REFUSAL_KEY = "evb-refusal-bin"
"""Binary metadata (``-bin``): a reason may name a path in any encoding's characters."""


def refusal_metadata(code: grpc.StatusCode, details: str) -> tuple[tuple[str, bytes]]:
    """The initial metadata of a stream refused with this status: ``NAME details``."""
    return ((REFUSAL_KEY, f"{code.name} {details}".encode()),)


def refusal_from(
    metadata: Iterable[tuple[str, str | bytes]] | None,
) -> tuple[grpc.StatusCode, str] | None:
    """The status a stream was refused with, read from its initial metadata; None when the
    metadata names none (or a code this client does not know)."""
    for key, value in metadata or ():
        if key != REFUSAL_KEY:
            continue
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        name, _, details = text.partition(" ")
        code = getattr(grpc.StatusCode, name, None)
        if isinstance(code, grpc.StatusCode):
            return code, details
    return None
