"""The ``evb`` data source's options, parsed once on the driver (:class:`Options`): where to
read (``target`` or ``path``), what rows (``output``: fragments or events, ``liveCounts``), how
events are built (``dt``, ``maxFragments``, ``timestampPolicy``: :mod:`orderer.spark.source.glom`),
how reads are cut and paced, and the orderer's security; and what a partition's rows are once
read (:meth:`Options.rows`: its fragments, or the events glom builds of them) in Spark's DDL
(:attr:`Options.schema`). The options themselves are listed in
:mod:`orderer.spark.source.datasource`'s docstring.

Pickled to the executors with the readers: :meth:`Options.rows` runs there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from orderer.building.config import GlomConfig
from orderer.building.glom import event_starts, glom_batches
from orderer.errors import ConfigError
from orderer.spark.live.partials import OPTION, SPARK_COLUMN, with_counts
from orderer.spark.source.glom import EVENT_SPARK_SCHEMA, FRAGMENT_SPARK_SCHEMA, glom_from_options

__all__ = ["Options"]

_SECURITY_OPTIONS = ("tlsCa", "tlsCert", "tlsKey", "tokenFile", "tls")


def _output(value: str | None) -> bool:
    """Whether the option ``output`` asks for events (else fragments, the default)."""
    if value is None or value == "" or value.lower() == "fragments":
        return False
    if value.lower() == "events":
        return True
    raise ConfigError("output", value, "must be fragments or events")


def _flag(name: str, value: str | None) -> bool:
    """A true/false option (unset: false)."""
    if value is None or value == "" or value.lower() == "false":
        return False
    if value.lower() == "true":
        return True
    raise ConfigError(name, value, "must be true or false")


@dataclass(frozen=True)
class Options:
    """The options of one read (:meth:`parse`), as the driver plans it and the executors read
    it."""

    target: str | None
    path: Path | None
    glom: GlomConfig
    partitions: int
    max_per_trigger: int | None
    consumer: str
    starting_offset: int
    ending_offset: int | None
    poll_interval: float
    reconnect_timeout: float
    run: int | None = None
    """Read up to the end of this run of the orderer's run table (``GetStats.runs``)."""
    events: bool = False
    """Rows are built events (``output`` = ``events``), not fragments."""
    live: bool = False
    """Event rows carry their partition's counts for the live page (option ``liveCounts``,
    :mod:`orderer.spark.live.partials`)."""
    security: tuple[tuple[str, str], ...] = ()
    """TLS and token files (``tlsCa``, ``tlsCert``, ``tlsKey``, ``tokenFile``, ``tls``), read
    where a channel is opened (driver and executors alike)."""

    @classmethod
    def parse(cls, options: Any) -> Options:
        lowered = {str(key).lower(): str(value) for key, value in dict(options).items()}

        def number(name: str, default: float | None, kind: type = int, low: float = 0) -> Any:
            raw = lowered.get(name.lower())
            if raw is None or raw == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise ConfigError(name, raw, f"must be {what}") from None
            if value < low:
                raise ConfigError(name, raw, f"must be >= {low}")
            return value

        target = lowered.get("target") or None
        path = lowered.get("path") or None
        if (target is None) == (path is None):
            raise ConfigError("target", target, "give exactly one of the options target and path")
        return cls(
            target=target,
            path=Path(path) if path else None,
            glom=glom_from_options(dict(options)),
            partitions=number("numPartitions", 2, int, 1),
            max_per_trigger=number("maxFragmentsPerTrigger", None, int, 1),
            consumer=lowered.get("consumer", "spark"),
            starting_offset=number("startingOffset", 0, int, 0),
            ending_offset=number("endingOffset", None, int, 0),
            poll_interval=number("pollInterval", 0.05, float, 0),
            reconnect_timeout=number("reconnectTimeout", 120.0, float, 0),
            run=number("run", None, int, 0),
            events=_output(lowered.get("output")),
            live=_flag(OPTION, lowered.get(OPTION.lower())),
            security=tuple(
                (name, lowered[name.lower()])
                for name in _SECURITY_OPTIONS
                if lowered.get(name.lower())
            ),
        )

    def rows(self, fragments: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A partition's rows: its fragments, or the events built of them (a partition holds
        whole events, so it builds alone, exactly as the sequential glom)."""
        if not self.events:
            return fragments
        events = glom_batches(fragments, self.glom)
        if not self.live:
            return events
        return with_counts(events, self.glom.dt if self.glom.builds else None)

    @property
    def schema(self) -> str:
        """The rows' schema in Spark's DDL."""
        if not self.events:
            return FRAGMENT_SPARK_SCHEMA
        return f"{EVENT_SPARK_SCHEMA}, {SPARK_COLUMN}" if self.live else EVENT_SPARK_SCHEMA

    def starts(self, timestamp: np.ndarray, barrier: np.ndarray) -> np.ndarray:
        """Event starts (indices) of a stretch that begins at an event start."""
        dt = self.glom.dt if self.glom.builds else None
        return event_starts(timestamp, barrier, dt=dt, max_fragments=self.glom.max_fragments)
