"""``evb replay``: which simulation a command line asks for, the checks its flags must pass
together, and its results written and printed.

Four simulations, told apart by the input and the flags: INPUT ``d0,d1,d2`` (a run's orderers'
own arrival logs, :mod:`orderer.replay.sliced_logs`), ``--orderers N --slice-ticks T`` (one
run ordered as N time-sliced orderers would, against one orderer, :mod:`orderer.replay.sliced`),
``--nscldaq FILE...`` (ring items through :mod:`orderer.replay.simulate`) and otherwise a replay
of INPUT, a sweep when a flag lists several values (:mod:`orderer.replay.sweep`). Results are
refused over an existing file or the input before anything runs
(:func:`~orderer.formats.result_files.check_results`) and put in place only once whole.

The ordering flags stay the command line's: ``settings(base)`` gives their settings over
``base`` (a data directory's recorded parameters, or None for the defaults), one setting unless
a flag sweeps, an error naming the flag. Errors a user can cause are
:class:`~orderer.errors.ConfigError`, naming the flag or INPUT.

Called by ``evb replay`` (:mod:`orderer.cli`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orderer.apps import sliced_table
from orderer.building.config import GlomConfig
from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.formats.json_lines import write_emitted
from orderer.formats.result_files import check_results, staged
from orderer.nscldaq.reader import read_records
from orderer.replay import sweep
from orderer.replay.simulate import replay
from orderer.replay.sliced import replay_sliced
from orderer.replay.sliced_logs import replay_orderers, slicing_of
from orderer.replay.slicing import parse_slicings
from orderer.replay.stream import (
    input_files,
    recorded_parameters,
    rereadable_batches,
    write_stats,
)
from orderer.replay.sweep import Setting

__all__ = ["Settings", "run_replay"]

Settings = Callable[[OrdererConfig | None], list[tuple[dict[str, str], OrdererConfig]]]
"""The ordering flags' settings over a base configuration (None: the defaults)."""


def run_replay(
    input_path: Path | None,
    *,
    settings: Settings,
    nscldaq: Sequence[str] | None = None,
    skip_unstamped: bool = False,
    output: Path | None = None,
    stats: Path | None = None,
    overwrite: bool = False,
    orderers: str | None = None,
    slice_ticks: str | None = None,
    dt: int | None = None,
) -> None:
    """``evb replay``: INPUT (or ``nscldaq``'s ring-item files) through the simulation the
    flags choose; ``output`` and ``stats`` written, a table (or a summary) printed on stdout."""
    if input_path is not None and "," in str(input_path) and not input_path.exists():
        # d0,d1,d2: N orderers' own arrival logs
        _replay_orderers(
            input_path,
            settings,
            nscldaq=nscldaq,
            output=output,
            stats=stats,
            overwrite=overwrite,
            orderers=orderers,
            slice_ticks=slice_ticks,
            dt=dt,
        )
        return
    # a data directory's own parameters under the flags: replayed as it was recovered
    base = None if input_path is None else recorded_parameters(input_path)
    grid = [Setting(params, config) for params, config in settings(base)]
    if orderers is not None or slice_ticks is not None or dt is not None:
        _replay_sliced(
            input_path,
            grid,
            output=output,
            stats=stats,
            overwrite=overwrite,
            orderers=orderers,
            slice_ticks=slice_ticks,
            dt=dt,
        )
        return
    if (input_path is None) == (nscldaq is None):
        raise ConfigError("INPUT", None, "give either INPUT or --nscldaq FILE...")
    if nscldaq is not None and (output is None or len(grid) > 1):
        raise ConfigError("--nscldaq", None, "needs --output OUT.jsonl and one setting")
    targets = (
        []
        if output is None
        else [("--output", sweep.output_for(output, setting, len(grid) > 1)) for setting in grid]
    )
    if stats is not None:
        targets.append(("--stats", stats))
    if nscldaq is not None:
        check_results(targets, [Path(name) for name in nscldaq if name != "-"], overwrite=overwrite)
        assert output is not None  # checked above
        _replay_nscldaq(
            nscldaq, grid[0].config, output=output, stats=stats, skip_unstamped=skip_unstamped
        )
        return
    assert input_path is not None  # one of INPUT and --nscldaq, checked above
    check_results(targets, input_files(input_path), overwrite=overwrite)
    table = len(grid) > 1 or (output is None and stats is None)
    results = sweep.replay_sweep(input_path, grid, output, delays=table)
    if stats is not None:
        sweep.write_sweep_stats(stats, grid, results)
    if table:
        sweep.print_summary(grid, results)


def _replay_sliced(
    input_path: Path | None,
    grid: list[Setting],
    *,
    output: Path | None,
    stats: Path | None,
    overwrite: bool,
    orderers: str | None,
    slice_ticks: str | None,
    dt: int | None,
) -> None:
    """``evb replay --orderers N --slice-ticks T``: INPUT as N time-sliced orderers order it,
    against one orderer (:mod:`orderer.replay.sliced`); a table
    (:mod:`orderer.apps.sliced_table`), or ``--stats``."""
    if orderers is None and slice_ticks is None:
        raise ConfigError("--dt", dt, "counts events only with --orderers and --slice-ticks")
    if slice_ticks is None:
        raise ConfigError("--slice-ticks", None, "is needed with --orderers (the slice length)")
    if orderers is None:
        raise ConfigError("--orderers", None, "is needed with --slice-ticks (how many orderers)")
    if input_path is None:
        raise ConfigError("INPUT", None, "--orderers replays INPUT (not --nscldaq)")
    if output is not None:
        raise ConfigError(
            "--output",
            str(output),
            "--orderers compares outputs and writes none; --stats STATS.json writes the comparison",
        )
    if len(grid) > 1:
        raise ConfigError(
            "--orderers",
            orderers,
            "compares one setting of the ordering flags; "
            "sweep --build-window and the like without it",
        )
    slicings = parse_slicings(orderers, slice_ticks)
    check_results(
        [] if stats is None else [("--stats", stats)],
        input_files(input_path),
        overwrite=overwrite,
    )
    run = replay_sliced(rereadable_batches(input_path), grid[0].config, slicings, dt)
    if stats is not None:
        with staged(stats) as written:
            written.write_text(json.dumps(run.to_json(), indent=1) + "\n", encoding="utf-8")
    if stats is None or len(slicings) > 1:
        sliced_table.print_summary(run, dt)


def _replay_orderers(
    input_path: Path,
    settings: Settings,
    *,
    nscldaq: Sequence[str] | None,
    output: Path | None,
    stats: Path | None,
    overwrite: bool,
    orderers: str | None,
    slice_ticks: str | None,
    dt: int | None,
) -> None:
    """``evb replay d0,d1,d2``: the data directories of a run over N orderers, in their order,
    each arrival log through an orderer of its own (its recorded parameters, flags over them),
    merged and, with ``--dt``, built as the simulation does (:mod:`orderer.replay.sliced_logs`):
    the merged stream and the events the Spark job over those orderers must make. Prints a
    summary as JSON; ``--output`` writes the events (without ``--dt``: the merged stream's
    rows), ``--stats`` the summary."""
    dirs = [Path(part) for part in str(input_path).split(",")]
    for directory in dirs:
        if not directory.is_dir():
            raise ConfigError(
                "INPUT",
                str(directory),
                "is not a data directory (a list of "
                "several is a run's orderers' data directories, in their order)",
            )
    if nscldaq is not None:
        raise ConfigError("--nscldaq", None, "replays ring items, not a run's orderers")
    slicing = slicing_of(dirs)
    for flag, given, value in (
        ("--orderers", orderers, slicing.orderers),
        ("--slice-ticks", slice_ticks, slicing.slice_ticks),
    ):
        if given is not None and given != str(value):
            raise ConfigError(flag, given, f"the data directories are a run of {slicing.label}")
    if len(settings(None)) > 1:
        raise ConfigError(
            "INPUT",
            str(input_path),
            "replays the run's orderers with one "
            "setting of the ordering flags; a sweep is not taken here",
        )
    # one setting each (no flag sweeps): the flags over each directory's recorded parameters
    configs = [settings(recorded_parameters(d))[0][1] for d in dirs]
    if output is not None and output.suffix not in (".parquet", ".arrow"):
        raise ConfigError("--output", str(output), "must be OUT.parquet or OUT.arrow")
    results = [
        (flag, path)
        for flag, path in (("--output", output), ("--stats", stats))
        if path is not None
    ]
    check_results(results, [f for d in dirs for f in input_files(d)], overwrite=overwrite)
    run = replay_orderers(dirs, None if dt is None else GlomConfig(dt), configs)
    summary = json.dumps(run.to_json(), indent=1) + "\n"
    if output is not None:
        table = run.fragments if run.events is None else run.events
        with staged(output) as written:
            if output.suffix == ".parquet":
                pq.write_table(table, written)
            else:
                with (
                    pa.OSFile(str(written), "wb") as sink,
                    pa.ipc.new_stream(sink, table.schema) as stream_writer,
                ):
                    stream_writer.write_table(table)
    if stats is not None:
        with staged(stats) as written:
            written.write_text(summary, encoding="utf-8")
    sys.stdout.write(summary)


def _replay_nscldaq(
    nscldaq: Sequence[str],
    config: OrdererConfig,
    *,
    output: Path,
    stats: Path | None,
    skip_unstamped: bool,
) -> None:
    """``evb replay --nscldaq``: the ring items' fragments as records, all at t = 0, through
    the same replay (and output) as a JSON Lines run."""
    records = read_records(nscldaq, skip_unstamped=skip_unstamped)
    emitted, counters = replay(records, config)
    with staged(output) as written, written.open("w", encoding="utf-8") as out:
        write_emitted(emitted, out)
    if stats is not None:
        write_stats(stats, counters)
