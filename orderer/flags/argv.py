"""A typed command's arguments, both ways, found by its fields' names among the actions of the
parser that defines its flags.

Why by the parser's actions: each flag is then spelt once, where it is added to the parser, and
a field without a flag is an error here, not a flag the command does not know. Both ways are
the parser's: :func:`read_command` is its ``parse_args``, and :func:`command_arguments` writes
what it reads back (a float by its ``repr``, which reads back exactly).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["command_arguments", "read_command"]


def command_arguments(
    command: str | None,
    parser: argparse.ArgumentParser,
    values: Mapping[str, object],
    *,
    defaults: bool = False,
) -> list[str]:
    """``command`` (None: none) and the arguments that give ``values`` (keyed by the actions'
    ``dest``) back through ``parser``, in the parser's order. A value equal to its flag's
    default is left out unless ``defaults``: the command's own default (the ``--config``
    file's, for ``evb serve``) is then in force, which only leaving the flag out says; with
    ``defaults`` every value but None is written, so that a command whose defaults changed
    still reads these (the Spark job's). A value beginning with a dash is written
    ``--flag=value``, which argparse does not take for a flag of its own."""
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    if unknown := sorted(set(values) - set(actions)):
        raise ValueError(f"{parser.prog} has no flag for {', '.join(unknown)}")
    argv = [] if command is None else [command]
    for dest, action in actions.items():
        if dest not in values or values[dest] is None:
            continue
        if not defaults and values[dest] == action.default:
            continue
        value, option = values[dest], action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(option if value else action.option_strings[1])
        elif action.nargs == 0:  # a switch (store_true)
            if value:
                argv.append(option)
        else:
            text = repr(value) if isinstance(value, float) else str(value)
            argv += [f"{option}={text}"] if text.startswith("-") else [option, text]
    return argv


def read_command(
    command: str, parser: argparse.ArgumentParser, argv: Sequence[str]
) -> dict[str, Any]:
    """The values of ``argv`` (``command`` first, then its arguments) by ``dest``; argparse's
    exit status 2 on a bad command line, a flag ``parser`` does not define included."""
    argv = list(argv)
    if argv[:1] != [command]:
        parser.error(f"the arguments must begin with the command {command!r}")
    return vars(parser.parse_args(argv[1:]))
