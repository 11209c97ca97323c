"""The one error hierarchy of evb.

The Cython core, the Python API, the CLI and (later) the service all raise these classes, and
each edge translates them once: to an exit status and a ``line N: ...`` message in
``evb replay``, to a gRPC status code in the service. A late fragment is data, not an exception.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "EvbError",
    "InterfaceError",
    "InternalOrdererError",
    "RecordError",
    "ServiceUnavailable",
    "StageError",
]


class EvbError(Exception):
    """Base class of every error evb raises on purpose."""


class ConfigError(EvbError, ValueError):
    """A configuration value is invalid; the message names the parameter and the value (a
    value of None is a parameter that was not given: "(got None)" would tell the user
    nothing)."""

    def __init__(self, parameter: str, value: object, why: str) -> None:
        self.parameter = parameter
        self.value = value
        self.why = why
        given = "" if value is None else f" (got {value!r})"
        super().__init__(f"{parameter}: {why}{given}")


class InterfaceError(EvbError):
    """The API was misused: arrays of different lengths, time going backwards, a reserved value."""

    def __init__(self, detail: str, *, hint: str | None = None) -> None:
        self.detail = detail
        self.hint = hint
        super().__init__(detail if hint is None else f"{detail} ({hint})")


class RecordError(EvbError, ValueError):
    """One input record of a replay file is malformed; ``line`` is 1-based."""

    def __init__(self, line: int, detail: str) -> None:
        self.line = line
        self.detail = detail
        super().__init__(f"line {line}: {detail}")


class StageError(EvbError):
    """A user's analysis stage failed: the message names the stage, the first event it was
    given and the user's own line (the micro-batch is not committed; a rerun resumes)."""

    def __init__(self, stage: str, detail: str, *, event: int | None, where: str | None) -> None:
        self.stage = stage
        self.detail = detail
        self.event = event
        self.where = where
        at = "" if event is None else f" on the events from offset {event}"
        line = "" if where is None else f" ({where})"
        super().__init__(f"stage {stage} failed{at}: {detail}{line}")


class InternalOrdererError(EvbError):
    """An invariant of the core was broken: a bug in evb, never the caller's fault."""


class ServiceUnavailable(EvbError, ConnectionError):
    """The orderer service cannot serve now (unreachable, shutting down, or its storage failed).

    Transient: a client reconnects and resends what was not acknowledged. The service maps it to
    ``UNAVAILABLE``; the client library raises it when it gives up reconnecting, and when its
    first connection is not made within ``connect_timeout`` (the message names the address and
    the cause).
    """


class AuthenticationError(ServiceUnavailable):
    """The orderer refused this client's credentials (its bearer token is wrong or missing).

    A kind of :class:`ServiceUnavailable` on purpose: the orderer will not serve this client,
    and whoever handles "cannot be served" (the CLI's exit status 3, the operator's retry) does
    the right thing with it too; the token may have been rotated since the client read it, so
    a later try can succeed. The client library never retries it by itself.
    """
