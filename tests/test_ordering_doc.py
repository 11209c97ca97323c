"""``docs/ordering.md`` says what the code does: its tables of parameters, counters and
flow-control settings match :mod:`orderer.config`, its ``evb replay`` usage matches the parser,
and it names every worked example kept in ``tests/data/ordering-examples/``.

The rules themselves are checked by running the examples (``tests/replay/test_replay_cli.py``,
``tests/orderer/test_oracle_examples.py``); this keeps the page's facts from drifting."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

from orderer.cli import build_parser
from orderer.config import SOURCE_COUNTERS, FlowControl, OrdererConfig, camel_case
from tests.conftest import example_dirs

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ordering.md"


def _table(first_header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose first column is headed ``first_header``."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header:
            rows = []
            for row in lines[index + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"docs/ordering.md has no table headed {first_header!r}")


def _code(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"expected a `name`, got {cell!r}"
    return match.group(1)


def test_parameters_table_matches_the_configuration() -> None:
    defaults = OrdererConfig()
    rows = {_code(row[0]): row for row in _table("parameter")}
    assert set(rows) == {f.name for f in fields(OrdererConfig)} - {"flow_control"}
    for name, (_, spelling, default, _meaning) in rows.items():
        assert _code(spelling) == camel_case(name), name
        value = getattr(defaults, name)
        if name == "barrier_timeout":
            assert value is None and default == "4 \u00d7 `build_window`"
            assert defaults.effective_barrier_timeout == 4 * defaults.build_window
        elif name == "late_policy":
            assert _code(default) == value
        elif name == "sources":
            assert value == () and default == "none"
        elif name == "reset_on_begin_run":
            assert value is False and default == "off"
        else:
            assert default == f"{value:g} s", (name, default, value)


def test_counters_table_matches_the_counters() -> None:
    assert tuple(_code(row[0]) for row in _table("counter")) == SOURCE_COUNTERS


def test_flow_control_table_matches_the_defaults() -> None:
    rows = {
        _code(row[0]): int(row[1].replace(",", ""))
        for row in _table("setting (`flow_control.` ...)")
    }
    assert rows == {f.name: getattr(FlowControl(), f.name) for f in fields(FlowControl)}


def test_replay_usage_names_only_flags_evb_replay_has() -> None:
    text = DOC.read_text(encoding="utf-8")
    usage = re.search(r"```sh\n(evb replay .*?)```", text, re.S)
    assert usage, "docs/ordering.md shows no evb replay usage"
    documented = set(re.findall(r"--[a-z-]+", usage.group(1)))
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    replay = commands.choices["replay"]
    accepted = {option for action in replay._actions for option in action.option_strings}
    assert documented <= accepted, documented - accepted
    ordering_flags = {"--build-window", "--startup-delay", "--barrier-timeout",
                      "--source-timeout", "--late-policy", "--sources"}  # fmt: skip
    assert ordering_flags <= documented


def test_every_worked_example_is_named() -> None:
    named = set(re.findall(r"\[`([a-z-]+)`\]\(\.\./tests/data/ordering-examples/\1/\)",
                           DOC.read_text(encoding="utf-8")))  # fmt: skip
    assert named == {p.name for p in example_dirs()}
