"""``evb serve``'s service flags (:func:`add_serve_flags`) and :class:`ServeCommand`, a command
line of them, typed: the orderer pod's, as the operator writes it.

Why here, not in :mod:`orderer.cli.parser`: the operator writes this command line and may not
import the command line (:mod:`orderer.flags` says why both are served from here). The ``evb``
parser adds these flags to its ``serve`` subcommand, then the ordering parameters; the operator
builds a ServeCommand and writes its :meth:`~ServeCommand.to_argv`, whose flags are found among
these (:mod:`orderer.flags.argv`), and which ``evb`` reads back into the same command (a
property test holds it).

Why not the ordering parameters: the operator writes them in the ``--config`` file, which it
writes once (``evb_operator.specs.orderer.serve_config`` says why), never as flags; the command
line checks them (:mod:`orderer.cli.arguments`). :meth:`ServeCommand.from_argv` refuses one.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from orderer.config import flag_help
from orderer.flags.argv import command_arguments, read_command
from orderer.flags.values import (
    COUNT,
    NATURAL,
    PORT,
    SECONDS,
    SECONDS_OR_ZERO,
    SLICE_TICKS,
    file_default,
    flag,
    peer_list,
)

__all__ = ["COMMAND", "Fsync", "LogLevel", "ServeCommand", "add_serve_flags", "build_parser"]

COMMAND = "serve"

Fsync = Literal["always", "batch", "never"]
"""When the logs are forced to disk: the values of the service's ``FsyncPolicy``
(``orderer.service.segments``, which the operator may not import; a test holds them equal)."""

LogLevel = Literal["debug", "info", "warning"]


@dataclass(frozen=True, kw_only=True)
class ServeCommand:
    """``evb serve`` with every flag of :func:`add_serve_flags`, typed; None (the default of
    each but ``log_level``): the flag is left out, and the ``--config`` file's value, else the
    service's default, is in force.

    Each field's text is the one of its setting: its flag's help, the README's table of the
    settings, and the text of the service's field of the same name
    (``orderer.service.settings.ServiceConfig``, which restates none)."""

    config: Path | None = None
    """A YAML file of the orderer's parameters and the service's settings; a flag wins over it.

    Its keys are the custom resource's spec fields, camelCase or snake_case: the ordering
    parameters, and the settings here and in ``orderer.service.settings.ServiceConfig``."""
    listen: str | None = None
    """Address the gRPC server binds, HOST:PORT; port 0 picks a free port."""
    data_dir: Path | None = None
    """Directory of the logs; a restart on it resumes the run.

    It holds the arrival log and the ordered log, and the parameters the run began with."""
    fsync: Fsync | None = None
    """When the logs are forced to disk: always, batch (a group commit before the
    acknowledgements) or never."""
    metrics_port: int | None = None
    """Port of the Prometheus ``/metrics`` endpoint; 0: any free port.

    Unset: no endpoint."""
    max_payload_bytes: int | None = None
    """Largest payload of one fragment; a larger one is refused (INVALID_ARGUMENT).

    At most :data:`~orderer.wire.limits.MAX_PAYLOAD_BYTES` (4 MiB less 116 bytes), so that a
    reply holding one such fragment still fits a reader with gRPC's default 4 MiB limit."""
    run: int | None = None
    """Number of the first run (``evb begin-run`` starts the next).

    A data directory that already holds begun runs continues from its last one (the arrival
    log wins)."""
    strict_sources: bool | None = None
    """Refuse fragments, watermarks and ends of sources not declared in ``--sources``.

    Either flag overrides the file: ``--no-strict-sources`` its true, ``--strict-sources`` its
    false (a ServeCommand writes both)."""
    stop_grace: float | None = None
    """Seconds calls get to finish on shutdown; keep it below terminationGracePeriodSeconds."""
    retention_bytes: int | None = None
    """Ordered-log size kept: the oldest sealed segments are deleted while the log is larger.

    Unset keeps everything. Until consumers commit offsets (the Spark source), retention only
    spares the segment being written, so size it well above what a consumer lags."""
    retention_seconds: float | None = None
    """Ordered-log age kept: sealed segments older than this are deleted.

    Unset keeps everything."""
    tls_cert: Path | None = None
    """PEM certificate chain: serve TLS only.

    With ``--tls-key`` (:mod:`orderer.service.security`)."""
    tls_key: Path | None = None
    """PEM key of ``--tls-cert``."""
    tls_client_ca: Path | None = None
    """PEM CA: mutual TLS, clients must present a certificate it signed."""
    token_file: Path | None = None
    """File holding the bearer token every call must carry (needs TLS).

    A mounted Secret, say, instead of the ``token`` key of ``--config``; health checking needs
    no token."""
    orderers: int | None = None
    """N, the orderers the run is spread over by time slices.

    Fixed for the run (docs/scale-out.md): recorded in its data directory, and a restart must
    give the run's own (:func:`~orderer.service.data_dir.check_role`)."""
    orderer_index: int | None = None
    """This orderer's number, 0 to N-1.

    A StatefulSet pod's ordinal. The orderer takes only the ordinary fragments of the slices
    ``s`` with ``s mod N`` equal to it (the others are refused, INVALID_ARGUMENT). Fixed for
    the run."""
    slice_ticks: int | None = None
    """T, the slice length in timestamp ticks; needed when N > 1.

    Slice ``floor(ts / T)`` belongs to orderer ``slice mod N``. Given with N = 1, the orderer
    keeps its slice index all the same. Fixed for the run."""
    peers: tuple[str, ...] | None = None
    """The N orderers' addresses in index order, shown by GetStats.

    So that a source given one orderer finds the others; unset: not told. Not recorded:
    addresses may change from one start to the next."""
    log_level: LogLevel = "info"
    """Log detail."""

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ServeCommand:
        """The command of an ``evb serve`` command line (``["serve", ...]``); argparse's exit
        status 2 on a bad one, or on an ordering parameter's flag (not one of these)."""
        return cls(**read_command(COMMAND, build_parser(), argv))

    def to_argv(self) -> list[str]:
        """``["serve", ...]``: the arguments that give this command back
        (``from_argv(c.to_argv()) == c``), the flags in the parser's order."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        if self.peers is not None:  # as --peers reads it back
            values["peers"] = ",".join(self.peers)
        return command_arguments(COMMAND, build_parser(), values)


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """``evb serve``'s flags but the ordering parameters: the ``--config`` file, the service's
    settings (each defaults to the file's value, else the service's default), its security and
    its log detail."""
    parser.add_argument("--config", type=Path, metavar="YAML", help=_help("config"))
    settings: tuple[tuple[str, object, dict[str, Any]], ...] = (
        ("listen", "[::]:50051", {"metavar": "HOST:PORT"}),
        ("data_dir", "evb-data", {"type": Path, "metavar": "DIR"}),
        ("fsync", "batch", {"choices": list(get_args(Fsync))}),
        ("metrics_port", "none", {"type": PORT, "metavar": "PORT"}),
        ("max_payload_bytes", 1 << 20, {"type": COUNT, "metavar": "N"}),
        ("run", 1, {"type": int, "metavar": "N"}),
        ("strict_sources", "no", {"action": argparse.BooleanOptionalAction, "default": None}),
        ("stop_grace", "10", {"type": SECONDS_OR_ZERO, "metavar": "S"}),
        ("retention_bytes", "all", {"type": COUNT, "metavar": "N"}),
        ("retention_seconds", "all", {"type": SECONDS, "metavar": "S"}),
    )
    for name, shown, how in settings:
        parser.add_argument(flag(name), help=f"{_help(name)} {file_default(shown, name)}", **how)
    slices = parser.add_argument_group(
        "one run over several orderers by time slices (docs/scale-out.md); fixed for the run"
    )
    scale_out: tuple[tuple[str, object, dict[str, Any]], ...] = (
        ("orderers", 1, {"type": COUNT, "metavar": "N"}),
        ("orderer_index", 0, {"type": NATURAL, "metavar": "K"}),
        ("slice_ticks", "none", {"type": SLICE_TICKS, "metavar": "T"}),
        ("peers", "none", {"type": peer_list, "metavar": "HOST:PORT,..."}),
    )
    for name, shown, how in scale_out:
        slices.add_argument(flag(name), help=f"{_help(name)} {file_default(shown, name)}", **how)
    tls = parser.add_argument_group("security (default: plaintext, no token)")
    for name in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
        tls.add_argument(flag(name), type=Path, metavar="FILE", help=_help(name))
    parser.add_argument(
        "--log-level",
        default=ServeCommand.log_level,
        choices=list(get_args(LogLevel)),
        help=_help("log_level"),
    )


def _help(name: str) -> str:
    """The help of the flag of the field ``name``: its text's
    (:func:`~orderer.config.flag_help`)."""
    return flag_help(ServeCommand, name)


def build_parser() -> argparse.ArgumentParser:
    """A parser of :func:`add_serve_flags` alone (``evb serve``'s, the ordering parameters
    aside): :meth:`ServeCommand.from_argv` reads with it, :meth:`ServeCommand.to_argv` finds
    its flags in it."""
    parser = argparse.ArgumentParser(prog=f"evb {COMMAND}")
    add_serve_flags(parser)
    return parser
