"""``evb replay`` sweeps: several settings of the ordering parameters over one pass of a run.

Why: tuning the build window on last night's run means comparing settings, and reading a run
of 10^9 records once per setting would multiply the time by their number. One pass instead:
every setting's orderer takes each chunk of the input in turn (:func:`~orderer.replay.stream.
replay_into`); each setting's output and counters are exactly those of a replay with that
setting alone. A table compares them: late fraction, barrier outcomes and the delay from
arrival to emission (p50, p99, max).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from orderer.batch import EmittedBatch
from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.formats.result_files import staged
from orderer.replay.stream import Sink, open_sink, replay_into, write_stats

__all__ = ["DelayHistogram", "Setting", "output_for", "replay_sweep", "summary_table"]

PLACEHOLDER = "{}"
"""Where a sweep's ``--output`` takes each setting's parameters."""
_DECADES = (-7, 5)
_PER_DECADE = 200
"""Bins of the delay histogram: 200 a decade from 0.1 us to 1e5 s, so a percentile is within
1.2% of the exact one (the bin's upper edge is reported), in bounded memory; the max is exact."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid: the swept flags' values as typed (for names and the table), and
    the configuration they make."""

    params: Mapping[str, str]
    config: OrdererConfig

    @property
    def label(self) -> str:
        """``build-window=0.5,startup-delay=2``: the parameters, in the flags' order."""
        return ",".join(f"{name.replace('_', '-')}={value}" for name, value in self.params.items())


@dataclass(slots=True)
class DelayHistogram:
    """Delays from arrival to emission of every emitted fragment, in log-spaced bins."""

    counts: np.ndarray = field(
        default_factory=lambda: np.zeros((_DECADES[1] - _DECADES[0]) * _PER_DECADE + 1, np.int64)
    )
    maximum: float = 0.0
    n: int = 0

    def add(self, delays: np.ndarray) -> None:
        if not delays.size:
            return
        scaled = (np.log10(np.maximum(delays, 10.0 ** _DECADES[0])) - _DECADES[0]) * _PER_DECADE
        index = np.clip(np.ceil(scaled), 0, self.counts.size - 1).astype(np.int64)
        self.counts += np.bincount(index, minlength=self.counts.size)
        self.maximum = max(self.maximum, float(delays.max()))
        self.n += int(delays.size)

    def quantile(self, q: float) -> float | None:
        """The upper edge of the bin that holds quantile ``q`` (at most the max); None if empty."""
        if self.n == 0:
            return None
        rank = max(1, math.ceil(q * self.n))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(10.0 ** (_DECADES[0] + index / _PER_DECADE), self.maximum)


def output_for(output: Path, setting: Setting, sweep: bool) -> Path:
    """A setting's output file: ``{}`` in the name replaced by its parameters. A sweep with an
    OUT without ``{}`` is refused (the settings would overwrite one another's output)."""
    if PLACEHOLDER not in output.name:
        if sweep:
            raise ConfigError(
                "--output", str(output),
                "a sweep writes one file per setting: put {} in the name where the setting's "
                "parameters go (e.g. out-{}.arrow), or leave --output out for the table only",
            )
        return output
    return output.with_name(output.name.replace(PLACEHOLDER, setting.label or "default"))


class _Collector:
    """What one setting emits: written to its sink, its delays counted."""

    __slots__ = ("delays", "sink")

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.delays = DelayHistogram()

    def write(self, emitted: EmittedBatch) -> None:
        self.sink.write(emitted)
        if emitted.arrival is not None:
            self.delays.add(emitted.t - emitted.arrival)


def replay_sweep(
    input_path: Path, settings: Sequence[Setting], output: Path | None, *, delays: bool = True
) -> list[tuple[dict[str, Any], DelayHistogram]]:
    """One pass over ``input_path`` for every setting; per setting its counters and delays
    (an empty histogram without ``delays``: tracking arrival times slows the merge)."""
    sweep = len(settings) > 1
    collectors: list[_Collector] = []
    with contextlib.ExitStack() as results:  # every output in place once all succeeded
        try:
            for setting in settings:
                path = None if output is None else output_for(output, setting, sweep)
                written = None if path is None else results.enter_context(staged(path))
                collectors.append(_Collector(open_sink(written)))
            write: list[Callable[[EmittedBatch], None]] = [c.write for c in collectors]
            orderers = replay_into(
                input_path,
                [(s.config, w) for s, w in zip(settings, write, strict=True)],
                track_arrival=delays,
            )
        finally:
            for collector in collectors:
                collector.sink.close()
    return [(o.counters(), c.delays) for o, c in zip(orderers, collectors, strict=True)]


def write_sweep_stats(
    path: Path, settings: Sequence[Setting], results: Sequence[tuple[dict[str, Any], Any]]
) -> None:
    """STATS of a sweep: a list of ``{"setting": {flag: value}, "counters": {...}}``; one
    setting keeps the single replay's layout (the counters alone)."""
    if len(settings) == 1:
        write_stats(path, results[0][0])
        return
    write_stats(
        path,
        [
            {"setting": dict(s.params), "counters": counters}
            for s, (counters, _) in zip(settings, results, strict=True)
        ],
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f} us"
    if value < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def summary_table(
    settings: Sequence[Setting], results: Sequence[tuple[dict[str, Any], DelayHistogram]]
) -> Table:
    """One row a setting: counts, late fraction, barrier outcomes, delays."""
    table = Table(title="evb replay: one row a setting", title_justify="left", box=box.SIMPLE_HEAD)
    heads = ("setting", "received", "emitted", "late", "dropped", "barriers\ncompl./incompl.",
             "barriers\nhomog./heterog.", "delay\np50", "\np99", "\nmax")
    for head in heads:
        table.add_column(head, justify="left" if head == "setting" else "right")
    for setting, (counters, delays) in zip(settings, results, strict=True):
        totals, barriers = counters["totals"], counters["barriers"]
        late = totals["late"] / totals["received"] if totals["received"] else 0.0
        table.add_row(
            setting.label.replace(",", "\n") or "(flags as given)",
            f"{totals['received']:,}",
            f"{totals['emitted']:,}",
            f"{late:.2%}",
            f"{totals['dropped']:,}",
            f"{barriers['complete']:,}/{barriers['incomplete']:,}",
            f"{barriers['homogeneous']:,}/{barriers['heterogeneous']:,}",
            _seconds(delays.quantile(0.5)),
            _seconds(delays.quantile(0.99)),
            _seconds(delays.maximum if delays.n else None),
        )
    return table


def print_summary(
    settings: Sequence[Setting],
    results: Sequence[tuple[dict[str, Any], DelayHistogram]],
    console: Console | None = None,
) -> None:
    """The table on ``console``; not on a terminal (a file, a pipe), 140 columns wide rather
    than rich's 80, which would cut the numbers short."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=140)
    console.print(summary_table(settings, results))
