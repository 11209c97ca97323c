"""How the service runs: :class:`ServiceConfig` (address, data directory, durability, limits,
retention, TLS) and :func:`configs_from_mapping`, which splits one YAML or CR-style mapping into
the orderer's parameters (:class:`~orderer.config.OrdererConfig`) and these settings.

Why a module of its own: ``evb serve`` builds these settings from its flags and config file
before anything starts, and every check of a setting happens here, once, before the service
opens a file or a port (a wrong value is a :class:`~orderer.errors.ConfigError` naming it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from orderer.config import OrdererConfig, field_texts, parameter_names, snake_case
from orderer.errors import ConfigError
from orderer.flags.serve import ServeCommand
from orderer.flags.values import split_peers
from orderer.replay.slicing import Slicing
from orderer.service.segments import FsyncPolicy
from orderer.stats import SliceRole
from orderer.wire.limits import MAX_PAYLOAD_BYTES, REPLY_MAX_BYTES

__all__ = [
    "GivenParameter",
    "ServiceConfig",
    "configs_from_mapping",
    "every_parameter",
    "setting_texts",
]


@dataclass(frozen=True)
class ServiceConfig:
    """How the service runs (the orderer's own parameters are an ``OrdererConfig``).

    A setting that ``evb serve`` also takes as a flag is described once, on the field of the
    same name of :class:`~orderer.flags.serve.ServeCommand` (the typed command line, which the
    operator writes too); the others here. :func:`setting_texts` gives each field's text."""

    listen: str = "[::]:50051"
    data_dir: Path = Path("evb-data")
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    """Address the metrics endpoint binds."""
    max_payload_bytes: int = 1 << 20
    run: int = 1
    strict_sources: bool = False
    stop_grace: float = 10.0
    max_message_bytes: int = 64 << 20
    """Largest gRPC message received or sent."""
    subscribe_max_fragments: int = 65536
    """Most fragments per ``OrderedBatch``."""
    subscribe_max_bytes: int = REPLY_MAX_BYTES
    """Most bytes of one encoded ``OrderedBatch``: payloads, per-fragment columns and framing
    (at least one fragment is always sent).

    The default, 3.5 MiB, leaves headroom under gRPC's default 4 MiB receive limit, so a
    reader with a plain generated stub can subscribe; above 4 MiB only readers that raise
    their limit can."""
    segment_bytes: int = 64 << 20
    """Size at which a log segment file is closed and a new one started."""
    retention_bytes: int | None = None
    retention_seconds: float | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token: str | None = field(default=None, repr=False)
    """Bearer token every call but health checking must carry (needs TLS)."""
    token_file: Path | None = None
    orderers: int = 1
    orderer_index: int = 0
    slice_ticks: int | None = None
    peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        for name in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        try:
            object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        except ValueError:
            raise ConfigError("fsync", self.fsync, "must be always, batch or never") from None
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics_port", self.metrics_port, "must be a port number")
        if isinstance(self.run, bool) or not isinstance(self.run, int) or self.run < 0:
            raise ConfigError("run", self.run, "must be an integer >= 0")
        for name in (
            "max_payload_bytes",
            "max_message_bytes",
            "subscribe_max_fragments",
            "subscribe_max_bytes",
            "segment_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, value, "must be a positive integer")
        if self.max_payload_bytes > MAX_PAYLOAD_BYTES:
            raise ConfigError(
                "max_payload_bytes",
                self.max_payload_bytes,
                f"must be at most {MAX_PAYLOAD_BYTES} (4 MiB less a reply's framing), so"
                " that a reply holding one such fragment fits gRPC's default 4 MiB limit of"
                " the readers",
            )
        if not math.isfinite(self.stop_grace) or self.stop_grace < 0:
            raise ConfigError("stop_grace", self.stop_grace, "must be >= 0 seconds")
        if self.retention_bytes is not None and (
            isinstance(self.retention_bytes, bool)
            or not isinstance(self.retention_bytes, int)
            or self.retention_bytes <= 0
        ):
            raise ConfigError("retention_bytes", self.retention_bytes, "must be a positive integer")
        if self.retention_seconds is not None and not (
            isinstance(self.retention_seconds, int | float) and self.retention_seconds > 0
        ):
            raise ConfigError("retention_seconds", self.retention_seconds, "must be > 0 seconds")
        self._check_slicing()

    def _check_slicing(self) -> None:
        """N, K, T and the peers, each checked alone (the ranges are :class:`Slicing`'s), then
        together: T for a run over several orderers, K among them, one address each."""
        for name in ("orderers", "orderer_index", "slice_ticks"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(name, value, "must be a whole number")
        Slicing(self.orderers, 1 if self.slice_ticks is None else self.slice_ticks)
        if self.orderer_index < 0:
            raise ConfigError("orderer_index", self.orderer_index, "must be >= 0")
        if self.orderer_index >= self.orderers:
            raise ConfigError(
                "orderer_index",
                self.orderer_index,
                f"must be below the number of orderers, {self.orderers} (they are numbered 0 "
                f"to {self.orderers - 1})",
            )
        if self.orderers > 1 and self.slice_ticks is None:
            raise ConfigError(
                "slice_ticks",
                None,
                f"is needed for a run over {self.orderers} orderers: every source computes a "
                "fragment's orderer from it",
            )
        try:
            peers = split_peers(self.peers)
        except ValueError as error:
            raise ConfigError("peers", self.peers, str(error)) from None
        object.__setattr__(self, "peers", peers)
        if peers and len(peers) != self.orderers:
            raise ConfigError(
                "peers",
                ",".join(peers),
                f"must name every orderer of the run, {self.orderers}, in index order "
                f"({len(peers)} given)",
            )

    @property
    def slice_role(self) -> SliceRole:
        """Where this orderer stands in its run, as ``GetStats`` shows it."""
        return SliceRole(self.orderers, self.orderer_index, self.slice_ticks, self.peers)

    @property
    def slicing(self) -> Slicing | None:
        """The run's slicing rule; None without a slice length (a plain orderer)."""
        if self.slice_ticks is None:
            return None
        return Slicing(self.orderers, self.slice_ticks)


def setting_texts() -> dict[str, str]:
    """The text of each field of :class:`ServiceConfig`, in their order: its own docstring, or,
    for a setting that is also a flag of ``evb serve``, the docstring of ServeCommand's field of
    that name (a test holds that each has exactly one of the two)."""
    own, flags = field_texts(ServiceConfig), field_texts(ServeCommand)
    return {f.name: own.get(f.name) or flags[f.name] for f in fields(ServiceConfig)}


@dataclass(frozen=True, slots=True)
class GivenParameter:
    """An orderer parameter the user gave when starting (a flag, a ``--config`` key), and how
    they wrote it. Why the service is told: a restart continues its run with the parameters the
    run recorded, and only what the user actually gave is weighed against them
    (:mod:`orderer.service.restart`): a flag left out keeps the run's value, it does not mean
    the default."""

    name: str
    """One of :func:`~orderer.config.parameter_names` (``build_window``,
    ``flow_control.queue_xoff``)."""
    written: str
    """What the user wrote, for messages: the flag (``--build-window``), or the file, line and
    key (``evb.yaml:3: buildWindow``)."""


def every_parameter() -> tuple[GivenParameter, ...]:
    """Every parameter, as given by its own name: what a caller handing the service a whole
    :class:`OrdererConfig` (a test, an embedding program) means by it."""
    return tuple(GivenParameter(name, name) for name in parameter_names())


def configs_from_mapping(mapping: Mapping[str, Any]) -> tuple[OrdererConfig, ServiceConfig]:
    """Split a YAML/CR-style mapping (camelCase or snake_case keys) into the orderer's parameters
    and the service's settings; unknown keys are an error naming the key."""
    service_names = {f.name for f in fields(ServiceConfig)}
    service: dict[str, Any] = {}
    ordering: dict[str, Any] = {}
    for key, value in mapping.items():
        if snake_case(key) in service_names:
            service[snake_case(key)] = value
        else:
            ordering[key] = value
    return OrdererConfig.from_mapping(ordering), ServiceConfig(**service)
