"""The service's run table: which run the output belongs to, from which offset, and whether the
current run has ended.

Why a class of its own: ``BeginRun`` and recovery move it, ``GetStats`` and the metrics read it;
the output offsets below one run's start are the earlier runs' (docs/ordering.md, "Runs one
after another"), and the table is what lets a consumer (the Spark source) stop at a run's end.
"""

from __future__ import annotations

from orderer.stats import RunSpan

__all__ = ["RunTable"]


class RunTable:
    """Every run this orderer served: ``(number, first output offset)``, the first the server's
    own (``evb serve --run``), the others begun by ``BeginRun`` (recorded in the arrival log,
    rebuilt by recovery)."""

    def __init__(self, first: int, begun: tuple[tuple[int, int], ...] = (), *, ended: bool) -> None:
        self._starts: list[tuple[int, int]] = [(first, 0), *begun]
        self.ended = ended
        """The current run has ended (its output may not all be durable yet)."""

    @property
    def current(self) -> int:
        """The current run's number."""
        return self._starts[-1][0]

    @property
    def start_offset(self) -> int:
        """Output offset of the current run's first fragment."""
        return self._starts[-1][1]

    def begin(self, number: int, start_offset: int) -> None:
        """The next run, from ``start_offset`` on."""
        self._starts.append((number, start_offset))
        self.ended = False

    def spans(self, current_end: int | None) -> tuple[RunSpan, ...]:
        """Every run: a run ends where the next began (output between an end of run and the
        next begin run is the earlier run's, as ``run_start_offset`` says), the current one at
        ``current_end`` once it has ended (None: it goes on)."""
        ends: list[int | None] = [start for _, start in self._starts[1:]]
        return tuple(
            RunSpan(number, start, end)
            for (number, start), end in zip(self._starts, [*ends, current_end], strict=True)
        )
