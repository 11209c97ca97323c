"""The configuration ``evb serve`` runs with: its ``--config`` YAML file with the flags over it.

Why a module of its own: an error in the file must name what the user wrote, the file, the line
and the key as spelled there (``evb.yaml:3: buildWindow``), and a key given twice (camelCase and
snake_case) or a misspelt one (with the known key it resembles) is refused, not ignored; that
needs the YAML's node positions, which nothing else in the command line deals with.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orderer.cli.arguments import flag_values, renamed
from orderer.config import OrdererConfig, check_keys, parameter_names, snake_case
from orderer.errors import ConfigError, EvbError
from orderer.flags.values import flag

if TYPE_CHECKING:  # the service's modules are imported by evb serve only, when it runs
    from orderer.service.settings import GivenParameter, ServiceConfig

__all__ = ["BadInput", "ServeSettings", "load_yaml", "serve_configs", "serve_settings"]


class BadInput(EvbError):
    """A user mistake that is not one parameter's value (a file that is not valid YAML); the
    message is printed as is."""


def load_yaml(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``--config`` mapping, and where each key is: ``{"build_window": "FILE:LINE:
    buildWindow"}`` (nested keys dotted), so that an error names the line the user wrote.
    Not YAML, not a mapping, or a key given twice in two spellings: :class:`BadInput` or
    :class:`ConfigError` naming the file and the line."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else error.strerror
        raise BadInput(f"--config {path}: {why}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise BadInput(f"{at}: not valid YAML: {problem}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ConfigError("--config", str(path), "must hold a mapping of parameters (key: value)")
    where: dict[str, str] = {}
    _key_lines(node, path, "", "", where)
    return {str(key): value for key, value in data.items()}, where


def _key_lines(node: Any, path: Path, prefix: str, written: str, out: dict[str, str]) -> None:
    import yaml

    for key_node, value_node in node.value:
        key = str(key_node.value)
        name = prefix + snake_case(key)
        if name in out:
            raise BadInput(
                f"{path}:{key_node.start_mark.line + 1}: {written}{key}: given twice "
                f"(first at {out[name].split(': ')[0]})"
            )
        out[name] = f"{path}:{key_node.start_mark.line + 1}: {written}{key}"
        if isinstance(value_node, yaml.MappingNode):
            _key_lines(value_node, path, name + ".", f"{written}{key}.", out)


_SERVE_FLAGS = (
    "listen",
    "data_dir",
    "fsync",
    "metrics_port",
    "max_payload_bytes",
    "strict_sources",
    "run",
    "stop_grace",
    "retention_bytes",
    "retention_seconds",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "token_file",
    "orderers",
    "orderer_index",
    "slice_ticks",
    "peers",
)


@dataclass(frozen=True)
class ServeSettings:
    """What ``evb serve`` starts with (:func:`serve_settings`)."""

    config: OrdererConfig
    """The orderer's parameters: the defaults, the file over them, the flags over it."""
    service: ServiceConfig
    given: tuple[GivenParameter, ...]
    """The orderer parameters the user gave (a flag, or a key of the file): on a restart only
    these are weighed against the run's recorded ones; one left out keeps the run's value."""


def serve_settings(args: argparse.Namespace) -> ServeSettings:
    """The configuration ``evb serve`` runs with: the ``--config`` file, the flags over it
    (whatever the key's spelling), checked as a whole, and which orderer parameters were given;
    an error names the flag, or the file, line and key it came from."""
    from orderer.service.settings import GivenParameter, ServiceConfig, configs_from_mapping

    values, where = load_yaml(args.config) if args.config else ({}, {})
    flags = flag_values(args)
    flags.update(
        {name: getattr(args, name) for name in _SERVE_FLAGS if getattr(args, name) is not None}
    )
    for name, value in flags.items():
        for key in [key for key in values if snake_case(key) == name]:
            del values[key]
        where[name] = flag(name)
        values[name] = value
    known = [f.name for f in fields(OrdererConfig)] + [f.name for f in fields(ServiceConfig)]
    try:
        check_keys(values, known)  # the service's keys too, so the suggestion can be one
        config, service = configs_from_mapping(values)
    except ConfigError as error:
        # a setting wrong only beside others (--slice-ticks missing for --orderers 3) is named
        # as its flag when the user gave it nowhere
        raise renamed(error, {**{name: flag(name) for name in _SERVE_FLAGS}, **where}) from None
    given = tuple(GivenParameter(name, where[name]) for name in parameter_names() if name in where)
    return ServeSettings(config, service, given)


def serve_configs(args: argparse.Namespace) -> tuple[OrdererConfig, ServiceConfig]:
    """:func:`serve_settings`' ``(OrdererConfig, ServiceConfig)``."""
    settings = serve_settings(args)
    return settings.config, settings.service
