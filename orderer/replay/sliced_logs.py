"""A run spread over N orderers replayed from the orderers' own arrival logs
(``evb replay d0,d1,d2``): each data directory's arrival log through an orderer of its own, with
the parameters that directory recorded, merged and built exactly as the simulation merges and
builds (:func:`replay_orderers`).

Why: it is the oracle of the Spark job over N orderers (``evb spark-job --target a,b,c``, ``--path
d0,d1,d2``). What each orderer received live is in its arrival log, and a replay of that log gives
the orderer's ordered log (live = replay, the guarantee recovery rests on); no record is routed
again, so nothing the sources did live is re-decided. The merge
(:func:`~orderer.replay.sliced_merge.merge`) and the building from each piece's first sure start
(:func:`~orderer.replay.sliced_merge.built_starts`) are the simulation's, over the whole merged
stream at once, where the job plans from slice indexes and piece heads and builds unit by unit:
the two readers of the same rules (:mod:`orderer.replay.merged_stream`) must give the same
rows, byte for byte.

The merged stream's rows are numbered as the job numbers them: a row's ``offset`` is its position
in the merged stream (a position the merge's own drop leaves unused under ``late_policy: drop``).

Runs one after another (``BeginRun`` at every orderer, recorded in each arrival log) are split
by :meth:`ReplayedRun.runs`: each run's rows of the merged stream and glom's events of them
alone, the oracle of ``evb spark-job --follow-runs`` over N orderers.

Payloads and sources are kept beside the orderers' outputs (each fragment is numbered and the
number rides through its orderer in place of its payload, as in the simulation), so the replay
holds the run's payloads in memory: it is for runs a test or a check holds, not for 100 M
fragments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from orderer.api import Orderer
from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.building.config import GlomConfig
from orderer.building.glom import EVENT_SCHEMA, FRAGMENT_SCHEMA, build_events, glom_batches
from orderer.clock import SimulatedClock
from orderer.config import OrdererConfig
from orderer.errors import ConfigError
from orderer.formats import log_format
from orderer.replay.run_walk import ArrivalWalker
from orderer.replay.sliced import OutputTaker, numbered
from orderer.replay.sliced_merge import built_starts, merge
from orderer.replay.slicing import Slicing

__all__ = ["ReplayedRun", "RunPart", "replay_orderers", "slicing_of"]


def slicing_of(data_dirs: Sequence[Path], flag: str = "INPUT") -> Slicing:
    """How the run of ``data_dirs`` is sliced, from what each recorded of its place in the run
    (``parameters.json``): directory ``k`` must be orderer ``k`` of ``len(data_dirs)``, all
    with one slice length. A list in another order or a missing orderer is refused naming the
    directory (``flag``: the flag that gave them)."""
    n = len(data_dirs)
    ticks: int | None = None
    for k, directory in enumerate(data_dirs):
        role = log_format.read_slice_role(Path(directory))
        if role is None:
            raise ConfigError(
                flag, str(directory), "records no place in a run (no parameters.json): it is "
                "not a data directory of evb serve --orderers"
            )
        if role.orderers != n or role.index != k:
            raise ConfigError(
                flag, str(directory), f"is orderer {role.index} of {role.orderers}, not "
                f"orderer {k} of {n}: give the run's data directories in their orderers' order"
            )
        if ticks is None:
            ticks = role.slice_ticks
        elif role.slice_ticks != ticks:
            raise ConfigError(
                flag, str(directory), f"cuts slices of {role.slice_ticks} ticks, orderer 0 of "
                f"{ticks}: they are not one run's orderers"
            )
    if ticks is None:
        raise ConfigError(flag, ",".join(map(str, data_dirs)), "records no slice length")
    return Slicing(n, ticks)


@dataclass(frozen=True, slots=True)
class RunPart:
    """One run of the orderers' run tables (``evb serve --run``, then each ``BeginRun``) in the
    replay: its rows of the merged stream (positions as in the whole) and the events glom builds
    of them alone (an event never spans two runs), as ``evb spark-job --follow-runs`` builds
    each run."""

    number: int | None
    """Its number; None for the first run (the server's ``--run``, which no log records)."""
    fragments: pa.Table
    events: pa.Table | None


@dataclass(frozen=True, slots=True)
class ReplayedRun:
    """The merged stream of N orderers replayed from their arrival logs, and its events."""

    slicing: Slicing
    fragments: pa.Table
    """The merged stream (FRAGMENT_SCHEMA rows, ``offset`` the position)."""
    events: pa.Table | None
    """glom's events over it, built from each piece's first sure start (EVENT_SCHEMA); None
    when no building was asked for."""
    pieces_without_sure_start: int
    raised_by_merge: int
    """Fragments an orderer emitted not late that the merged stream makes late."""
    dropped_by_merge: int
    """Of those, the ones left out (``late_policy: drop``)."""
    counters: tuple[dict[str, Any], ...]
    """Each orderer's counters, as ``evb replay --stats`` writes one orderer's."""
    run_numbers: tuple[int | None, ...] = (None,)
    """The runs of the orderers' run tables, in order (the first one's number unrecorded)."""
    run_of_row: np.ndarray | None = None
    """Each row's run (its index in ``run_numbers``): the run its fragment arrived in."""
    glom: GlomConfig | None = None

    def runs(self) -> tuple[RunPart, ...]:
        """The merged stream run by run. Each run must be one stretch of it (the runs' clocks
        go on from run to run: where a run's clocks restart below the run before, its rows fall
        into the earlier run's pieces and the whole stream mixes them; ValueError)."""
        which = np.zeros(self.fragments.num_rows, np.int64) if self.run_of_row is None else (
            self.run_of_row
        )
        parts = []
        for run, number in enumerate(self.run_numbers):
            rows = np.flatnonzero(which == run)
            if rows.size and int(rows[-1]) - int(rows[0]) + 1 != rows.size:
                raise ValueError(f"run {number}'s rows are not one stretch of the merged stream")
            first = int(rows[0]) if rows.size else 0
            fragments = self.fragments.slice(first, int(rows.size))
            events = None
            if self.glom is not None:
                built = list(glom_batches(fragments.to_batches(), self.glom))
                events = pa.Table.from_batches(built, EVENT_SCHEMA)
            parts.append(RunPart(number, fragments, events))
        return tuple(parts)

    def to_json(self) -> dict[str, Any]:
        """The summary ``evb replay d0,d1,d2`` prints (and writes with ``--stats``)."""
        late = self.fragments.column("late").to_numpy(zero_copy_only=False)
        return {
            "orderers": self.slicing.orderers,
            "slice_ticks": self.slicing.slice_ticks,
            "fragments": self.fragments.num_rows,
            "late": int(late.sum()),
            "events": None if self.events is None else self.events.num_rows,
            "pieces_without_sure_start": self.pieces_without_sure_start,
            "raised_by_merge": self.raised_by_merge,
            "dropped_by_merge": self.dropped_by_merge,
            "orderers_counters": list(self.counters),
        }


class _Fragments:
    """Every fragment's source and payload, by its number, gathered as the logs are read."""

    __slots__ = ("_lengths", "_payloads", "_sources")

    def __init__(self) -> None:
        self._sources: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._payloads: list[np.ndarray] = []

    def add(self, records: ArrivalRecords) -> None:
        rows = np.flatnonzero(records.kind == ArrivalKind.FRAGMENT)
        if not rows.size:
            return
        offsets = records.payload_offsets.astype(np.int64)
        starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
        at = np.zeros(rows.size, dtype=np.int64)
        np.cumsum(lengths[:-1], out=at[1:])
        index = np.repeat(starts - at, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
        self._sources.append(records.source[rows])
        self._lengths.append(lengths)
        self._payloads.append(records.payload[index])

    def table(self) -> tuple[np.ndarray, pa.Array]:
        """Sources and payloads (large binary), by number."""
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.concatenate(self._payloads) if self._payloads else np.zeros(0, np.uint8)
        payloads = pa.Array.from_buffers(
            pa.large_binary(), lengths.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        sources = np.concatenate(self._sources) if self._sources else np.zeros(0, np.uint32)
        return sources, payloads


def replay_orderers(
    data_dirs: Sequence[Path],
    glom: GlomConfig | None = None,
    configs: Sequence[OrdererConfig] | None = None,
    batches: Sequence[Iterable[ArrivalRecords]] | None = None,
) -> ReplayedRun:
    """The run of ``data_dirs`` (orderer ``k``'s directory at ``k``): each arrival log replayed
    through an orderer of its own, with its recorded parameters (``configs``: others, one per
    directory, a what-if), merged as the simulation merges (late flags and ``late_policy:
    drop`` and ``reset_on_begin_run`` of orderer 0's parameters, the run's) and, with ``glom``,
    built as the simulation builds. As recovery does, a log whose run did not end is not ended.
    ``batches``: each directory's arrival records when the caller has them (a test)."""
    from orderer.replay.stream import input_batches

    dirs = [Path(d) for d in data_dirs]
    slicing = slicing_of(dirs)
    if configs is None:
        configs = []
        for directory in dirs:
            recorded = log_format.read_parameters(directory)
            if recorded is None:
                raise ConfigError("INPUT", str(directory), "records no parameters.json")
            configs.append(recorded)
    if len(configs) != len(dirs):
        raise ValueError("one configuration per data directory")
    fragments = _Fragments()
    takers = []
    counters = []
    begun: list[list[tuple[int, int]]] = []  # each orderer's (run, its first fragment number)
    numbers: list[tuple[int, int]] = []  # each orderer's fragment numbers
    first = 0
    for k, directory in enumerate(dirs):
        taker = OutputTaker(Orderer(configs[k], clock=SimulatedClock()))
        walker = ArrivalWalker(taker.orderer, taker)
        begun.append([])
        low = first
        for batch in input_batches(directory) if batches is None else batches[k]:
            if not len(batch):
                continue
            fragments.add(batch)
            walker.feed(numbered(batch, first))
            is_fragment = batch.kind == ArrivalKind.FRAGMENT
            for row in np.flatnonzero(batch.kind == ArrivalKind.BEGIN_RUN).tolist():
                begun[k].append((int(batch.value[row]), first + int(is_fragment[:row].sum())))
            first += int(is_fragment.sum())
        walker.finish()
        numbers.append((low, first))
        takers.append(taker)
        counters.append(taker.orderer.counters())
    if any([r for r, _ in b] != [r for r, _ in begun[0]] for b in begun):
        raise ConfigError(
            "INPUT", ",".join(map(str, dirs)), "the data directories began other runs: each "
            "run of a run over several orderers is begun at every orderer"
        )
    run_of_number = np.zeros(first, np.int64)
    for (_, high), runs in zip(numbers, begun, strict=True):
        for _, at in runs:
            run_of_number[at:high] += 1
    run = configs[0]
    merged = merge(
        [taker.output for taker in takers], slicing,
        drop_late=run.late_policy == "drop", reset=run.reset_on_begin_run,
    )  # fmt: skip
    sources, payloads = fragments.table()
    ids = pa.array(merged.id)
    n = len(merged)
    positions = np.arange(n, dtype=np.int64) if merged.positions is None else merged.positions
    rows = pa.Table.from_arrays(
        [
            pa.array(positions),
            pa.array(sources[merged.id].astype(np.int64)),
            pa.array(merged.ts.view(np.int64)),
            pa.array(merged.barrier.astype(np.int64)),
            pa.array(merged.late),
            payloads.take(ids).cast(pa.binary()),
        ],
        schema=FRAGMENT_SCHEMA,
    )
    events = None
    without = 0
    if glom is not None:
        dt = glom.dt if glom.builds else None
        starts, without = built_starts(merged, dt, glom.max_fragments)
        events = (
            pa.Table.from_batches([build_events(rows, glom, starts)])
            if n else EVENT_SCHEMA.empty_table()
        )
    return ReplayedRun(
        slicing, rows, events, without, merged.raised, merged.dropped, tuple(counters),
        (None, *(r for r, _ in begun[0])), run_of_number[merged.id], glom,
    )  # fmt: skip
