"""What opening an :class:`~orderer.service.orderer_service.OrdererService` on its data
directory takes: the run recovered from the logs (:mod:`~orderer.service.data_dir`), with a
slice length the slice index rebuilt from the recovery's replay, what refuses other orderers'
fragments, and the live changes the start's parameters ask of the recovered run
(:mod:`~orderer.service.restart`), once weighed against the parameters in force.

Why apart from the service: these run once, before (or as) the service starts, and read the
service's settings (:class:`~orderer.service.settings.ServiceConfig`); the service itself only
takes input, serves deadlines and keeps the run's books.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from orderer.batch import EmittedBatch
from orderer.config import OrdererConfig, parameter_value
from orderer.replay.slicing import Slicing
from orderer.service import data_dir, restart
from orderer.service.settings import GivenParameter, ServiceConfig, every_parameter
from orderer.service.slices import PieceCutter, PieceIndex, SliceOwner
from orderer.stats import SliceRole

__all__ = ["OpenedDirectory", "open_directory", "slice_owner", "wanted_changes"]

log = logging.getLogger("evb.service")


def slice_owner(role: SliceRole) -> SliceOwner | None:
    """What refuses other orderers' fragments: none for a plain orderer (nothing to check,
    nothing paid), nor for N = 1 (it owns every slice)."""
    if not role.sliced or role.slice_ticks is None:
        return None
    return SliceOwner(Slicing(role.orderers, role.slice_ticks), role.index)


def _rebuilding(index: PieceIndex, cutter: PieceCutter) -> Callable[[EmittedBatch], None]:
    """What recovery hands each batch its replay emits: cut, and folded in at once."""

    def cut(emitted: EmittedBatch) -> None:
        index.fold(cutter.cut(emitted))

    return cut


@dataclass(frozen=True, slots=True)
class OpenedDirectory:
    """A data directory opened for a service: its run (logs, lock, what recovery rebuilt, the
    live changes the start asks for) and, with a slice length, the slice index of its durable
    output with the cutter of the pieces to come."""

    run: data_dir.OpenedRun
    slice_index: PieceIndex | None
    cutter: PieceCutter | None


def open_directory(
    config: OrdererConfig, service: ServiceConfig, given: Iterable[GivenParameter] | None
) -> OpenedDirectory:
    """Open (or create) the logs in ``service.data_dir`` and recover the run they hold, with
    the parameters it recorded; of ``config``, only the parameters ``given`` count (None: all
    of them), each weighed against the run's (:mod:`~orderer.service.restart`). The directory
    is locked: a second server on it (two pods on one volume) is refused."""
    slicing = service.slicing
    index: PieceIndex | None = None
    cutter: PieceCutter | None = None
    rebuild: Callable[[EmittedBatch], None] | None = None
    if slicing is not None:
        index, cutter = PieceIndex(), PieceCutter(slicing, service.orderer_index)
        # the recovery's replay emits the whole output again: the slice index is rebuilt
        # from it (everything it emits is durable once it returns)
        rebuild = _rebuilding(index, cutter)
    run = data_dir.open_run(
        config,
        service.data_dir,
        given=every_parameter() if given is None else given,
        fsync=service.fsync,
        segment_bytes=service.segment_bytes,
        role=service.slice_role,
        emitted=rebuild,
    )
    return OpenedDirectory(run, index, cutter)


def wanted_changes(config: OrdererConfig, changes: Iterable[restart.LiveChange]) -> dict[str, Any]:
    """The live changes of ``changes`` that ``config`` (the parameters in force) does not hold
    already, by name, each logged with both values; one already in force (a live change before
    the restart) is logged and left out."""
    wanted: dict[str, Any] = {}
    for change in changes:
        before = parameter_value(config, change.name)
        if before == change.value:
            log.info(
                "%s: %s (%s) is in force already",
                change.name,
                restart.shown(change.name, change.value),
                change.written,
            )
            continue
        wanted[change.name] = change.value
        log.info(
            "%s: %s -> %s (%s differs from the run's), a live change after recovery",
            change.name,
            restart.shown(change.name, before),
            restart.shown(change.name, change.value),
            change.written,
        )
    return wanted
