"""A run read from a live orderer (``--target``) as a stream: Spark's file sink (or the NSCLDAQ
sink) writes the events exactly once, through the checkpoint and the sink's log, and the query
stops once the run ended and was read to its end (:func:`stream`). A run over several orderers
(``--target a,b,c``) ends once every orderer's run ended and the merged stream was read to its
end, and its last offset is committed at each orderer (:func:`_read_to_the_end`).

A run whose checkpoint exists resumes from it (a restarted driver must: exactly once), only with
the event building it began with (:mod:`orderer.spark.driver.resume`); without a checkpoint it
starts afresh and first removes what an earlier run of the same name left. Each streamed run has its
own checkpoint and its own file-sink log (``events/run=<run>/_spark_metadata``), since a sink
log shared by two queries would make the second skip the batch numbers the first one committed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from orderer.building.config import GlomConfig
from orderer.errors import ServiceUnavailable
from orderer.job_config import JobConfig, OutputFormat
from orderer.spark.driver import runs
from orderer.spark.driver.resume import building, check_resumed_building
from orderer.spark.live import partials
from orderer.spark.live.board import Board
from orderer.spark.live.observer import LiveRun
from orderer.spark.output import files
from orderer.spark.output.layout import Layout
from orderer.spark.output.nscldaq import NscldaqSink
from orderer.spark.output.writer import events_writer
from orderer.spark.source import access
from orderer.spark.source.glom import glom_options
from orderer.spark.source.sliced_reads import several
from orderer.spark.stages.runner import stage_failure
from orderer.spark.stages.sink import StagesSink, remove_stage_results
from orderer.stages.plan import Plan

__all__ = ["channel_security", "security_options", "stream"]


def security_options(config: JobConfig) -> dict[str, str]:
    """The job's security flags as options of the evb data source."""
    given = {
        "tlsCa": config.tls_ca,
        "tlsCert": config.tls_cert,
        "tlsKey": config.tls_key,
        "tokenFile": config.token_file,
        "tls": "true" if config.tls else None,
    }
    return {name: str(value) for name, value in given.items() if value}


def channel_security(config: JobConfig) -> Any:
    """The client's ChannelSecurity of the job's security flags, built as the data source
    builds it from the same options (None: plaintext)."""
    return access.channel_security(tuple(security_options(config).items()))


def stream(
    spark: Any,
    config: JobConfig,
    glom: GlomConfig,
    layout: Layout,
    span: runs.RunSpan | runs.OrderersRun | None = None,
    stopped: Callable[[], bool] = lambda: False,
    plan: Plan | None = None,
    board: Board | None = None,
) -> tuple[int, int | None]:
    """Stream the orderer into ``layout`` until the run ended and was read to its end: the
    whole output until ``run_ended``, or with ``span`` that run of the run table alone; with
    ``board`` (``--ui``), the run's running totals published after each micro-batch.
    Returns (micro-batches, the offset read to; None: stopped before the run's end)."""
    from orderer.client import commit, get_stats

    assert config.target is not None  # the job streams only with --target
    target = config.target
    orderers = several(target, "--target")
    security = channel_security(config)
    checkpoint = config.checkpoint or layout.checkpoint
    if span is not None and config.checkpoint:
        checkpoint = f"{config.checkpoint.rstrip('/')}/{span.run}"
    record = building(config, glom, plan)
    if files.exists(spark, checkpoint):  # a restarted run resumes: it must build as it began
        check_resumed_building(spark, layout, record)
    else:  # a new run, not a restarted one: replace the old
        files.remove(spark, layout.events)
        files.remove(spark, layout.run_dir)
        if plan is not None:
            remove_stage_results(spark, plan, config.output.rstrip("/"), layout.run)
    files.write_text(spark, layout.building, json.dumps(record, sort_keys=True))

    reader = (
        spark.readStream.format("evb")
        .option("target", target)
        .options(**glom_options(glom))
        .option("numPartitions", config.partitions)
        .option("consumer", config.consumer)
        .options(**security_options(config))
    )
    if config.max_fragments_per_trigger:
        reader = reader.option("maxFragmentsPerTrigger", config.max_fragments_per_trigger)
    if isinstance(span, runs.RunSpan):  # this run's offsets alone: its last event closes there
        reader = reader.option("run", span.run).option("startingOffset", span.start_offset)
    elif span is not None:  # one run over several orderers: the source finds its offsets
        reader = reader.option("run", span.run)
    if board is not None:  # the events' counts made where they are built (live.partials)
        reader = reader.option(partials.OPTION, "true")
    events = reader.option("output", "events").load()  # built where read: one Python step
    writer = events.writeStream.option("checkpointLocation", checkpoint).queryName(
        f"evb-{layout.run}"
    )
    live = None
    if board is not None:  # the totals kept beside the stages' states, exactly once as they
        live = LiveRun(spark, board, layout.run, glom.dt, plan, f"{checkpoint}/evb-live")
        live.start()
    if plan is not None or live is not None:  # the stages' results, the totals and the events,
        writer = writer.foreachBatch(  # per batch, once: one sink
            StagesSink(
                spark, plan or Plan(()), config.output.rstrip("/"), layout.run, layout.events,
                config.format, config.partitions, f"{checkpoint}/evb-stages",
                config.glom_source_id, live,
            )
        )
    elif config.format is OutputFormat.NSCLDAQ:  # no file sink writes ring items: batch-id-named
        writer = writer.foreachBatch(NscldaqSink(spark, layout.events, config.glom_source_id))
    else:  # the run's own directory, with its own sink log: the layout partitionBy("run") gives
        writer = events_writer(writer, config.format).option("path", layout.events)
    if config.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    query = writer.start()
    print(f"evb spark-job: run {layout.run}: query started, reading {target} (the first "
          "micro-batch takes seconds: Spark starts its Python workers)", file=sys.stderr,
          flush=True)  # fmt: skip
    read_to: int | None = None
    try:
        told = False
        while not stopped():  # until the run ended; then read to its end and stop
            if query.awaitTermination(config.poll):
                break
            if not told and query.lastProgress:  # the first micro-batch: seconds after start()
                told = True
                print(f"evb spark-job: run {layout.run}: first micro-batch done "
                      f"({query.lastProgress.get('numInputRows', 0):,} events); reading as the "
                      "data comes", file=sys.stderr, flush=True)  # fmt: skip
            if orderers is not None:  # a run over several orderers
                number = None if span is None else span.run
                read_to = _read_to_the_end(query, orderers, config, security, number)
                if read_to is None:
                    continue
                break
            try:
                stats = get_stats(target, security=security, barrier_log_limit=1)
            except ServiceUnavailable as error:  # the orderer restarts: the query retries too
                print(f"evb spark-job: orderer unavailable, waiting: {error}", file=sys.stderr)
                continue
            if not isinstance(span, runs.RunSpan):
                run_end = stats.next_offset if stats.run_ended else None
            else:
                run_end = access.run_end(stats.runs, span.run)
            if run_end is None:
                continue
            query.processAllAvailable()
            # Spark commits a batch's end to the source when it plans the next batch, so
            # the last one is never committed: commit it here, or the finished job would
            # show a lag for ever and hold that much of the log from retention
            end = _end_offset(query.lastProgress)
            if isinstance(span, runs.RunSpan) and (
                span.start_offset if end is None else end
            ) < run_end:
                continue  # not read to the run's end yet
            if end is not None:
                commit(target, config.consumer, end, security=security)
            read_to = run_end if end is None else end
            break
    finally:
        batches = int(query.lastProgress["batchId"]) + 1 if query.lastProgress else 0
        query.stop()
    failure = query.exception()
    if live is not None and failure is None and read_to is not None:
        live.end()
    if failure is not None:
        stage = stage_failure(str(failure))
        if stage is not None:  # a user's stage: its one line, not Spark's trace
            raise RuntimeError(f"the streaming query failed: StageError: {stage}")
        raise RuntimeError(f"the streaming query failed: {failure}")
    return batches, read_to


def _read_to_the_end(
    query: Any, orderers: list[str], config: JobConfig, security: Any, run: int | None = None
) -> int | None:
    """A run over several orderers once every orderer's run ended (``run``: that run of their
    run tables): the query read to the end of the merged stream (its last offset the end,
    :class:`~orderer.replay.unit_plan.UnitStart`), that end committed at every orderer (Spark
    commits a batch's end only when it plans the next: the last one here); returns the
    position after the merged stream's last row, None until then."""
    from orderer.client import commit, get_stats
    from orderer.replay.unit_plan import UnitStart

    try:
        stats = [get_stats(target, security=security, barrier_log_limit=1) for target in orderers]
        if run is None:
            ended = all(s.run_ended for s in stats)
        else:
            table = runs.orderers_table([runs.table(s) for s in stats])
            ended = any(span.run == run and span.ended for span in table)
    except ServiceUnavailable as error:  # an orderer restarts: the query waits for it too
        print(f"evb spark-job: orderer unavailable, waiting: {error}", file=sys.stderr)
        return None
    if not ended:
        return None
    query.processAllAvailable()
    progress = query.lastProgress
    end = progress["sources"][0].get("endOffset") if progress and progress.get("sources") else None
    if isinstance(end, str):
        end = json.loads(end)
    if not isinstance(end, dict):
        return None
    last = UnitStart.from_json(end)
    if not last.ended:
        return None  # the last units are not planned yet (the indexes trail the run's end)
    for target, offset in zip(orderers, last.needed, strict=True):
        commit(target, config.consumer, offset, security=security)
    return last.position


def _end_offset(progress: dict[str, Any] | None) -> int | None:
    """The offset after the last fragment a query's last batch read (its progress holds the
    source's end offset as the JSON of ``{"offset": n}``); None before any batch."""
    if not progress or not progress.get("sources"):
        return None
    end = progress["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return int(end["offset"]) if isinstance(end, dict) and "offset" in end else None
