"""How events are built (glom's flags), apart from the rule that builds them.

Why a module of its own: the Spark job's configuration (:mod:`orderer.job_config`, which the
operator and the command line's parser import) names the timestamp policy, and this module imports
only the error hierarchy, so it loads neither numpy, pyarrow nor the compiled core. The rule is
:mod:`orderer.building.glom`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from orderer.errors import ConfigError

__all__ = ["GlomConfig", "TimestampPolicy"]


class TimestampPolicy(enum.StrEnum):
    """Which timestamp a built event carries, by the fragments' order in the stream (glom's
    names: ``earliest`` = the first fragment's, ``latest`` = the last fragment's)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    AVERAGE = "average"


@dataclass(frozen=True, slots=True)
class GlomConfig:
    """How events are built; the same values must reach every builder of a run (the Spark
    source plans with them where its executors build), or its events would differ."""

    dt: int | None = None
    """Glom window in timestamp ticks; None: no building, one event per fragment."""
    max_fragments: int = 1000
    """glom's ``--maxfragments`` (its default 1000 too): an event holds at most
    ``max_fragments + 1`` fragments (glom checks the count before adding a fragment:
    glomMain.cpp, ``accumulateEvent``, ``fragmentCount > maxFragments``); 0: one fragment per
    event, as no building."""
    timestamp_policy: TimestampPolicy = TimestampPolicy.EARLIEST
    """Timestamp of a built event: its first (``earliest``) or last (``latest``) fragment's in
    stream order, or the integer mean (``average``), as NSCLDAQ's glom."""

    def __post_init__(self) -> None:
        if self.dt is not None and (
            isinstance(self.dt, bool) or not isinstance(self.dt, int) or not 0 <= self.dt < 2**63
        ):
            raise ConfigError("dt", self.dt, "must be an integer number of ticks >= 0")
        if (
            isinstance(self.max_fragments, bool)
            or not isinstance(self.max_fragments, int)
            or self.max_fragments < 0
        ):
            raise ConfigError("max_fragments", self.max_fragments, "must be an integer >= 0")
        try:
            object.__setattr__(self, "timestamp_policy", TimestampPolicy(self.timestamp_policy))
        except ValueError:
            raise ConfigError(
                "timestamp_policy", self.timestamp_policy, "must be earliest, latest or average"
            ) from None

    @property
    def builds(self) -> bool:
        """Whether any event can hold two fragments (``max_fragments`` 0: one per event)."""
        return self.dt is not None and self.max_fragments > 0

    @property
    def largest_event(self) -> int:
        """Most fragments one event can hold: ``max_fragments + 1``, as glom."""
        return self.max_fragments + 1
