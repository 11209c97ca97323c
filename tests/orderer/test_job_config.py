"""The Spark job's configuration (:mod:`orderer.job_config`): its arguments read back into it,
whatever it holds, so the operator and the live demo, which write a JobConfig's arguments, give
the job exactly the configuration they hold; and every flag of the job's parser is one of them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from orderer.job_config import JobConfig, OutputFormat, TimestampPolicy, build_parser
from orderer.wire.security import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN_FILE

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")).filter(
    lambda text: text != "--"  # Python 3.11's argparse drops an option's value "--"
)
OPTIONAL_TEXT = st.none() | TEXT
OPTIONAL_INT = st.none() | st.integers()
NUMBER = st.floats(allow_nan=False)


@st.composite
def configs(draw: st.DrawFn) -> JobConfig:
    streamed = draw(st.booleans())
    return JobConfig(
        output=draw(TEXT),
        target=draw(TEXT) if streamed else None,
        path=None if streamed else Path(draw(TEXT.filter(bool))),
        dt=draw(OPTIONAL_INT),
        no_build=draw(st.booleans()),
        max_fragments=draw(st.integers()),
        timestamp_policy=draw(st.sampled_from(TimestampPolicy)),
        format=draw(st.sampled_from(OutputFormat)),
        glom_source_id=draw(st.integers()),
        run=draw(OPTIONAL_TEXT),
        checkpoint=draw(OPTIONAL_TEXT),
        follow_runs=draw(st.booleans()),
        until_run=draw(OPTIONAL_INT),
        partitions=draw(st.integers()),
        max_fragments_per_trigger=draw(OPTIONAL_INT),
        trigger_seconds=draw(NUMBER),
        consumer=draw(TEXT),
        tick_rate=draw(NUMBER),
        master=draw(OPTIONAL_TEXT),
        poll=draw(NUMBER),
        quiet=draw(st.booleans()),
        connect_timeout=draw(NUMBER),
        tls_ca=draw(OPTIONAL_TEXT),
        tls_cert=draw(OPTIONAL_TEXT),
        tls_key=draw(OPTIONAL_TEXT),
        token_file=draw(OPTIONAL_TEXT),
        tls=draw(st.booleans()),
        stages=draw(st.none() | TEXT.filter(bool).map(Path)),
        explain=draw(st.booleans()),
        check_order=draw(st.booleans()),
    )


@contextmanager
def _no_security_variables() -> Iterator[None]:
    """The security flags' defaults are these variables (the operator's pods set them)."""
    with mock.patch.dict(os.environ):
        for name in (ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN_FILE):
            os.environ.pop(name, None)
        yield


@given(configs())
def test_the_arguments_of_a_configuration_read_back_into_it(config: JobConfig) -> None:
    with _no_security_variables():
        assert JobConfig.from_argv(config.to_argv()) == config


def test_the_defaults_are_the_parsers() -> None:
    with _no_security_variables():
        assert JobConfig.from_argv(["--target", "h:1", "--output", "o"]) == JobConfig(
            target="h:1", output="o"
        )


def test_every_flag_of_the_parser_is_written_by_to_argv() -> None:
    """No flag of the job is left out of :meth:`JobConfig.to_argv` (a configuration holding a
    value for each names them all, but ``--path``, which excludes ``--target``)."""
    full = JobConfig(
        output="o", target="h:1", dt=1, no_build=True, run="r", checkpoint="c", follow_runs=True,
        until_run=2, max_fragments_per_trigger=3, master="local", quiet=True, tls_ca="a",
        tls_cert="b", tls_key="k", token_file="t", tls=True, stages=Path("s.py"), explain=True,
        check_order=True, ui="0.0.0.0:8050",
    )
    written = {arg.split("=", 1)[0] for arg in full.to_argv() if arg.startswith("--")}
    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    flags -= {"-h", "--help"}
    assert flags - written == {"--path"}
    assert written <= flags
