"""The ``evb`` command line: argument parsing and exit statuses only; the work is elsewhere.

Exit status 2 means bad input (a flag value, a ``--config`` file, a record, or input the server
refused), with the culprit named on stderr in one line: the flag, or the file, line and key; 3
means the orderer service could not be reached. A user's mistake never ends in a traceback.

The modules: :mod:`~orderer.cli.parser` (the subcommands and their flags),
:mod:`~orderer.cli.arguments` (the help format, the ordering and client flags),
:mod:`~orderer.cli.config_file` (``evb serve --config``), :mod:`~orderer.cli.commands` (what each
command calls), :mod:`~orderer.cli.field_tables` (the README's tables of the configuration
fields); the flags' value types and the flags the operator writes too are
:mod:`orderer.flags`'. The console script ``evb`` is :func:`main`; ``python -m orderer.cli``
runs it too.
"""

from __future__ import annotations

import os

# gRPC's core logs every failed TLS handshake attempt on stderr (a dozen lines while a command
# waits for its connection, around its one-line error, which names the cause once). gRPC reads
# the setting when it is first imported, which the modules imported below do (the client flags
# come from orderer.wire), so it is set before them; a GRPC_VERBOSITY the user set wins. The
# library leaves the process's environment alone: only the command sets it.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
# gRPC's fork support (on by default in its core) runs handlers around every fork() of the
# process; since grpcio 1.80 they race with its poller once a channel was used: a child forked by
# subprocess with a preexec_fn (PySpark's start of the JVM, after ``evb spark-job`` and
# ``evb demo`` asked the orderer) dies before its exec ("Java gateway process exited before
# sending its port number"), or the fork never returns (grpc/grpc#43055). No evb process forks
# to go on using gRPC in the child, so the support is off; a value the user set wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import sys
from collections.abc import Sequence

from orderer.cli.arguments import HelpFormatter
from orderer.cli.config_file import BadInput, serve_configs
from orderer.cli.parser import EXIT_BAD_INPUT, build_parser
from orderer.cli.signals import EXIT_TERMINATED, Terminated, sigterm_as_interrupt
from orderer.errors import (
    ConfigError,
    InterfaceError,
    RecordError,
    ServiceUnavailable,
)
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_TERMINATED",
    "EXIT_UNAVAILABLE",
    "HelpFormatter",
    "build_parser",
    "main",
    "serve_configs",
]

EXIT_UNAVAILABLE = 3
"""The orderer service could not be reached."""

EXIT_BROKEN_PIPE = 128 + 13
"""The standard output's reader closed it (as a shell reports a process ended by SIGPIPE)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``evb`` with ``argv`` (default: the process's arguments); returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["spark-job"]:  # its own parser (also the SparkApplication's main file)
        argv = ["spark-job", "--", *argv[1:]]
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a flag argparse refused (status 2)
        return done.code if isinstance(done.code, int) else EXIT_BAD_INPUT
    try:
        with sigterm_as_interrupt():
            return int(args.handler(args))
    except (ConfigError, RecordError, InterfaceError, BadInput) as error:
        print(f"evb {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # the reader of the standard output went away (``evb stats | head``): a normal end for
        # a command whose output is piped, not an error to report. Python flushes stdout again
        # at exit; pointing it at /dev/null spares a second BrokenPipeError there.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except FileNotFoundError as error:
        print(f"evb {args.command}: {error.filename}: no such file", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (NotADirectoryError, IsADirectoryError, PermissionError) as error:
        # a path through a file, a directory where a file belongs, no right to it
        print(f"evb {args.command}: {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServiceUnavailable as error:
        print(f"evb {args.command}: orderer unavailable: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except Terminated:  # SIGTERM (orderer.cli.signals)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        return 130
    except RuntimeError as error:
        # an interrupt raised while threading's Condition.wait had released its lock (a
        # blocking gRPC read): leaving the wait, the lock it never took back fails to be
        # released ("cannot release un-acquired lock"), and that error replaces the interrupt
        interrupt = error.__context__
        if isinstance(interrupt, Terminated):
            return EXIT_TERMINATED
        if isinstance(interrupt, KeyboardInterrupt):
            return 130
        raise
