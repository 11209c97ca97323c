"""A finished run read at once (``--path``): its ordered log's events, built where they are read
(:func:`batch_events`), written over the run's previous events and directories
(:func:`write_batch`).
"""

from __future__ import annotations

from typing import Any

from orderer.building.config import GlomConfig
from orderer.job_config import JobConfig, OutputFormat
from orderer.spark.live import partials
from orderer.spark.live.board import Board
from orderer.spark.live.observer import LiveRun
from orderer.spark.output import files
from orderer.spark.output.layout import Layout
from orderer.spark.output.nscldaq import NscldaqSink
from orderer.spark.output.writer import events_writer
from orderer.spark.source.glom import glom_options
from orderer.spark.stages.sink import StagesSink, remove_stage_results
from orderer.stages.plan import Plan

__all__ = ["batch_events", "write_batch"]


def batch_events(spark: Any, config: JobConfig, glom: GlomConfig, live: bool = False) -> Any:
    """The events of a finished run's ordered log (``--path``), built where they are read
    (``live``: with their counts for the live page, :mod:`orderer.spark.live.partials`)."""
    return (
        spark.read.format("evb")
        .option("path", str(config.path))
        .options(**glom_options(glom))
        .option("numPartitions", config.partitions)
        .option("output", "events")
        .option(partials.OPTION, str(live).lower())
        .load()
    )


def write_batch(
    spark: Any,
    config: JobConfig,
    glom: GlomConfig,
    layout: Layout,
    plan: Plan | None = None,
    board: Board | None = None,
) -> int:
    """The run's events into ``layout``, replacing the run, and the stages of ``plan`` over
    them (with ``board``, ``--ui``: the run's totals published); returns the batches (one)."""
    events = batch_events(spark, config, glom, live=board is not None)
    # overwrite the run's partition only: the other runs' partitions are not touched
    if plan is not None or board is not None:  # one step of the stages from nothing, batch 0
        live = None
        if board is not None:
            live = LiveRun(spark, board, layout.run, glom.dt, plan, None)
            live.start()
        steps = plan or Plan(())
        files.remove(spark, layout.events)
        remove_stage_results(spark, steps, config.output.rstrip("/"), layout.run)
        StagesSink(
            spark, steps, config.output.rstrip("/"), layout.run, layout.events, config.format,
            config.partitions, None, config.glom_source_id, live,
        )(events, 0)
        if live is not None:
            live.end()
    elif config.format is OutputFormat.NSCLDAQ:  # one batch, number 0, through the sink's writer
        files.remove(spark, layout.events)
        NscldaqSink(spark, layout.events, config.glom_source_id)(events, 0)
    else:
        events_writer(events.write, config.format).mode("overwrite").save(layout.events)
    # the run's summary, report and checkpoint were the old one's
    files.remove(spark, layout.run_dir)
    return 1
