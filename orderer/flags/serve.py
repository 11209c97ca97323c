"""``evb serve``'s service flags (:func:`add_serve_flags`) and :class:`ServeCommand`, a command
line of them, typed: the orderer pod's, as the operator writes it.

Why here, not in :mod:`orderer.cli.parser`: the operator writes this command line and may not
import the command line (:mod:`orderer.flags` says why both are served from here). The ``evb``
parser adds these flags to its ``serve`` subcommand, then the ordering parameters; the operator
builds a ServeCommand and writes its :meth:`~ServeCommand.to_argv`, whose flags are found among
these (:mod:`orderer.flags.argv`), and which ``evb`` reads back into the same command (a
property test holds it).

Why not the ordering parameters: the operator writes them in the ``--config`` file, which it
writes once (``evb_operator.specs_orderer.serve_config`` says why), never as flags; the command
line checks them (:mod:`orderer.cli.arguments`). :meth:`ServeCommand.from_argv` refuses one.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

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
    service's default, is in force."""

    config: Path | None = None
    """The ``--config`` file: the orderer's parameters and the service's settings."""
    listen: str | None = None
    data_dir: Path | None = None
    fsync: Fsync | None = None
    metrics_port: int | None = None
    max_payload_bytes: int | None = None
    run: int | None = None
    strict_sources: bool | None = None
    """True and False are written (``--strict-sources``, ``--no-strict-sources``): either
    overrides the file."""
    stop_grace: float | None = None
    retention_bytes: int | None = None
    retention_seconds: float | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token_file: Path | None = None
    orderers: int | None = None
    """N, the orderers of a run spread over several by time slices (docs/scale-out.md)."""
    orderer_index: int | None = None
    """This orderer's number, 0 to N-1 (a StatefulSet pod's ordinal)."""
    slice_ticks: int | None = None
    """T, the slice length in timestamp ticks (needed when N > 1)."""
    peers: tuple[str, ...] | None = None
    """The N orderers' addresses, in index order."""
    log_level: LogLevel = "info"

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
    parser.add_argument("--config", type=Path, metavar="YAML", help="parameters and settings")
    settings: tuple[tuple[str, str, object, dict[str, Any]], ...] = (
        ("listen", "gRPC address", "[::]:50051", {"metavar": "HOST:PORT"}),
        ("data_dir", "logs directory", "evb-data", {"type": Path, "metavar": "DIR"}),
        ("fsync", "when the logs are forced to disk", "batch", {"choices": list(get_args(Fsync))}),
        ("metrics_port", "Prometheus endpoint; 0: any free port", "none",
         {"type": PORT, "metavar": "PORT"}),
        ("max_payload_bytes", "largest fragment payload", 1 << 20,
         {"type": COUNT, "metavar": "N"}),
        ("run", "number of the first run (evb begin-run starts the next)", 1,
         {"type": int, "metavar": "N"}),
        ("strict_sources", "refuse sources not declared in --sources", "no",
         {"action": argparse.BooleanOptionalAction, "default": None}),
        ("stop_grace", "seconds calls get to finish on shutdown", "10",
         {"type": SECONDS_OR_ZERO, "metavar": "S"}),
        ("retention_bytes", "ordered-log size kept", "all", {"type": COUNT, "metavar": "N"}),
        ("retention_seconds", "ordered-log age kept", "all", {"type": SECONDS, "metavar": "S"}),
    )
    for name, what, shown, how in settings:
        parser.add_argument(flag(name), help=f"{what} {file_default(shown, name)}", **how)
    slices = parser.add_argument_group(
        "one run over several orderers by time slices (docs/scale-out.md); fixed for the run"
    )
    scale_out: tuple[tuple[str, str, object, dict[str, Any]], ...] = (
        ("orderers", "N, the orderers of the run", 1, {"type": COUNT, "metavar": "N"}),
        ("orderer_index", "this orderer's number, 0 to N-1", 0,
         {"type": NATURAL, "metavar": "K"}),
        ("slice_ticks", "T, the slice length in timestamp ticks; needed when N > 1", "none",
         {"type": SLICE_TICKS, "metavar": "T"}),
        ("peers", "the N orderers' addresses in index order, shown by GetStats", "none",
         {"type": peer_list, "metavar": "HOST:PORT,..."}),
    )
    for name, what, shown, how in scale_out:
        slices.add_argument(flag(name), help=f"{what} {file_default(shown, name)}", **how)
    tls = parser.add_argument_group("security (default: plaintext, no token)")
    for option, what in (
        ("--tls-cert", "PEM certificate chain: serve TLS only"),
        ("--tls-key", "PEM key of --tls-cert"),
        ("--tls-client-ca", "PEM CA: mutual TLS, clients must present a certificate it signed"),
        ("--token-file", "file holding the bearer token every call must carry (needs TLS)"),
    ):
        tls.add_argument(option, type=Path, metavar="FILE", help=what)
    parser.add_argument(
        "--log-level",
        default=ServeCommand.log_level,
        choices=list(get_args(LogLevel)),
        help="log detail",
    )


def build_parser() -> argparse.ArgumentParser:
    """A parser of :func:`add_serve_flags` alone (``evb serve``'s, the ordering parameters
    aside): :meth:`ServeCommand.from_argv` reads with it, :meth:`ServeCommand.to_argv` finds
    its flags in it."""
    parser = argparse.ArgumentParser(prog=f"evb {COMMAND}")
    add_serve_flags(parser)
    return parser
