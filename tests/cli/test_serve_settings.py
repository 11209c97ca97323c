"""``evb serve``'s command line tells the service which orderer parameters the user gave (a flag
or a ``--config`` key) and how they wrote each: on a restart only those are weighed against the
run's recorded parameters, and a message names what the user wrote
(orderer/cli/config_file.py, ``serve_settings``)."""

from __future__ import annotations

from pathlib import Path

from orderer.cli import build_parser
from orderer.cli.config_file import serve_settings
from orderer.config import OrdererConfig


def _given(*argv: str) -> dict[str, str]:
    settings = serve_settings(build_parser().parse_args(["serve", *argv]))
    return {parameter.name: parameter.written for parameter in settings.given}


def test_nothing_given_is_nothing_given() -> None:
    """A bare ``evb serve``: the defaults fill the configuration, but none of them was given."""
    settings = serve_settings(build_parser().parse_args(["serve", "--data-dir", "D"]))
    assert settings.config == OrdererConfig()
    assert settings.given == ()


def test_the_flags_given_are_named_as_typed() -> None:
    given = _given(
        "--build-window", "2", "--sources", "1,2", "--reset-on-begin-run",
        "--source-timeout", "off", "--fsync", "never", "--metrics-port", "0",
    )  # fmt: skip
    assert given == {
        "build_window": "--build-window",
        "sources": "--sources",
        "reset_on_begin_run": "--reset-on-begin-run",
        "source_timeout": "--source-timeout",
    }


def test_the_keys_of_the_file_are_named_by_line_nested_ones_alone(tmp_path: Path) -> None:
    """A file giving one flow-control threshold gives that one, not the whole group (the
    others keep the run's values); a flag over a key of the file is named as the flag."""
    path = tmp_path / "evb.yaml"
    path.write_text("buildWindow: 3\nlate_policy: drop\nflowControl:\n  queueXoff: 500000\n")
    given = _given("--config", str(path), "--late-policy", "emit", "--stop-grace", "1")
    assert given == {
        "build_window": f"{path}:1: buildWindow",
        "late_policy": "--late-policy",
        "flow_control.queue_xoff": f"{path}:4: flowControl.queueXoff",
    }
