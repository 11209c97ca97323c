"""``evb replay`` of a data directory starts from the parameters the run recorded, as recovery
does: without a flag it gives exactly the ordered log the live service wrote, live changes
included; a flag goes over the recorded value (a what-if). 51f603a started from the flags
alone, so a replay without the run's flags gave another output."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orderer.cli import main
from orderer.config import OrdererConfig
from orderer.formats import log_format
from orderer.replay.stream import replay_path
from tests.replay.test_replay_stream import _arrow_rows, _log_rows


def _served(directory: Path, config: OrdererConfig) -> None:
    from orderer.client import configure_async, end_run_async
    from tests.service.harness import run, serving_channel, target
    from tests.service.test_run_table import _send

    async def body() -> None:
        async with serving_channel(directory, config) as (running, channel):
            address = target(running)
            await _send(channel, 0, [10, 20, 30, 45])
            await configure_async(address, build_window=0.02)
            await _send(channel, 4, [50, 60])
            await end_run_async(address)

    run(body())


def test_a_replay_without_flags_gives_the_ordered_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = OrdererConfig(
        build_window=0.05, startup_delay=0.0, source_timeout=None, late_policy="drop"
    )
    _served(data, config)
    logged = _log_rows(data)
    assert len(logged) == 6
    for n, path in enumerate((data, data / log_format.ARRIVALS)):
        out = tmp_path / f"replayed-{n}.arrow"
        assert main(["replay", str(path), "--output", str(out)]) == 0
        assert _arrow_rows(out) == logged
    # a flag goes over the recorded value, the others stay the run's
    assert (
        main(["replay", str(data), "--output", str(tmp_path / "w.arrow"), "--build-window", "9"])
        == 0
    )
    replay_path(data, tmp_path / "expected.arrow", None, replace(config, build_window=9.0))
    assert _arrow_rows(tmp_path / "w.arrow") == _arrow_rows(tmp_path / "expected.arrow")
