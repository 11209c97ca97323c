"""A restart weighed against the run it continues: the parameters a start gives, against those
the run's data directory recorded when it began (:data:`orderer.formats.log_format.PARAMETERS`).

Why: the run's parameters belong to the run, not to the command line that happens to restart
it. A shift crew restarting a hand-run orderer with a bare ``evb serve --data-dir D``, a
ConfigMap edited by hand, an ``EventBuilder`` created again on a retained volume: each must
continue the run as it was, or be told plainly why it cannot; recovering with other parameters
would rebuild another run than the one the ordered log holds. So recovery always uses the
recorded parameters, and each parameter the user actually gave (:class:`GivenParameter`) is
weighed here, once:

- equal to the value the run began with: nothing to do, whatever live changes came since. The
  operator's ConfigMap holds the parameters a run began with and is never rewritten, so a pod
  restarted after live edits of the resource must keep them, not go back;
- another value of a parameter that can change live (:data:`~orderer.config.LIVE_PARAMETERS`):
  a live change after recovery (:class:`LiveChange`), recorded in the arrival log as
  ``Configure`` records one, unless it is the value in force already;
- another value of any other parameter: refused before anything is written, with a
  :class:`~orderer.errors.ConfigError` naming what the user wrote and both values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orderer.config import LIVE_PARAMETERS, OrdererConfig, parameter_value
from orderer.errors import ConfigError
from orderer.service.settings import GivenParameter

__all__ = ["LiveChange", "shown", "weigh"]


@dataclass(frozen=True, slots=True)
class LiveChange:
    """A live parameter a restart gives another value than the run began with."""

    name: str
    """The parameter (one of :data:`~orderer.config.LIVE_PARAMETERS`)."""
    written: str
    """What the user wrote (the flag, or the file, line and key)."""
    value: Any
    """The value given, as :class:`OrdererConfig` holds it."""


def shown(name: str, value: Any) -> str:
    """Parameter ``name``'s value as a user writes it: ``1,2`` for sources, ``off`` for a
    source timeout of None, ``unset`` for a barrier timeout of None (4 x the build window)."""
    if value is None:
        return "off" if name == "source_timeout" else "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def weigh(
    recorded: OrdererConfig,
    requested: OrdererConfig,
    given: Iterable[GivenParameter],
    directory: Path,
) -> tuple[LiveChange, ...]:
    """The live changes the parameters ``given`` (their values in ``requested``) ask of the run
    that began with ``recorded``; a parameter that cannot change live and differs is refused."""
    changes: list[LiveChange] = []
    for parameter in given:
        before = parameter_value(recorded, parameter.name)
        after = parameter_value(requested, parameter.name)
        if after == before:
            continue
        if parameter.name in LIVE_PARAMETERS:
            changes.append(LiveChange(parameter.name, parameter.written, after))
            continue
        raise ConfigError(
            parameter.written,
            None,
            f"the run in {directory} began with {shown(parameter.name, before)}, not "
            f"{shown(parameter.name, after)}, and "
            f"{parameter.name} cannot change during a run: leave it out to keep the run's, or "
            "begin a new run in another data directory",
        )
    return tuple(changes)
