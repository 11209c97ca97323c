"""A streamed run resumed from its checkpoint builds its events as it began: what a run records
of its event building at its start (``runs/RUN/building.json``, :func:`building`) and the check
of a resumed run against it (:func:`check_resumed_building`; another value is refused, exit
status 2).

Why: a run resumed from its checkpoint with another ``--dt`` (or policy, or format) would hold
events built two ways, and nothing would tell them apart; one resumed with other stages would
carry states into stages they were not made by.
"""

from __future__ import annotations

import json
from typing import Any

from orderer.building.config import GlomConfig
from orderer.errors import ConfigError
from orderer.job_config import JobConfig, OutputFormat
from orderer.spark.output import files
from orderer.spark.output.layout import Layout
from orderer.spark.source.glom import glom_options
from orderer.stages.plan import Plan

__all__ = ["BUILDING_FLAGS", "MAX_FRAGMENTS_MEANING", "building", "check_resumed_building"]

BUILDING_FLAGS = {
    "dt": "--dt",
    "maxFragments": "--max-fragments",
    "timestampPolicy": "--timestamp-policy",
    "format": "--format",
    "glomSourceId": "--glom-source-id",
    "stages": "--stages",
    "liveTotals": "--ui",
}
"""The settings a streamed run records at its start (``runs/RUN/building.json``), by flag."""

MAX_FRAGMENTS_MEANING = "glom"
"""Recorded with a run's building: ``maxFragments`` N is glom's ``--maxfragments`` N (events of
up to N + 1 fragments). A record without it is of a run begun when N was the most fragments of
an event."""


def building(config: JobConfig, glom: GlomConfig, plan: Plan | None = None) -> dict[str, str]:
    """What a streamed run records of its event building (BUILDING_FLAGS); glom's source id
    only where it is written (an older parquet run's record has none, and resumes); the
    stages' shape where there are stages (their states are in the checkpoint, and their sink
    writes the events: a run begun without them resumes without them, and the other way
    round; a stage's code may change, a fixed bug most of all)."""
    record = {
        **glom_options(glom),
        "maxFragmentsMeaning": MAX_FRAGMENTS_MEANING,
        "format": config.format.value,
    }
    if config.format is OutputFormat.NSCLDAQ:
        record["glomSourceId"] = str(config.glom_source_id)
    if plan is not None:
        record["stages"] = plan.shape()
    if config.ui is not None:  # the page's totals are in the checkpoint from the run's start
        record["liveTotals"] = "kept"
    return record


def check_resumed_building(spark: Any, layout: Layout, record: dict[str, str]) -> None:
    """A run resuming from its checkpoint must build as its record says it began."""
    if not files.exists(spark, layout.building):  # a run started before the record existed
        return
    began = _in_glom_terms(json.loads(files.read_text(spark, layout.building)))
    began_with, given = bool(began.get("liveTotals")), bool(record.get("liveTotals"))
    if began_with != given:  # a yes or no: said in words, not as a recorded value
        before = "with" if began_with else "without"
        raise ConfigError(
            "--ui", None, f"run {layout.run} began {before} --ui and resumes from its checkpoint,"
            " where the live page's totals are kept from a run's start or not at all: run it "
            f"{before} --ui, give another --run, or remove {layout.run_dir} and {layout.events}"
            " to do the run again",
        )
    for key, flag in BUILDING_FLAGS.items():
        if key == "liveTotals":
            continue  # said above, in words: it is a yes or no
        if began.get(key) != record.get(key):
            raise ConfigError(
                flag,
                record.get(key),
                f"run {layout.run} began with {flag} {began.get(key, '(none)')} and resumes "
                "from its checkpoint, so it must build its events the same way: give the same "
                f"value, another --run, or remove {layout.run_dir} and {layout.events} to do "
                "the run again",
            )


def _in_glom_terms(began: dict[str, str]) -> dict[str, str]:
    """A run's record of its building with ``maxFragments`` as glom counts it: a run begun when
    ``--max-fragments N`` meant events of up to N fragments built what glom's N - 1 builds, so
    it resumes the same way with ``--max-fragments N-1`` (and is refused with the default)."""
    if "maxFragments" not in began or began.get("maxFragmentsMeaning") == MAX_FRAGMENTS_MEANING:
        return began
    try:
        earlier = int(began["maxFragments"])
    except ValueError:
        return began
    return {**began, "maxFragments": str(max(earlier - 1, 0))}
