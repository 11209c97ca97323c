"""Every configuration field is described once, beside the field (its attribute docstring), and
that one text is what ``--help``, the README's tables and the CRD's descriptions show
(:func:`orderer.config.field_texts`).

The classes: the orderer's parameters (:class:`~orderer.config.OrdererConfig`,
:class:`~orderer.config.FlowControl`), ``evb serve``'s settings
(:class:`~orderer.flags.serve.ServeCommand`, and ``ServiceConfig``, whose settings that are flags
too are described on ServeCommand), what ``evb forward`` forwards where
(:class:`~orderer.flags.forward.ForwardCommand`) and the Spark job's flags
(:class:`~orderer.job_config.JobConfig`).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orderer.cli.field_tables import field_tables
from orderer.cli.parser import build_parser
from orderer.config import (
    FlowControl,
    OrdererConfig,
    SpecField,
    field_text,
    field_texts,
    flag_help,
    markdown_table,
    markdown_text,
    plain_text,
    spec_field,
    summary,
)
from orderer.flags.forward import ForwardCommand
from orderer.flags.serve import ServeCommand
from orderer.job_config import JobConfig
from orderer.job_config import build_parser as build_job_parser
from orderer.service.settings import ServiceConfig, setting_texts

README = Path(__file__).resolve().parents[2] / "README.md"

DESCRIBED = (OrdererConfig, FlowControl, ServeCommand, ForwardCommand, JobConfig)
"""The classes whose every field carries its own text."""


# ------------------------------------------------------------------------ the mechanism


@dataclass(frozen=True)
class _Example:
    """A class of the test's own: a field with a text, one without, a one-line text, and a
    nested class."""

    width: float = 1.0
    """Seconds a thing may wait (the ``window``, :func:`~orderer.config.camel_case`).

    Why: because. A | in a text,
    and <angle> brackets."""
    bare: int = 0
    listed: tuple[int, ...] = field(default=())
    "A one-line string counts too."

    class Inner:
        depth: int = 3
        """Nested classes are found by their qualified name."""


def test_the_text_is_the_string_right_under_the_field() -> None:
    texts = field_texts(_Example)
    assert set(texts) == {"width", "listed"}
    assert texts["width"].splitlines()[2:] == [
        "Why: because. A | in a text,",
        "and <angle> brackets.",
    ]
    assert texts["listed"] == "A one-line string counts too."
    inner = field_texts(_Example.Inner)
    assert inner == {"depth": "Nested classes are found by their qualified name."}
    with pytest.raises(LookupError, match=r"_Example.bare has no text"):
        field_text(_Example, "bare")


def test_the_summary_help_and_markdown_of_a_text() -> None:
    text = field_text(_Example, "width")
    assert summary(text) == (
        "Seconds a thing may wait (the ``window``, :func:`~orderer.config.camel_case`)."
    )
    assert plain_text(summary(text)) == "Seconds a thing may wait (the window, camel_case)."
    assert flag_help(_Example, "width") == "seconds a thing may wait (the window, camel_case)"
    assert markdown_text(text) == (
        "Seconds a thing may wait (the `window`, `camel_case`). Why: because. A \\| in a text,"
        " and \\<angle> brackets."
    )
    assert markdown_table(("a", ""), [("`x`", "y")]) == "| a |  |\n|---|---|\n| `x` | y |"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Seconds of this.", "seconds of this"),
        ("A live orderer: this.", "a live orderer: this"),
        ("PEM key of ``--tls-cert``.", "PEM key of --tls-cert"),
        ("N, the orderers.", "N, the orderers"),
        ("``--target``: build.", "--target: build"),
        ("HOST:PORT,... (docs).\n\nWhy.", "HOST:PORT,... (docs)"),
        ("Their directories, DIR,...", "their directories, DIR,..."),
        ("50% of it.", "50%% of it"),
    ],
)
def test_a_flag_help_is_in_argparse_style(
    monkeypatch: pytest.MonkeyPatch, text: str, shown: str
) -> None:
    """The summary, its first word in lower case unless a name, no final full stop, ``%``
    escaped for argparse."""
    import orderer.config

    monkeypatch.setattr(orderer.config, "field_text", lambda cls, name: text)
    assert flag_help(_Example, "width") == shown


# ------------------------------------------------------------------------ described once


@pytest.mark.parametrize("cls", DESCRIBED, ids=lambda cls: cls.__name__)
def test_every_field_has_its_text(cls: type) -> None:
    texts = field_texts(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not texts.get(f.name, "").strip()]
    assert not missing, f"{cls.__name__}: fields without a text: {missing}"


def test_each_service_setting_is_described_once_on_the_service_or_on_its_flag() -> None:
    """A setting that is a flag of ``evb serve`` too is described on ServeCommand's field, the
    others on ServiceConfig's: never both (two texts to keep the same), never neither."""
    own, flags = field_texts(ServiceConfig), field_texts(ServeCommand)
    for f in dataclasses.fields(ServiceConfig):
        assert (f.name in own) != (f.name in flags), f.name
    assert list(setting_texts()) == [f.name for f in dataclasses.fields(ServiceConfig)]


def test_the_crd_descriptions_are_the_summaries_of_the_parameters_texts() -> None:
    """Nothing restates a parameter's text in its SpecField: the operator's CRD gets the summary
    of the field's text (:func:`~orderer.config.spec_field`)."""
    for cls in (OrdererConfig, FlowControl):
        for f in dataclasses.fields(cls):
            assert f.metadata["evb.spec"].description == "", f.name
            assert spec_field(f).description == summary(field_text(cls, f.name))
    (sources,) = [f for f in dataclasses.fields(OrdererConfig) if f.name == "sources"]
    assert spec_field(sources).items == SpecField("A source id.", minimum=0, maximum=2**32 - 1)


def test_the_texts_are_read_only_when_shown_not_at_import() -> None:
    """Importing the configuration reads no source (a Spark executor imports it and shows
    nothing): the texts are parsed when a parser, a CRD or a table is built."""
    import subprocess
    import sys

    code = (
        "import orderer.config as c, orderer.job_config, orderer.flags.serve, "
        "orderer.flags.forward, sys; sys.exit(c._module_tree.cache_info().currsize)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ------------------------------------------------------------------------ the helps


def _subcommand(name: str) -> argparse.ArgumentParser:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser = commands.choices[name]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


@pytest.mark.parametrize(
    ("parser", "cls"),
    [
        (lambda: _subcommand("serve"), ServeCommand),
        (lambda: _subcommand("serve"), OrdererConfig),
        (lambda: _subcommand("replay"), OrdererConfig),
        (lambda: _subcommand("forward"), ForwardCommand),
        (build_job_parser, JobConfig),
    ],
    ids=["serve", "serve-ordering", "replay-ordering", "forward", "spark-job"],
)
def test_each_flag_of_a_field_says_its_text(parser: object, cls: type) -> None:
    """The help of the flag that sets a field is the field's text, then at most its default."""
    built = parser()  # type: ignore[operator]
    names = {f.name for f in dataclasses.fields(cls)}
    seen = set()
    for action in built._actions:
        if action.dest not in names or not action.option_strings:
            continue
        seen.add(action.dest)
        text = flag_help(cls, action.dest)
        assert action.help == text or re.fullmatch(
            re.escape(text) + r" \(default: .*\)", action.help or ""
        ), (action.dest, action.help, text)
    if cls is OrdererConfig:
        names.discard("flow_control")  # no flag: the --config file's, or the spec's
    assert seen == names


# ------------------------------------------------------------------------ the README's tables


def _readme_table(name: str) -> str | None:
    match = re.search(
        rf"<!-- fields: {re.escape(name)} -->\n(.*?)\n<!-- end fields -->", README.read_text(), re.S
    )
    return match.group(1) if match else None


@pytest.mark.parametrize("name", ["ordering", "serve", "forward", "spark-job"])
def test_the_readme_tables_are_the_fields_texts(name: str) -> None:
    """README.md holds each table as :func:`~orderer.cli.field_tables.field_tables` renders it from
    the fields' texts; on a difference the fresh table is printed, to paste between the
    table's markers."""
    fresh = field_tables()[name]
    written = _readme_table(name)
    if written != fresh:
        print(f"<!-- fields: {name} -->\n{fresh}\n<!-- end fields -->")
    assert written is not None, f"README.md has no table <!-- fields: {name} -->"
    assert written == fresh, f"README.md's table {name} differs from the fields' texts (above)"
