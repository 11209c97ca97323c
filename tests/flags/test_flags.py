"""The typed command lines the operator writes (:mod:`orderer.flags`): a ``ServeCommand``'s and a
``ForwardCommand``'s arguments read back into the same command, by the command's own parser and
by ``evb``'s, whatever it holds; their flags are ``evb``'s, each a field; and what is not theirs
is refused, not dropped."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orderer.cli import build_parser as evb_parser
from orderer.flags import forward, serve
from orderer.flags.argv import command_arguments
from orderer.flags.forward import ForwardCommand
from orderer.flags.serve import ServeCommand
from orderer.wire.security import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN_FILE

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")).filter(
    lambda text: text != "--"  # Python 3.11's argparse drops an option's value "--"
)
PATH = st.none() | TEXT.map(Path)
POSITIVE_SECONDS = st.floats(min_value=0, exclude_min=True, allow_infinity=False)
PEER = st.from_regex(r"[a-z0-9.\-\[\]:]{1,12}:[0-9]{1,5}", fullmatch=True)
"""An orderer's address as ``--peers`` lists them (no comma, no blank)."""


@st.composite
def serve_commands(draw: st.DrawFn) -> ServeCommand:
    return ServeCommand(
        config=draw(PATH),
        listen=draw(st.none() | TEXT),
        data_dir=draw(PATH),
        fsync=draw(st.none() | st.sampled_from(get_args(serve.Fsync))),
        metrics_port=draw(st.none() | st.integers(0, 65535)),
        max_payload_bytes=draw(st.none() | st.integers(min_value=1)),
        run=draw(st.none() | st.integers()),
        strict_sources=draw(st.none() | st.booleans()),
        stop_grace=draw(st.none() | st.floats(min_value=0, allow_infinity=False)),
        retention_bytes=draw(st.none() | st.integers(min_value=1)),
        retention_seconds=draw(st.none() | POSITIVE_SECONDS),
        tls_cert=draw(PATH),
        tls_key=draw(PATH),
        tls_client_ca=draw(PATH),
        token_file=draw(PATH),
        orderers=draw(st.none() | st.integers(min_value=1)),
        orderer_index=draw(st.none() | st.integers(min_value=0)),
        slice_ticks=draw(st.none() | st.integers(1, 2**64 - 1)),
        peers=draw(st.none() | st.lists(PEER, min_size=1, max_size=4, unique=True).map(tuple)),
        log_level=draw(st.sampled_from(get_args(serve.LogLevel))),
    )


@st.composite
def forward_commands(draw: st.DrawFn) -> ForwardCommand:
    return ForwardCommand(
        upstream=draw(TEXT),
        downstream=draw(TEXT),
        as_source=draw(st.none() | st.integers(0, 2**32 - 1)),
        consumer=draw(st.none() | TEXT),
        no_end=draw(st.booleans()),
    )


@contextmanager
def _no_security_variables() -> Iterator[None]:
    """``evb forward``'s security flags default to these variables (the operator's pods set
    them); none of them is a field, but ``evb``'s parser reads them all the same."""
    with mock.patch.dict(os.environ):
        for name in (ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN_FILE):
            os.environ.pop(name, None)
        yield


def _fields(command: Any) -> dict[str, Any]:
    return {field.name: getattr(command, field.name) for field in dataclasses.fields(command)}


def _read_by_evb(command: Any) -> dict[str, Any]:
    """What ``evb``'s own parser reads of ``command``'s arguments, by field."""
    with _no_security_variables():
        args = evb_parser().parse_args(command.to_argv())
    return {name: getattr(args, name) for name in _fields(command)}


@given(serve_commands())
def test_the_arguments_of_a_serve_command_read_back_into_it(command: ServeCommand) -> None:
    assert command.to_argv()[0] == "serve"
    assert ServeCommand.from_argv(command.to_argv()) == command
    assert _read_by_evb(command) == _fields(command)


@given(forward_commands())
def test_the_arguments_of_a_forward_command_read_back_into_it(command: ForwardCommand) -> None:
    assert command.to_argv()[0] == "forward"
    assert ForwardCommand.from_argv(command.to_argv()) == command
    assert _read_by_evb(command) == _fields(command)


def test_the_defaults_are_the_parsers_and_write_nothing() -> None:
    assert ServeCommand.from_argv(["serve"]) == ServeCommand()
    assert ServeCommand().to_argv() == ["serve"]
    bare = ForwardCommand(upstream="a:1", downstream="b:2")
    assert ForwardCommand.from_argv(["forward", "--from", "a:1", "--to", "b:2"]) == bare
    assert bare.to_argv() == ["forward", "--from", "a:1", "--to", "b:2"]


def test_a_switch_and_a_value_beginning_with_a_dash_are_written_as_argparse_reads_them() -> None:
    assert ServeCommand(strict_sources=False, run=-2).to_argv() == [
        "serve", "--run=-2", "--no-strict-sources",
    ]
    assert ServeCommand(strict_sources=True, retention_seconds=3600.0).to_argv() == [
        "serve", "--strict-sources", "--retention-seconds", "3600.0",
    ]
    sliced = ServeCommand(orderers=3, orderer_index=1, slice_ticks=10**6, peers=("a:1", "b:2"))
    assert sliced.to_argv() == [
        "serve", "--orderers", "3", "--orderer-index", "1", "--slice-ticks", "1000000",
        "--peers", "a:1,b:2",
    ]
    command = ForwardCommand(upstream="a:1", downstream="b:2", consumer="-c", no_end=True)
    assert command.to_argv()[-2:] == ["--consumer=-c", "--no-end"]


def _subcommand(name: str) -> argparse.ArgumentParser:
    (commands,) = [
        a for a in evb_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    parser: argparse.ArgumentParser = commands.choices[name]
    return parser


def _flags(parser: argparse.ArgumentParser) -> dict[str, tuple[Any, ...]]:
    """Each flag of ``parser`` but help, by dest, as argparse reads and shows it."""
    return {
        action.dest: (
            type(action), action.option_strings, action.type, action.default, action.choices,
            action.nargs, action.const, action.required, action.metavar, action.help,
        )
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    }


@pytest.mark.parametrize(
    ("module", "command", "left_to_evb"),
    [
        (serve, ServeCommand, "ordering parameters (docs/ordering.md)"),
        (forward, ForwardCommand, "security (each flag defaults to its environment variable)"),
    ],
)
def test_every_flag_is_evbs_and_a_field(module: Any, command: Any, left_to_evb: str) -> None:
    """The command's parser is ``evb``'s subcommand but the flags left to ``evb`` (the ordering
    parameters; how a client connects), flag for flag; and each of its flags is a field."""
    with _no_security_variables():
        own, real = _flags(module.build_parser()), _flags(_subcommand(module.COMMAND))
    assert {f.name for f in dataclasses.fields(command)} == set(own)
    assert {dest: real[dest] for dest in own} == own
    groups = {
        action.dest: group.title
        for group in _subcommand(module.COMMAND)._action_groups
        for action in group._group_actions
    }
    rest = set(real) - set(own)
    assert rest and all(
        groups[dest] == left_to_evb or dest == "connect_timeout" for dest in rest
    ), {dest: groups[dest] for dest in rest}


def test_a_flag_that_is_not_a_field_is_refused_not_dropped() -> None:
    with pytest.raises(SystemExit) as refused:
        ServeCommand.from_argv(["serve", "--build-window", "2"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit):
        ForwardCommand.from_argv(["forward", "--from", "a:1", "--to", "b:2", "--tls"])
    with pytest.raises(SystemExit):
        ServeCommand.from_argv(["forward", "--from", "a:1", "--to", "b:2"])
    with pytest.raises(ValueError, match="no flag for build_window"):
        command_arguments("serve", serve.build_parser(), {"build_window": 2.0})


def test_the_fsync_policies_are_the_services() -> None:
    from orderer.service.segments import FsyncPolicy

    assert get_args(serve.Fsync) == tuple(policy.value for policy in FsyncPolicy)
