"""The data directory of a run (``--data-dir``): the arrival log and the ordered log that hold
the run, with the parameters it began with, opened and recovered by one server at a time, with
a clear refusal when the directory cannot hold them.

Why: two servers on one directory (two pods on one volume) would both append to its logs; an
exclusive ``flock`` held while the service runs refuses the second, and the kernel drops it when
the process dies, so a killed server never leaves it behind. A directory that cannot hold the
logs (a file in the way, no permission) is a :class:`~orderer.errors.ConfigError` naming the
flag, said before the service starts, instead of an ``OSError`` from deep in the storage.

The run's parameters are the run's: a new directory records those it begins with
(:data:`~orderer.formats.log_format.PARAMETERS`) before its logs hold anything, and every later
start recovers the run with them, whatever its command line; what that command line gives otherwise
is weighed by :mod:`orderer.service.restart` before anything is written. A directory that holds
logs but no recorded parameters was written by an evb that did not record them: it is
recovered with the parameters given, as it always was.

Where the orderer stands in a run over several (N, K and T, docs/scale-out.md) is recorded
beside the parameters, and unlike them is never taken from the record: a start must give the
run's own (:func:`check_role`), since a restart that silently became another orderer would
route nothing right. A directory whose record does not say (or that has none) is a plain
orderer's, orderer 0 of 1.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orderer.batch import EmittedBatch
from orderer.config import OrdererConfig
from orderer.errors import ConfigError, InternalOrdererError
from orderer.formats import log_format
from orderer.formats.log_format import ARRIVALS, ORDERED
from orderer.service import restart
from orderer.service.durable import replace_file
from orderer.service.logs import ArrivalLog, OrderedLog
from orderer.service.recovery import Recovered, recover
from orderer.service.segments import FsyncPolicy
from orderer.service.settings import GivenParameter
from orderer.stats import SliceRole

__all__ = [
    "DATA_DIR_FLAG",
    "OpenedRun",
    "check_role",
    "lock",
    "open_run",
    "record_parameters",
    "unusable",
]

log = logging.getLogger("evb.service")

DATA_DIR_FLAG = "--data-dir"


def lock(directory: Path) -> int:
    """An exclusive ``flock`` on ``directory/LOCK``, held while the service runs (the kernel
    drops it when the process dies, so a killed server never leaves it behind). Two servers on
    one directory would both append to its logs: the second is refused."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise unusable(directory, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            DATA_DIR_FLAG, str(directory), "is in use by another evb serve (its LOCK is held)"
        ) from None
    return fd


def unusable(directory: Path, error: OSError) -> ConfigError:
    """A data directory that cannot hold the logs: a file, not writable, under a file."""
    if isinstance(error, FileExistsError | NotADirectoryError):
        existing = next(path for path in (directory, *directory.parents) if path.exists())
        why = "is not a directory" if existing == directory else (
            f"cannot be created: {existing} is not a directory"
        )
    else:
        why = f"cannot hold the logs: {error.strerror} ({error.filename})"
    return ConfigError(DATA_DIR_FLAG, str(directory), why)


@dataclass(frozen=True, slots=True)
class OpenedRun:
    """The run a data directory holds, recovered, the directory locked (:func:`open_run`)."""

    lock: int
    """File descriptor holding the directory's lock; closing it releases the directory."""
    arrivals: ArrivalLog
    ordered: OrderedLog
    recovered: Recovered
    changes: tuple[restart.LiveChange, ...] = ()
    """Live changes the start's parameters ask of the recovered run (the service applies them
    once it runs, each recorded as ``Configure`` records one)."""


def record_parameters(
    directory: Path, config: OrdererConfig, role: SliceRole | None = None
) -> None:
    """Record the parameters a new run begins with in its data directory (before its logs hold
    a record), so that every later start recovers it with them, whatever its command line; and
    ``role``, where the orderer stands in a run over several."""
    replace_file(Path(directory) / log_format.PARAMETERS, log_format.parameters_bytes(config, role))


_ROLE_FLAGS = (("orderers", "--orderers"), ("index", "--orderer-index"),
               ("slice_ticks", "--slice-ticks"))  # fmt: skip


def _role_text(role: SliceRole) -> str:
    if role.orderers == 1 and role.slice_ticks is None:
        return "a run of one orderer"
    ticks = role.slice_ticks
    slices = "no slice length" if ticks is None else f"slices of {ticks} ticks"
    return f"orderer {role.index} of {role.orderers} with {slices}"


def check_role(recorded: SliceRole, given: SliceRole, directory: Path) -> None:
    """A restart must give the orderer the place in its run the run began with: the slices an
    orderer owns are what every source routes by, so another N, K or T would take fragments
    that belong to another orderer, or refuse its own. Refused (naming the first flag that
    differs) before anything is written."""
    for name, written in _ROLE_FLAGS:
        if getattr(recorded, name) != getattr(given, name):
            raise ConfigError(
                written,
                None,
                f"the run in {directory} is {_role_text(recorded)}, not {_role_text(given)}, "
                "and which slices an orderer owns cannot change during a run: start it as the "
                "run began (--orderers, --orderer-index, --slice-ticks), or begin a new run in "
                "another data directory",
            )


def _holds_logs(directory: Path) -> bool:
    return bool(
        log_format.log_segments(directory / ARRIVALS, ARRIVALS)
        or log_format.log_segments(directory / ORDERED, ORDERED)
    )


def open_run(
    config: OrdererConfig,
    directory: Path,
    *,
    given: Iterable[GivenParameter],
    fsync: FsyncPolicy,
    segment_bytes: int,
    role: SliceRole | None = None,
    emitted: Callable[[EmittedBatch], None] | None = None,
) -> OpenedRun:
    """Lock ``directory``, open (or create) its logs and recover the run they hold with the
    parameters it began with; ``config``'s values of the parameters ``given`` are weighed
    against them first (refused, or live changes to make), and ``role`` (None: a plain
    orderer) against where the run's orderer stands in it (:func:`check_role`). ``emitted``
    sees every batch the recovery's replay emits (the slice index is rebuilt from them). On any
    error, whatever was opened is closed and the lock released."""
    role = SliceRole() if role is None else role
    held = lock(directory)
    arrivals: ArrivalLog | None = None
    ordered: OrderedLog | None = None
    try:
        written = log_format.ordered_format_of(directory / ORDERED)
        if written is log_format.ORDERED_SCHEMA_WITH_PAYLOADS:
            raise ConfigError(
                DATA_DIR_FLAG,
                str(directory),
                "holds a run whose ordered log keeps a second copy of every payload, as evb "
                "wrote it before it wrote each payload once: this evb reads that run (evb "
                "spark-job --path, evb replay) but does not continue it; finish it with the evb "
                "that began it, or begin the next run in a new --data-dir",
            )
        recorded = log_format.read_parameters(directory)
        unrecorded = recorded is None and _holds_logs(directory)
        changes: tuple[restart.LiveChange, ...] = ()
        if recorded is not None or unrecorded:  # a directory without a record: a plain orderer
            check_role(log_format.read_slice_role(directory) or SliceRole(), role, directory)
        if recorded is not None:
            changes = restart.weigh(recorded, config, given, directory)
        try:
            if recorded is None and not unrecorded:
                record_parameters(directory, config, role)
            arrivals = ArrivalLog.open(
                directory / ARRIVALS, fsync=fsync, segment_bytes=segment_bytes
            )
            ordered = OrderedLog.open(
                directory / ORDERED, fsync=fsync, segment_bytes=segment_bytes
            )
        except OSError as error:  # a path in the way, no permission, no space
            raise unusable(directory, error) from None
        try:
            recovered = recover(
                config if recorded is None else recorded, arrivals, ordered, emitted=emitted
            )
        except InternalOrdererError as error:
            if not unrecorded:
                raise
            raise ConfigError(
                DATA_DIR_FLAG,
                str(directory),
                "holds a run begun by an evb that did not record its parameters, and its logs "
                "do not replay under the ones given now: start it with the flags (or --config "
                f"file) the run began with ({error})",
            ) from None
    except BaseException:
        for opened in (arrivals, ordered):
            if opened is not None:
                opened.close()
        os.close(held)
        raise
    log.info(
        "recovered %d arrivals, %d ordered fragments, time %.6f, with %s",
        arrivals.records,
        ordered.next_offset,
        recovered.resume_time,
        "the parameters given (the directory records none)"
        if unrecorded
        else "the parameters the run recorded",
    )
    return OpenedRun(
        lock=held, arrivals=arrivals, ordered=ordered, recovered=recovered, changes=changes
    )
