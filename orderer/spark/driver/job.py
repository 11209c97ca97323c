"""The evb Spark job: ordered stream -> built events (Parquet or JSON, one directory per run) ->
run summary (JSON) and report (PNG plots + HTML), per run.

Run as ``evb spark-job ...`` or as the SparkApplication's main file
(``spark-submit local:///opt/evb/orderer/spark/driver/job.py --target ... --dt ...``). With
``--target`` it reads the live orderer as a stream (:mod:`orderer.spark.source`), writes the
events with Spark's file sink (exactly once: the checkpoint and the sink's log), and finishes by
itself once the run ended and everything was consumed (``GetStats.run_ended``; the
SparkApplication relies on that). With ``--path`` it reads a finished run's log directory in one
batch. Either way the source builds the events where it reads them (``output`` = ``events``:
:func:`orderer.building.glom.glom_batches` in each partition's ``read()`` on the executors, one
Python step per fragment), and it cuts partitions only where events start, so the events are the
sequential glom's.

Output layout under ``--output`` (:class:`~orderer.spark.output.layout.Layout`); several runs share
one output, and a run writes only its own directories::

    events/run=<run>/         the run's events (Parquet, or JSON lines); read OUTPUT/events for
                              every run, with ``run`` as a partition column. With --format
                              nscldaq: ring items, <batch>-<partition>.evt in offset order
                              (:mod:`orderer.spark.output.nscldaq`)
    runs/<run>/summary.json   the run summary
    runs/<run>/report/        rates.png, lateness.png, multiplicity.png, dt_spectrum.png,
                              coincidences.png, index.html, and the histograms as data:
                              dt_spectrum.pkl, coincidences.pkl (boost-histogram, pickled);
                              with --stages, stage_<stage>_<column>.png and .pkl for each
                              histogram a stage declares
    runs/<run>/checkpoint/    the streaming query's checkpoint (--target; --checkpoint moves it)

Why a run owns whole directories: a run never deletes or overwrites another's results, and
doing the same run again replaces exactly that run. With ``--path`` the run's events and its
``runs/<run>/`` are replaced. With ``--target`` a run whose checkpoint exists *resumes* from it
(a restarted driver must: exactly once), keeping its events and rewriting its summary and
report, and only with the event building it began with (``runs/<run>/building.json``: dt, max
fragments, timestamp policy, format; another value is refused, exit status 2); without a
checkpoint it starts afresh and first removes what an earlier run of the same name left. Each
streamed run has its own checkpoint and its own file-sink log
(``events/run=<run>/_spark_metadata``), since a sink log shared by two queries would make the
second skip the batch numbers the first one committed. A Hadoop URI (``s3a://``, ``hdfs://``) is
accepted as ``--output``: the summary and the report are written locally first and copied there.

The flags are a :class:`~orderer.job_config.JobConfig` (the operator writes the
SparkApplication's arguments from one, the live demo runs the job with one). Bad arguments are
refused before Spark starts (a JVM start is seconds, :mod:`orderer.spark.driver.checks`): the flag
and the value in one line, exit status 2; so is a missing Java (Spark needs Java 17 or later).

Its parts: :mod:`~orderer.spark.output.layout` (where a run's results live),
:mod:`~orderer.spark.driver.streaming` (``--target``), :mod:`~orderer.spark.driver.batch`
(``--path``), :mod:`~orderer.spark.driver.resume` (a resumed run builds as it began),
:mod:`~orderer.spark.output.writer` (the events' writer options); this module runs them and writes
the summary and the report.

A run spread over several orderers (docs/scale-out.md) is read as one: ``--target a,b,c`` (its
orderers in their order, each one's role checked before Spark starts: another order or a missing
orderer is refused in one line, exit status 2) or ``--path d0,d1,d2`` (their data directories);
the source reads them in slice order (:mod:`orderer.spark.source.sliced_source`) and the events are
glom's over the merged stream, each row's ``offset`` its position there. ``--check-order`` takes
one orderer.

With ``--follow-runs`` the job follows the orderer from run to run
(:mod:`orderer.spark.driver.runs`): each run of its run table is a run of the layout above, named by
its number (``events/run=8/``, ``runs/8/``), built by a query of its own over exactly its offsets,
its summary and report written once it ended and was read to its end; the job goes on until SIGTERM
or ``--until-run``. Over several orderers (``--target a,b,c``) it follows the runs begun at every
orderer, each run the merge of the orderers' outputs of that run
(:func:`orderer.spark.driver.runs.orderers_table`).

The SparkSession is created only in :func:`main`; :func:`run` and :func:`follow_runs` take one
(the tests share theirs).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orderer.building.config import GlomConfig
from orderer.errors import ConfigError, ServiceUnavailable
from orderer.job_config import JobConfig, OutputFormat
from orderer.spark.driver import runs
from orderer.spark.driver.batch import write_batch
from orderer.spark.driver.checks import check_arguments, glom_config, java_problem, stages_plan
from orderer.spark.driver.streaming import channel_security, security_options, stream
from orderer.spark.live.board import Board
from orderer.spark.live.page import LivePage
from orderer.spark.output import files
from orderer.spark.output.layout import Layout
from orderer.spark.output.nscldaq import NscldaqSink
from orderer.spark.source.glom import glom_options
from orderer.spark.source.sliced_reads import several
from orderer.spark.stages.order_check import CHECK_FRAGMENTS, check_order, report
from orderer.spark.stages.runner import stage_failure
from orderer.stages.plan import Plan

__all__ = ["JobResult", "check_stages_order", "create_session", "follow_runs", "main", "run"]


@dataclass
class JobResult:
    summary: dict[str, Any]
    events_path: str
    summary_path: str
    report_path: str
    batches: int


def run(
    spark: Any, config: JobConfig, plan: Plan | None = None, board: Board | None = None
) -> JobResult:
    """Build the events, then write the summary and the report; returns where they are.
    ``plan``: the ``--stages``' when the caller has it (None: made here, if there are any);
    ``board``: the live page's (``--ui``), given the run's totals after each micro-batch."""
    from orderer.spark.source.datasource import register

    register(spark)
    glom = glom_config(config)
    plan = stages_plan(config) if plan is None else plan
    layout = Layout.of(config)
    started = time.monotonic()
    if config.target:
        batches, _ = stream(spark, config, glom, layout, plan=plan, board=board)
    else:
        batches = write_batch(spark, config, glom, layout, plan, board)
    return _finish(spark, config, glom, layout, batches, time.monotonic() - started, plan=plan)


def follow_runs(
    spark: Any, config: JobConfig, plan: Plan | None = None, board: Board | None = None
) -> list[JobResult]:
    """``--follow-runs``: every run of the orderer's run table, one after another
    (:func:`orderer.spark.driver.runs.follow`), until SIGTERM, a query that stopped, or
    ``--until-run``; returns the runs built, in order (``board``: each run's totals on the
    live page, as :func:`run`)."""
    from orderer.client import get_stats
    from orderer.spark.source.datasource import register

    register(spark)
    glom = glom_config(config)
    plan = stages_plan(config) if plan is None else plan
    target = config.target
    assert target is not None  # --follow-runs needs --target (checked before Spark starts)
    security = channel_security(config)
    orderers = several(target, "--target")
    results: list[JobResult] = []

    def table() -> list[runs.RunSpan]:
        return runs.table(get_stats(target, security=security, barrier_log_limit=1))

    def orderers_table() -> list[runs.OrderersRun]:  # a run over several: begun at every one
        assert orderers is not None
        return runs.orderers_table([
            runs.table(get_stats(t, security=security, barrier_log_limit=1)) for t in orderers
        ])  # fmt: skip

    def done(number: int) -> bool:
        return files.exists(spark, Layout.of(config, str(number)).summary)

    with runs.StopSignal() as stop:

        def build(span: runs.RunSpan | runs.OrderersRun) -> bool:
            layout = Layout.of(config, str(span.run))
            started = time.monotonic()
            batches, end = stream(
                spark, config, glom, layout, span, stop.requested, plan, board
            )
            if end is None:
                return False
            if isinstance(span, runs.RunSpan):
                offsets: dict[str, Any] = {"run_offsets": {"start": span.start_offset, "end": end}}
            else:  # each orderer's offsets of the run, and where it ends in the merged stream
                try:
                    ended = next(r for r in orderers_table() if r.run == span.run)
                except ServiceUnavailable:  # only the summary's ends: the begun run's then
                    ended = span
                offsets = {"run_offsets": {"start": list(ended.starts), "end": list(ended.ends),
                                           "merged_end": end}}
            built = time.monotonic() - started
            results.append(
                _finish(spark, config, glom, layout, batches, built, offsets, plan=plan)
            )
            return True

        if orderers is not None:
            runs.follow(
                orderers_table, done, build, until=config.until_run, stopped=stop.requested,
                poll=config.poll,
            )  # fmt: skip
        else:
            runs.follow(
                table, done, build, until=config.until_run, stopped=stop.requested,
                poll=config.poll,
            )  # fmt: skip
    return results


def _finish(
    spark: Any,
    config: JobConfig,
    glom: GlomConfig,
    layout: Layout,
    batches: int,
    built: float,
    extra: dict[str, Any] | None = None,
    *,
    plan: Plan | None = None,
) -> JobResult:
    """The run's summary (with ``extra``) and report, from its events as written."""
    from orderer.spark.output.report import write_report
    from orderer.spark.output.summary import SUMMARY_SCHEMA, summarize
    from orderer.spark.stages.stage_histograms import add_stage_results

    if not files.exists(spark, layout.events):  # no fragment: an empty run all the same
        files.make_directory(spark, layout.events)
    if config.format is OutputFormat.NSCLDAQ:  # ring items hold no offsets: the sink's index
        sink = NscldaqSink(spark, layout.events, config.glom_source_id)
        sink.drop_uncommitted()
        events = sink.summary_rows(SUMMARY_SCHEMA)
    else:
        if config.target:
            files.drop_uncommitted(spark, layout.events, SUMMARY_SCHEMA, config.format.value)
        # the run's directory alone (a streamed run's sink log says which files are committed)
        events = spark.read.format(config.format.value).schema(SUMMARY_SCHEMA).load(layout.events)
    glom_info = {
        "dt": glom.dt,
        "max_fragments": glom.max_fragments,
        "timestamp_policy": str(glom.timestamp_policy),
    }
    summary = summarize(events, run=layout.run, tick_rate=config.tick_rate, glom=glom_info)
    summary.data["build_seconds"] = round(built, 3)
    summary.data["micro_batches"] = batches
    summary.data["events_path"] = layout.events
    if plan is not None:
        add_stage_results(spark, plan, config.output.rstrip("/"), summary)
    summary.data.update(extra or {})

    local = files.local(layout.run_dir)
    with tempfile.TemporaryDirectory() as scratch:
        base = local if local is not None else Path(scratch)
        base.mkdir(parents=True, exist_ok=True)
        summary_file = base / "summary.json"
        summary_file.write_text(json.dumps(summary.as_dict(), indent=2), encoding="utf-8")
        write_report(summary, base / "report")
        if local is None:
            files.publish(spark, summary_file, layout.summary)
            files.publish(spark, base / "report", layout.report)
    result = JobResult(
        summary=summary.as_dict(),
        events_path=layout.events,
        summary_path=layout.summary,
        report_path=f"{layout.report}/index.html",
        batches=batches,
    )
    if not config.quiet:
        print(json.dumps(summary.as_dict(), indent=2))
        print(f"events:  {result.events_path}")
        print(f"summary: {result.summary_path}")
        print(f"report:  {result.report_path}")
    return result


def create_session(master: str | None, app: str = "evb-spark-job") -> Any:
    """The job's SparkSession (spark-submit's master when it set one, else ``master`` or
    ``local[2]``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    builder = SparkSession.builder.appName(app)
    if master or not conf.contains("spark.master"):
        builder = builder.master(master or "local[2]")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not conf.contains("spark.sql.shuffle.partitions"):  # the job shuffles nothing big
        builder = builder.config("spark.sql.shuffle.partitions", "4")
    return builder.getOrCreate()


def _reach_orderer(target: str, config: JobConfig) -> None:
    """One GetStats before Spark starts: a wrong address, a server that is down or a refused
    token ends in one line within ``--connect-timeout`` instead of a failed streaming query
    after the JVM's start. (Once running, the data source waits for a restarting orderer up to
    its ``reconnectTimeout``.) Several targets: each one's, and each must be the orderer of its
    place in the list, as the source client checks them; one orderer of several alone is
    refused (ConfigError)."""
    from orderer.client import get_stats
    from orderer.spark.source.sliced_reads import check_targets, several

    orderers = several(target, "--target")
    if orderers is not None:  # a run over several: each its role, in order (ConfigError)
        check_targets(orderers, channel_security(config), config.connect_timeout)
        return
    stats = get_stats(
        target,
        barrier_log_limit=1,
        connect_timeout=config.connect_timeout,
        security=channel_security(config),
    )
    if stats.slicing.sliced:  # one orderer of several alone would be a part of the run
        raise ConfigError(
            "--target", target, f"is orderer {stats.slicing.index} of "
            f"{stats.slicing.orderers}: give every orderer's address, in their order "
            "(--target a:50051,b:50051,c:50051)"
        )


def check_stages_order(spark: Any, config: JobConfig, plan: Plan | None = None) -> int:
    """``--check-order``: 0 when every stage's declaration held, 1 naming one that did not."""
    from orderer.spark.source.datasource import register

    register(spark)
    glom = glom_config(config)
    plan = stages_plan(config) if plan is None else plan
    assert plan is not None  # stages_plan refuses --check-order without --stages
    fragments = config.max_fragments_per_trigger or CHECK_FRAGMENTS

    def read(partitions: int) -> Any:
        reader = (
            spark.read.format("evb")
            .options(**glom_options(glom))
            .option("numPartitions", partitions)
            .option("output", "events")
            .option("endingOffset", fragments)
        )
        if config.target is not None:
            return reader.option("target", config.target).options(
                **security_options(config)
            ).load()
        return reader.option("path", str(config.path)).load()

    events, checks = check_order(spark, plan, read, config.partitions)
    text, good = report(events, checks)
    print(text)
    return 0 if good else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``evb spark-job``: exit status 0; 2 for bad arguments or no usable Java, in one line
    naming the flag or saying what to install, and 3 for an orderer that cannot be reached, each
    before Spark starts; 1 on failure."""
    config = JobConfig.from_argv(argv)
    try:
        check_arguments(config)
        plan = stages_plan(config)  # the user's module, run once, before Spark starts
        if config.explain:  # the plan alone, without Spark
            assert plan is not None  # stages_plan refuses --explain without --stages
            print(plan.explain(config.partitions))
            return 0
    except ConfigError as error:
        missing = error.value is None  # a flag left out: nothing to show of it
        print(f"evb spark-job: {error.parameter}: {error.why}" if missing else
              f"evb spark-job: {error}", file=sys.stderr)
        return 2
    problem = java_problem()
    if problem is not None:
        print(f"evb spark-job: {problem}", file=sys.stderr)
        return 2
    page = None
    if config.ui is not None:  # bound before Spark starts: a port in use is one line
        try:
            page = LivePage(config.ui, Board(plan))
        except ConfigError as error:
            print(f"evb spark-job: {error}", file=sys.stderr)
            return 2
    try:
        return _main(config, plan, page)
    finally:
        if page is not None:
            page.close()


def _main(config: JobConfig, plan: Plan | None, page: LivePage | None) -> int:
    """The job once its arguments were checked (and the live page's port bound)."""
    if config.target is not None:
        try:
            _reach_orderer(config.target, config)
        except ServiceUnavailable as error:
            print(f"evb spark-job: orderer unavailable: {error}", file=sys.stderr)
            return 3
        except ConfigError as error:  # orderers that are not one run's, in their order
            print(f"evb spark-job: {error}", file=sys.stderr)
            return 2
    board = None
    if page is not None:
        page.start()
        board = page.board
        print(f"evb spark-job: live page at {page.url}", file=sys.stderr, flush=True)
    spark = create_session(config.master)
    try:
        if config.check_order:
            return check_stages_order(spark, config, plan)
        if config.follow_runs:
            follow_runs(spark, config, plan, board)
        else:
            run(spark, config, plan, board)
    except ConfigError as error:  # seen only once Spark reads the output (a resumed run)
        print(f"evb spark-job: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a user's stage failed: its one line names it
        failed = stage_failure(str(error))
        if failed is None:
            raise
        print(f"evb spark-job: {failed}; the micro-batch was not committed: fix the stage and"
              " run the job again, it resumes there", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
