"""``evb forward``'s flags saying what it forwards where (:func:`add_forward_flags`) and
:class:`ForwardCommand`, a command line of them, typed: a forwarder pod's, as the operator
writes it.

Why here, not in :mod:`orderer.cli.parser`: the operator writes this command line and may not
import the command line (:mod:`orderer.flags` says why both are served from here). The ``evb``
parser adds these flags to its ``forward`` subcommand, then how it connects; the operator
builds a ForwardCommand and writes its :meth:`~ForwardCommand.to_argv`, whose flags are found
among these (:mod:`orderer.flags.argv`), and which ``evb`` reads back into the same command (a
property test holds it).

Why not the connection's flags (``--connect-timeout``, TLS, the token): every client command
shares them (:func:`orderer.cli.arguments.add_connection`), and the operator gives a
forwarder its credentials by the variables they default to (``EVB_TLS_*``,
``EVB_TOKEN_FILE``), as it does the Spark job's. :meth:`ForwardCommand.from_argv` refuses one.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from orderer.config import flag_help
from orderer.flags.argv import command_arguments, read_command
from orderer.flags.values import SOURCE_ID

__all__ = ["COMMAND", "ForwardCommand", "add_forward_flags", "build_parser"]

COMMAND = "forward"


@dataclass(frozen=True, kw_only=True)
class ForwardCommand:
    """``evb forward`` with every flag of :func:`add_forward_flags`, typed (the names are the
    parser's: ``--from`` is ``upstream``, ``--to`` is ``downstream``); each field's text is its
    flag's help and its row in the README's table."""

    upstream: str
    """The lower orderer, whose ordered output is forwarded."""
    downstream: str
    """The upper orderer, or the orderers of a run over several, in their order.

    It takes the upstream's sources as its own. A run over several orderers: their addresses
    separated by commas, or one of them that was started with ``--peers``."""
    as_source: int | None = None
    """Send everything as this one source (a group of barriers becomes one barrier).

    Unset: each upstream source keeps its id."""
    consumer: str | None = None
    """Consumer name at ``--from`` (default: forward-to-<--to>; over several orderers,
    forward-to-<orderer 0>)."""
    no_end: bool = False
    """Do not end the sources at ``--to``.

    Otherwise they are ended there once the upstream's run ended and everything was
    forwarded."""

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ForwardCommand:
        """The command of an ``evb forward`` command line (``["forward", ...]``); argparse's
        exit status 2 on a bad one, or on a connection's flag (not one of these)."""
        return cls(**read_command(COMMAND, build_parser(), argv))

    def to_argv(self) -> list[str]:
        """``["forward", ...]``: the arguments that give this command back
        (``from_argv(c.to_argv()) == c``), the flags in the parser's order."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return command_arguments(COMMAND, build_parser(), values)


def add_forward_flags(parser: argparse.ArgumentParser) -> None:
    """``evb forward``'s flags but the connection's: the two orderers (the upper one may be a
    run over several), the sources' ids, the consumer at the upstream, and whether the sources
    end with the upstream's run."""
    parser.add_argument(
        "--from", dest="upstream", required=True, metavar="HOST:PORT", help=_help("upstream")
    )
    parser.add_argument(
        "--to",
        dest="downstream",
        required=True,
        metavar="HOST:PORT[,...]",
        help=_help("downstream"),
    )
    parser.add_argument("--as-source", type=SOURCE_ID, metavar="ID", help=_help("as_source"))
    parser.add_argument("--consumer", metavar="NAME", help=_help("consumer"))
    parser.add_argument("--no-end", action="store_true", help=_help("no_end"))


def _help(name: str) -> str:
    """The help of the flag of the field ``name``: its text's
    (:func:`~orderer.config.flag_help`)."""
    return flag_help(ForwardCommand, name)


def build_parser() -> argparse.ArgumentParser:
    """A parser of :func:`add_forward_flags` alone (``evb forward``'s, the connection's flags
    aside): :meth:`ForwardCommand.from_argv` reads with it, :meth:`ForwardCommand.to_argv` finds
    its flags in it."""
    parser = argparse.ArgumentParser(prog=f"evb {COMMAND}")
    add_forward_flags(parser)
    return parser
