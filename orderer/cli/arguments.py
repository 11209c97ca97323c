"""The flags of the ``evb`` commands: the help format, the ordering parameters, the client
flags, and the translation of a library's error back to the flag the user typed.

Numeric flags are checked by their argparse ``type`` (:mod:`orderer.flags.values`), so a
nonsensical value is refused before anything starts, and the message names the flag as typed
(``--rate``); what a library refuses later under its own name (``rate``) is translated back to
the flag here (:func:`renamed`). The flags the operator writes too (``evb serve``'s service
flags, what ``evb forward`` forwards where) are :mod:`orderer.flags`'.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from orderer.config import (
    OrdererConfig,
    camel_case,
    flag_help,
    parse_source_timeout,
    snake_case,
)
from orderer.errors import ConfigError
from orderer.flags.values import SECONDS, file_default, flag
from orderer.wire.options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TARGET,
    ENV_TARGET,
    add_security_arguments,
)

__all__ = [
    "HelpFormatter",
    "add_orderer_flags",
    "add_target",
    "config_from_flags",
    "flag_values",
    "renamed",
]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in its help, except where there is nothing to show (no default, an
    on/off switch) or the help already says it (defaults that come from a file or a variable)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        nothing = action.default is None or action.default is False
        if nothing or action.default == argparse.SUPPRESS or "default" in help_text:
            return help_text
        return super()._get_help_string(action)


def renamed(error: ConfigError, names: Mapping[str, str]) -> ConfigError:
    """``error`` naming what the user typed (a flag, a file's line and key) instead of the
    library's parameter; unchanged if its parameter is not in ``names`` (snake_case keys;
    a dotted parameter is looked up by its longest known prefix)."""
    parts = error.parameter.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(snake_case(part) for part in parts[:cut])
        if head in names:
            rest = "".join(f".{camel_case(snake_case(part))}" for part in parts[cut:])
            return ConfigError(names[head] + rest, error.value, error.why)
    return error


# ------------------------------------------------------------------------ ordering flags

_ORDERER_FLAGS = (
    "build_window",
    "startup_delay",
    "barrier_timeout",
    "source_timeout",
    "late_policy",
    "sources",
    "reset_on_begin_run",
)


def add_orderer_flags(parser: argparse.ArgumentParser, *, config_file: bool = False) -> None:
    """The parameters of docs/ordering.md. Their defaults are the dataclass's, their helps its
    fields' texts (:func:`~orderer.config.flag_help`); with ``config_file`` (``evb serve``), a
    flag left out takes the file's value first."""
    defaults = OrdererConfig()
    group = parser.add_argument_group("ordering parameters (docs/ordering.md)")
    for name, metavar, shown in (
        ("build_window", "S", f"{defaults.build_window:g}"),
        ("startup_delay", "S", f"{defaults.startup_delay:g}"),
        ("barrier_timeout", "S", "4 x build window"),
        ("source_timeout", "S|off", f"{defaults.source_timeout:g}"),
        ("late_policy", "emit|drop", defaults.late_policy),
        ("sources", "1,2,3", "none"),
    ):
        default = file_default(shown, name) if config_file else f"(default: {shown})"
        group.add_argument(
            flag(name), metavar=metavar, help=f"{flag_help(OrdererConfig, name)} {default}"
        )
    group.add_argument(
        flag("reset_on_begin_run"),
        nargs="?",
        const="true",
        metavar="true|false",
        help=f"{flag_help(OrdererConfig, 'reset_on_begin_run')} (default: off)",
    )


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The orderer flags that were given, by parameter name, each checked on its own so that an
    error names the flag."""
    values: dict[str, Any] = {}
    for name in _ORDERER_FLAGS:
        raw = getattr(args, name)
        if raw is None:
            continue
        try:
            if name == "source_timeout":
                parse_source_timeout(raw)
            OrdererConfig.from_mapping({name: raw})
        except ConfigError as error:
            raise ConfigError(flag(name), raw, error.why) from None
        values[name] = raw
    return values


def config_from_flags(
    args: argparse.Namespace, base: OrdererConfig | None = None
) -> OrdererConfig:
    """The OrdererConfig of the ordering flags (``evb replay``) over ``base`` (the defaults when
    None: a data directory's recorded parameters otherwise); an error names the flag."""
    values = flag_values(args)
    if base is not None:
        values = {**base.to_mapping(), **values}
    try:
        return OrdererConfig.from_mapping(values)
    except ConfigError as error:  # a combination of flags, e.g. sources repeated
        raise ConfigError(flag(error.parameter), error.value, error.why) from None


SWEEPABLE = ("build_window", "startup_delay", "barrier_timeout", "source_timeout")
"""The flags ``evb replay`` takes a comma list of (a sweep: every combination)."""


def sweep_from_flags(
    args: argparse.Namespace, base: OrdererConfig | None = None
) -> list[tuple[dict[str, str], OrdererConfig]]:
    """``evb replay``'s settings: the cartesian product of the comma lists of
    :data:`SWEEPABLE`, in the flags' order, the last flag varying fastest; each with the swept
    flags' values (those given more than one value) and its configuration, the flags over
    ``base``. A single value everywhere is one setting, the configuration of
    :func:`config_from_flags`."""
    import itertools

    lists: dict[str, list[str]] = {}
    for name in SWEEPABLE:
        raw = getattr(args, name)
        if raw is not None and "," in str(raw):
            values = [value.strip() for value in str(raw).split(",")]
            if any(not value for value in values) or len(set(values)) != len(values):
                raise ConfigError(flag(name), raw, "a sweep is a comma list of distinct values")
            lists[name] = values
    settings = []
    for combination in itertools.product(*lists.values()):
        chosen = dict(zip(lists, combination, strict=True))
        swept = argparse.Namespace(**{**vars(args), **chosen})
        settings.append((chosen, config_from_flags(swept, base)))
    return settings


# ------------------------------------------------------------------------ client flags


def add_target(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that talks to a live orderer: where it is, how long to wait for
    it, and the channel's security."""
    parser.add_argument(
        "--target",
        default=os.environ.get(ENV_TARGET, DEFAULT_TARGET),
        metavar="HOST:PORT",
        help=f"the orderer service (default: $EVB_TARGET, else {DEFAULT_TARGET})",
    )
    add_connection(parser)


def add_connection(parser: argparse.ArgumentParser) -> None:
    """How a client command reaches its orderers, the address aside (``evb forward`` has two
    addresses): how long to wait for a connection, and the channel's security."""
    parser.add_argument(
        "--connect-timeout",
        type=SECONDS,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="S",
        help="seconds to wait for a connection before giving up with exit status 3",
    )
    add_security_arguments(parser)
