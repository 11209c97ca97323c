"""How the job writes its events as Parquet or JSON rows, batch or streaming alike
(:func:`events_writer`); the NSCLDAQ format has a sink of its own
(:mod:`orderer.spark.output.nscldaq`).
"""

from __future__ import annotations

from typing import Any

from orderer.job_config import OutputFormat

__all__ = ["UNIQUE_COLUMNS", "events_writer", "writer_options"]

UNIQUE_COLUMNS = (
    "event",
    "timestamp",
    "fragments.list.element.offset",
    "fragments.list.element.timestamp",
    "fragments.list.element.payload",
)
"""The event rows' Parquet columns (paths as Spark writes them) that hold a different value in
almost every row: offsets always, timestamps and payloads nearly so."""


def writer_options(output_format: str) -> dict[str, str]:
    """The options the job writes its events with, in ``output_format``.

    Why: Parquet's writer first tries a dictionary for every column, fills it for a whole page,
    then finds it no smaller than the values and writes them plain. For the columns of
    :data:`UNIQUE_COLUMNS` all that work is thrown away (what it cost: README, "The Spark
    job"); written plain from the start, the files hold the same encodings. The other columns
    (sources, barrier types, multiplicities) keep their dictionaries."""
    if output_format != OutputFormat.PARQUET:
        return {}
    return {f"parquet.enable.dictionary#{column}": "false" for column in UNIQUE_COLUMNS}


def events_writer(writer: Any, output_format: OutputFormat) -> Any:
    """A batch or a streaming writer of events, in ``output_format`` with its options."""
    return writer.format(output_format.value).options(**writer_options(output_format))
