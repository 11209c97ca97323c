"""A restart continues the run with the parameters the run began with (recorded in its data
directory), whatever the restart is given; what it does give with another value is applied as
a live change or refused (orderer/service/restart.py). Every parameter of OrdererConfig is
covered, found by walking the dataclass's fields, so a new parameter is tested without anyone
listing it here.

Each run is real: a gRPC server on loopback, fragments sent over a Submit stream, emitted by the
mark rule, stopped and started again on the same data directory."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orderer._proto.evb.v1 import orderer_pb2 as pb
from orderer.batch import ArrivalKind, FragmentBatch
from orderer.client import configure_async, get_stats_async
from orderer.config import (
    LATE_POLICIES,
    LIVE_PARAMETERS,
    OrdererConfig,
    parameter_names,
    parameter_value,
)
from orderer.errors import ConfigError
from orderer.formats import log_format
from orderer.service.server import RunningServer, start_server
from orderer.service.settings import GivenParameter, ServiceConfig
from orderer.wire import convert
from tests.service.harness import run, target
from tests.service.test_server import _Stream


def _default(name: str) -> Any:
    return parameter_value(OrdererConfig(), name)


def _with(config: OrdererConfig, name: str, value: Any) -> OrdererConfig:
    head, _, rest = name.partition(".")
    if rest:
        return replace(config, **{head: replace(getattr(config, head), **{rest: value})})
    return replace(config, **{head: value})


def _values(name: str) -> tuple[Any, Any]:
    """Two values of parameter ``name``, both other than its default and than each other:
    the run's, and the one a restart asks for. By the default's type, so that a new parameter
    gets values without being named; a type not handled here fails the test."""
    default = _default(name)
    if isinstance(default, bool):
        return not default, default  # the restart asks for the default: still not the run's
    if isinstance(default, int):
        return default + 1, default + 2
    if isinstance(default, float):
        return default / 2, default / 2 + 0.5
    if default is None:  # an optional duration (barrier_timeout)
        return 3.0, 5.0
    if isinstance(default, str) and default in LATE_POLICIES:
        other = next(policy for policy in LATE_POLICIES if policy != default)
        return other, default
    if isinstance(default, tuple):
        return (1, 2), (1, 2, 3)
    pytest.fail(f"no test values for parameter {name} (default {default!r}): add them here")


def _written(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


BASE = OrdererConfig(build_window=0.5, startup_delay=0.0)
"""Emits at once by the mark rule; each test changes one parameter of it."""


async def _start(data_dir: Path, config: OrdererConfig, given: Any = None) -> RunningServer:
    service = ServiceConfig(data_dir=data_dir, listen="127.0.0.1:0")
    if given is None:
        return await start_server(config, service)
    return await start_server(config, service, given=given)


async def _run_some(running: RunningServer) -> None:
    """Fragments of sources 1 and 2, then watermarks above them: all six are emitted (by the
    mark rule, whatever the build window)."""
    import grpc

    async with grpc.aio.insecure_channel(target(running)) as channel:
        call = _Stream(channel)
        # one batch of both sources: they arrive together, none late of the other
        batch = FragmentBatch.from_arrays(
            source=[1, 2, 1, 2, 1, 2], timestamp=[10, 15, 20, 25, 30, 35]
        )
        await call.write(pb.SubmitRequest(batch=convert.batch_to_pb(batch)))
        for source in (1, 2):
            await call.write(pb.SubmitRequest(watermark=pb.Watermark(source=source, watermark=99)))
        await call.call.done_writing()
        for _ in range(400):
            if running.service.durable_offset == 6:
                call.cancel()
                return
            await asyncio.sleep(0.025)
        pytest.fail(f"6 fragments were not emitted; {running.service.durable_offset} were")


def _output(running: RunningServer) -> pa.RecordBatch:
    return log_format.emitted_to_arrow(running.service.ordered.read(0))


def _files(data_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(data_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(data_dir.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("name", parameter_names())
def test_a_restart_without_a_flag_keeps_the_runs_value(tmp_path: Path, name: str) -> None:
    """Restart (a): a parameter not given keeps the value the run began with, its output
    unchanged; first with every other parameter given as the run began (the flag alone left
    out), then given nothing at all (a bare ``evb serve --data-dir D``). 51f603a recovered the
    run with the command line's values, the defaults for what it left out: another
    configuration, or a traceback when it did not replay the ordered log."""
    began, _ = _values(name)
    config = _with(BASE, name, began)
    others = tuple(GivenParameter(other, other) for other in parameter_names() if other != name)

    async def body() -> None:
        running = await _start(tmp_path, config)
        try:
            await _run_some(running)
            before = _output(running)
        finally:
            await running.stop(grace=1.0)
        for requested, given in (
            (_with(BASE, name, _default(name)), others),
            (OrdererConfig(), ()),
        ):
            running = await _start(tmp_path, requested, given=given)
            try:
                assert running.service.orderer.config == config
                assert _output(running).equals(before)
                stats = await get_stats_async(target(running))
                assert stats.next_offset == 6
            finally:
                await running.stop(grace=1.0)

    run(body())


@pytest.mark.parametrize("name", parameter_names())
def test_a_restart_with_another_value_changes_it_live_or_is_refused(
    tmp_path: Path, name: str
) -> None:
    """Restart (b): given another value, a live parameter is changed after recovery, recorded
    in the arrival log as Configure records it (so a later bare restart keeps it) and shown by
    GetStats; any other is refused naming the flag and both values, before anything is
    written. 51f603a took the value as the run's starting one, or failed to recover."""
    began, asked = _values(name)
    config = _with(BASE, name, began)
    flag = "--" + name.replace("_", "-")

    async def body() -> None:
        running = await _start(tmp_path, config)
        try:
            await _run_some(running)
            before = _output(running)
        finally:
            await running.stop(grace=1.0)
        requested = _with(BASE, name, asked)  # the others as the run began
        given = (GivenParameter(name, flag),)
        if name not in LIVE_PARAMETERS:
            files = _files(tmp_path)
            with pytest.raises(ConfigError) as refused:
                await _start(tmp_path, requested, given=given)
            message = str(refused.value)
            assert message.startswith(f"{flag}: ")
            assert _written(began) in message and _written(asked) in message
            assert "cannot change during a run" in message
            assert _files(tmp_path) == files  # nothing written
            return
        running = await _start(tmp_path, requested, given=given)
        try:
            assert running.service.orderer.config == _with(config, name, asked)
            assert _output(running).equals(before)
            stats = await get_stats_async(target(running))
            assert parameter_value(stats.config, name) == asked
            last = list(running.service.arrivals.read_records())[-1]
            assert int(last.kind[-1]) == ArrivalKind.CONFIGURE
            assert json.loads(last.payload_of(len(last) - 1)) == {name: asked}
        finally:
            await running.stop(grace=1.0)
        running = await _start(tmp_path, OrdererConfig(), given=())
        try:
            assert running.service.orderer.config == _with(config, name, asked)
        finally:
            await running.stop(grace=1.0)

    run(body())


def test_a_new_data_directory_records_the_parameters_it_begins_with(tmp_path: Path) -> None:
    config = OrdererConfig(build_window=1.0, sources=(4, 5), source_timeout=None)

    async def body() -> None:
        running = await _start(tmp_path, config)
        await running.stop(grace=1.0)

    run(body())
    assert log_format.read_parameters(tmp_path) == config


def test_the_value_the_run_began_with_keeps_a_live_change_made_since(tmp_path: Path) -> None:
    """The operator's ConfigMap holds the parameters the run began with and is never rewritten:
    a pod restarted after a live edit of the resource keeps the edit."""
    config = replace(BASE, build_window=1.0)

    async def body() -> None:
        running = await _start(tmp_path, config)
        try:
            await configure_async(target(running), {"build_window": 3.0})
        finally:
            await running.stop(grace=1.0)
        running = await _start(tmp_path, config)  # every parameter given, as it began
        try:
            assert running.service.orderer.config.build_window == 3.0
        finally:
            await running.stop(grace=1.0)

    run(body())


def test_a_directory_without_recorded_parameters_recovers_as_before(tmp_path: Path) -> None:
    """A data directory written before parameters were recorded (51f603a) is recovered with the
    parameters given, as it always was, and is not given a record; given others than its run's,
    the refusal names the directory and what to do, not InternalOrdererError's traceback."""
    config = BASE

    async def body() -> None:
        running = await _start(tmp_path, config)
        try:
            await _run_some(running)
            before = _output(running)
        finally:
            await running.stop(grace=1.0)
        (tmp_path / log_format.PARAMETERS).unlink()  # as 51f603a left it
        running = await _start(tmp_path, config)
        try:
            assert _output(running).equals(before)
        finally:
            await running.stop(grace=1.0)
        assert not (tmp_path / log_format.PARAMETERS).exists()
        with pytest.raises(ConfigError) as refused:
            await _start(tmp_path, OrdererConfig(), given=())
        assert str(refused.value).startswith("--data-dir: holds a run begun by an evb that did")
        assert "start it with the flags (or --config file) the run began with" in str(refused.value)

    run(body())
