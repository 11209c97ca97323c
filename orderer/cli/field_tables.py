"""The README's tables of the configuration fields, rendered from the fields' own texts and the
flags that set them (:func:`field_tables`): the one description of each field, as ``--help``,
the CRD and the source give it.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Iterator
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

from orderer.cli.parser import build_parser
from orderer.config import (
    FlowControl,
    OrdererConfig,
    camel_case,
    field_text,
    markdown_table,
    markdown_text,
    spec_field,
)
from orderer.flags.forward import ForwardCommand
from orderer.flags.serve import ServeCommand

__all__ = ["field_tables"]


def field_tables() -> dict[str, str]:
    """The README's tables of the configuration fields, in Markdown, by name: ``ordering`` (the
    orderer's parameters), ``serve`` (``evb serve``'s settings), ``forward`` and ``spark-job``.
    Each row is a field: the flag that sets it (found among the parser's actions by the
    field's name), its key, its default and its whole text, so that the README says what
    ``--help``, the CRD and the source say; ``tests/orderer/test_field_texts.py`` fails when
    README.md's differ and prints these."""
    from orderer.job_config import JobConfig
    from orderer.job_config import build_parser as build_job_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    serve, forward = commands.choices["serve"], commands.choices["forward"]
    return {
        "ordering": markdown_table(("key", "flag", "default", "live", ""), _parameter_rows(serve)),
        "serve": markdown_table(("flag", "key in `--config`", "default", ""), _setting_rows(serve)),
        "forward": markdown_table(("flag", "default", ""), _command_rows(forward, ForwardCommand)),
        "spark-job": markdown_table(
            ("flag", "default", ""), _command_rows(build_job_parser(), JobConfig)
        ),
    }


def _parameter_rows(parser: argparse.ArgumentParser) -> Iterator[tuple[str, ...]]:
    """The orderer's parameters, a nested group's fields after it (``flowControl.queueXoff``)."""
    defaults = OrdererConfig()
    for f in fields(OrdererConfig):
        live = "yes" if spec_field(f).live else ""
        value = getattr(defaults, f.name)
        text = markdown_text(field_text(OrdererConfig, f.name))
        if is_dataclass(value):
            yield f"`{camel_case(f.name)}`", "", "", live, text
            for inner in fields(FlowControl):
                key = f"`{camel_case(f.name)}.{camel_case(inner.name)}`"
                inner_text = markdown_text(field_text(FlowControl, inner.name))
                yield key, "", _shown(getattr(value, inner.name)), "", inner_text
        else:
            yield f"`{camel_case(f.name)}`", _flags(parser, f.name), _shown(value), live, text


def _setting_rows(parser: argparse.ArgumentParser) -> Iterator[tuple[str, ...]]:
    """``evb serve``'s settings: its flags (ServeCommand's fields), then the keys of
    ``--config`` that no flag sets; each with its key, its default (the service's) and text."""
    from orderer.service.settings import ServiceConfig, setting_texts

    service, texts = ServiceConfig(), setting_texts()
    for f in fields(ServeCommand):
        if f.name in texts:
            key, default = f"`{camel_case(f.name)}`", getattr(service, f.name)
        else:  # a flag of the command line alone (--config, --log-level)
            key, default = "", f.default
        text = markdown_text(field_text(ServeCommand, f.name))
        yield _flags(parser, f.name), key, _shown(default), text
    flagged = {f.name for f in fields(ServeCommand)}
    for name, text in texts.items():
        if name not in flagged:
            yield "", f"`{camel_case(name)}`", _shown(getattr(service, name)), markdown_text(text)


def _command_rows(parser: argparse.ArgumentParser, command: type) -> Iterator[tuple[str, ...]]:
    """A typed command line's fields: each one's flag, default (none: required) and text."""
    for f in fields(command):
        default = "(required)" if _no_default(f) else _shown(_default(f))
        yield _flags(parser, f.name), default, markdown_text(field_text(command, f.name))


def _no_default(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _default(f: Field[Any]) -> Any:
    factory = f.default_factory
    return factory() if callable(factory) else f.default


def _flags(parser: argparse.ArgumentParser, dest: str) -> str:
    """The flags of ``parser`` that set ``dest``, as code (none: empty)."""
    options = [o for a in parser._actions if a.dest == dest for o in a.option_strings]
    return ", ".join(f"`{option}`" for option in options)


def _shown(value: Any) -> str:
    """A default as the README shows it: code, or ``none`` for a value left unset."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, enum.Enum):
        text = str(value.value)
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, tuple):
        text = ",".join(str(item) for item in value)
    else:
        text = str(value)
    return f"`{text}`"
