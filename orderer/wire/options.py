"""What every client of the orderer is configured with: its address, how long it waits for a
connection, and its channel security, as constants, environment variables and command-line
flags.

Why here: ``evb send/tail/stats/end-run`` and the Spark job take the same flags, read the same
variables (the operator sets them in the pods it runs clients in) and wait the same time by
default. Keeping them next to the channel security rules lets both import them without either
one importing the other, or the command line importing the job.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orderer.wire.security import (
    ENV_TLS_CA,
    ENV_TLS_CERT,
    ENV_TLS_KEY,
    ENV_TOKEN,
    ENV_TOKEN_FILE,
    ChannelSecurity,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TARGET",
    "ENV_TARGET",
    "add_security_arguments",
    "security_from_args",
]

DEFAULT_TARGET = "localhost:50051"
"""The orderer a client command talks to when neither ``--target`` nor $EVB_TARGET says."""

ENV_TARGET = "EVB_TARGET"

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds a client waits for its first connection before it raises ``ServiceUnavailable``
(a command exits 3): long enough for gRPC's quick reconnect attempts
(:func:`orderer.client.channel_options`) to ride out an orderer restarting, short enough that
a wrong address is reported while the user still waits."""


def add_security_arguments(
    parser: argparse.ArgumentParser,
    title: str = "security (each flag defaults to its environment variable)",
    path_type: Callable[[str], Any] = Path,
) -> None:
    """A client's TLS and token flags, each defaulting to the variable the operator sets in the
    pods it runs clients in (``evb send/tail/stats/end-run`` and the Spark job share them)."""
    group = parser.add_argument_group(title)
    for flag, variable, what in (
        ("--tls-ca", ENV_TLS_CA, "PEM CA of the server's certificate: connect with TLS"),
        ("--tls-cert", ENV_TLS_CERT, "PEM client certificate (mutual TLS)"),
        ("--tls-key", ENV_TLS_KEY, "PEM key of the client certificate"),
        ("--token-file", ENV_TOKEN_FILE, "file holding the bearer token (TLS only)"),
    ):
        group.add_argument(
            flag,
            type=path_type,
            default=os.environ.get(variable) or None,
            metavar="FILE",
            help=f"{what} (default: ${variable})",
        )
    group.add_argument(
        "--tls",
        action="store_true",
        help="TLS with the system's CA certificates (implied by --tls-ca)",
    )


def security_from_args(args: argparse.Namespace) -> ChannelSecurity:
    """The client's ChannelSecurity from the flags of :func:`add_security_arguments` (and
    $EVB_TOKEN for the token itself)."""
    token = os.environ.get(ENV_TOKEN) or None
    return ChannelSecurity.from_files(
        ca=args.tls_ca,
        cert=args.tls_cert,
        key=args.tls_key,
        token=None if args.token_file is not None else token,
        token_file=args.token_file,
        tls=args.tls,
    )
