"""Event building as the Spark job sees it: the rows of the ``evb`` data source in Spark's
words, and how events are built (:class:`~orderer.building.config.GlomConfig`) as the data
source's options.

Why here and not beside the rule (:mod:`orderer.building`): Spark's DDL strings and the option
names (``dt``, ``maxFragments``, ``timestampPolicy``) are the data source's interface, which the
rule does not need; the replay and the other builders take the rule without them.
"""

from __future__ import annotations

from collections.abc import Mapping

from orderer.building.config import GlomConfig
from orderer.errors import ConfigError

__all__ = [
    "EVENT_SPARK_SCHEMA",
    "FRAGMENT_SPARK_SCHEMA",
    "glom_from_options",
    "glom_options",
]

FRAGMENT_SPARK_SCHEMA = (
    "offset long, source long, timestamp long, barrier long, late boolean, payload binary"
)
""":data:`orderer.building.glom.FRAGMENT_SCHEMA` in Spark's DDL: the data source's rows."""
EVENT_SPARK_SCHEMA = (
    "event long, timestamp long, multiplicity int, barrier long, late int, "
    "fragments array<struct<offset:long, source:long, timestamp:long, late:boolean, "
    "payload:binary>>"
)
""":data:`orderer.building.glom.EVENT_SCHEMA` in Spark's DDL: the built events' rows."""


def glom_options(glom: GlomConfig) -> dict[str, str]:
    """``glom`` as options of the ``evb`` data source (what a streamed run records of its
    building too: :func:`orderer.spark.driver.resume.building`)."""
    options = {"maxFragments": str(glom.max_fragments)}
    if glom.dt is not None:
        options["dt"] = str(glom.dt)
    options["timestampPolicy"] = str(glom.timestamp_policy)
    return options


def glom_from_options(options: Mapping[str, str]) -> GlomConfig:
    """The building of data source options (case-insensitive keys, string values); a bad value
    names its option."""
    lowered = {str(key).lower(): value for key, value in options.items()}

    def integer(name: str, default: int | None) -> int | None:
        raw = lowered.get(name.lower())
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(name, raw, "must be an integer") from None

    return GlomConfig(
        dt=integer("dt", None),
        max_fragments=integer("maxFragments", 1000),  # type: ignore[arg-type]
        timestamp_policy=lowered.get("timestamppolicy", "earliest"),  # type: ignore[arg-type]
    )
