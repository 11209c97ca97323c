"""The evb Spark job: ordered stream -> built events (Parquet or JSON, one directory per run) ->
run summary (JSON) and report (PNG plots + HTML), per run.

Run as ``evb spark-job ...`` or as the SparkApplication's main file
(``spark-submit local:///opt/evb/orderer/spark/job.py --target ... --dt ...``). With
``--target`` it reads the live orderer as a stream (:mod:`orderer.spark.source`), writes the
events with Spark's file sink (exactly once: the checkpoint and the sink's log), and finishes by
itself once the run ended and everything was consumed (``GetStats.run_ended``; the
SparkApplication relies on that). With ``--path`` it reads a finished run's log directory in one
batch. Either way the source builds the events where it reads them (``output`` = ``events``:
:func:`orderer.spark.glom.glom_batches` in each partition's ``read()`` on the executors, one
Python step per fragment), and it cuts partitions only where events start, so the events are the
sequential glom's.

Output layout under ``--output`` (:class:`Layout`); several runs share one output, and a run
writes only its own directories::

    events/run=<run>/         the run's events (Parquet, or JSON lines); read OUTPUT/events for
                              every run, with ``run`` as a partition column. With --format
                              nscldaq: ring items, <batch>-<partition>.evt in offset order
                              (:mod:`orderer.spark.nscldaq`)
    runs/<run>/summary.json   the run summary
    runs/<run>/report/        rates.png, lateness.png, multiplicity.png, dt_spectrum.png,
                              coincidences.png, index.html, and the histograms as data:
                              dt_spectrum.pkl, coincidences.pkl (boost-histogram, pickled)
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

Bad arguments are refused before Spark starts (a JVM start is seconds): the flag and the value
in one line, exit status 2; so is a missing Java (Spark needs Java 17 or later).

With ``--follow-runs`` the job follows the orderer from run to run (:mod:`orderer.spark.runs`):
each run of its run table is a run of the layout above, named by its number (``events/run=8/``,
``runs/8/``), built by a query of its own over exactly its offsets, its summary and report
written once it ended and was read to its end; the job goes on until SIGTERM or ``--until-run``.

The SparkSession is created only in :func:`main`; :func:`run` and :func:`follow_runs` take one
(the tests share theirs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orderer.errors import ConfigError, ServiceUnavailable
from orderer.spark import files, runs
from orderer.spark.glom import GlomConfig
from orderer.spark.nscldaq import DEFAULT_GLOM_SOURCE_ID, NscldaqSink, check_glom_source_id
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT, add_security_arguments

__all__ = [
    "JobResult", "Layout", "build_parser", "check_arguments", "follow_runs", "main", "run",
    "writer_options",
]

FORMATS = ("parquet", "json", "nscldaq")

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
    :data:`UNIQUE_COLUMNS` that was half of every executor's CPU (``make bench``); written plain
    from the start, the files hold the same encodings. The other columns (sources, barrier
    types, multiplicities) keep their dictionaries."""
    if output_format != "parquet":
        return {}
    return {f"parquet.enable.dictionary#{column}": "false" for column in UNIQUE_COLUMNS}

"""Output formats, as the EventBuilder CRD allows (spec.spark.output.format); nscldaq: ring
items as NSCLDAQ's glom writes them (:mod:`orderer.spark.nscldaq`)."""

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
"""A run name: a directory name and a partition value that need no quoting (a Kubernetes
resource name is one)."""

JAVA_RELEASE = 17
"""The Java release Spark 4 needs at least."""


@dataclass
class JobResult:
    summary: dict[str, Any]
    events_path: str
    summary_path: str
    report_path: str
    batches: int


@dataclass(frozen=True)
class Layout:
    """Where one run's results live under the output (the module docstring has the tree)."""

    output: str
    run: str
    events: str = field(init=False)
    """The run's events: a partition of ``OUTPUT/events``."""
    run_dir: str = field(init=False)
    """The run's own directory (``OUTPUT/runs/RUN``), which holds the rest."""
    summary: str = field(init=False)
    report: str = field(init=False)
    building: str = field(init=False)
    """How a streamed run builds its events, recorded at its start."""
    checkpoint: str = field(init=False)
    """The streaming query's checkpoint unless ``--checkpoint`` says otherwise."""

    def __post_init__(self) -> None:
        run_dir = f"{self.output}/runs/{self.run}"
        for name, path in (
            ("events", f"{self.output}/events/run={self.run}"),
            ("run_dir", run_dir),
            ("summary", f"{run_dir}/summary.json"),
            ("report", f"{run_dir}/report"),
            ("building", f"{run_dir}/building.json"),
            ("checkpoint", f"{run_dir}/checkpoint"),
        ):
            object.__setattr__(self, name, path)  # frozen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evb spark-job",
        description="Build events from the ordered stream with Spark and write them with a run "
        "summary and a report. Output, per run: OUTPUT/events/run=RUN/ (the events), "
        "OUTPUT/runs/RUN/summary.json, OUTPUT/runs/RUN/report/index.html and, streaming, "
        "OUTPUT/runs/RUN/checkpoint/. A run writes only its own directories: doing a run again "
        "with --path replaces it; with --target it resumes from its checkpoint if there is one, "
        "with the event building it began with (else it starts afresh and replaces it).",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", metavar="HOST:PORT", help="a live orderer: read it as a stream")
    where.add_argument(
        "--path",
        type=Path,
        metavar="DIR",
        help="a finished run's data directory (evb serve --data-dir): read its ordered log at once",
    )
    parser.add_argument(
        "--dt",
        type=int,
        metavar="TICKS",
        help="glom window in timestamp ticks (required unless --no-build)",
    )
    parser.add_argument("--no-build", action="store_true", help="one event per fragment")
    _valued(
        parser, "--max-fragments", int, "N", 1000,
        "glom's --maxfragments: at most N+1 fragments per event; 0: one per event",
    )
    parser.add_argument(
        "--timestamp-policy",
        choices=["earliest", "latest", "average"],
        default="earliest",
        help="timestamp of a built event, as NSCLDAQ's glom: earliest = its first fragment's in "
        "stream order (GLOM_TIMESTAMP_FIRST), latest = its last fragment's "
        "(GLOM_TIMESTAMP_LAST), average = the integer mean (default: %(default)s)",
    )
    parser.add_argument(
        "--output", required=True, metavar="DIR|URI", help="output directory or Hadoop URI"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="parquet",
        help="parquet or json: event rows; nscldaq: one PHYSICS_EVENT ring item per event, as "
        "NSCLDAQ's glom writes them, in files RUN/<batch>-<partition>.evt that concatenate in "
        "offset order (default: %(default)s)",
    )
    _valued(
        parser,
        "--glom-source-id",
        int,
        "N",
        DEFAULT_GLOM_SOURCE_ID,
        "--format nscldaq: source id in the body header of every built event, as glom's "
        "--sourceid",
    )
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="run name: the run's directories are OUTPUT/events/run=RUN and OUTPUT/runs/RUN "
        "(default: the EventBuilder's name from --target, else 'run')",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint location; with --follow-runs, DIR/NUMBER for each run (default: "
        "OUTPUT/runs/RUN/checkpoint)",
    )
    runs.add_arguments(parser)
    _valued(parser, "--partitions", int, "N", 2, "partitions per micro-batch")
    parser.add_argument(
        "--max-fragments-per-trigger",
        type=int,
        metavar="N",
        help="cap on a micro-batch (whole events)",
    )
    _valued(
        parser,
        "--trigger-seconds",
        float,
        "S",
        0.0,
        "micro-batch interval; 0: Spark's default, as soon as the last one is done",
    )
    _valued(parser, "--consumer", str, "NAME", "evb-spark-job", "name of the commits")
    _valued(parser, "--tick-rate", float, "HZ", 1e8, "timestamp ticks per second", "g")
    parser.add_argument(
        "--master", metavar="URL", help="Spark master (default: spark-submit's, else local[2])"
    )
    _valued(parser, "--poll", float, "S", 1.0, "seconds between end-of-run checks")
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    _valued(
        parser,
        "--connect-timeout",
        float,
        "S",
        DEFAULT_CONNECT_TIMEOUT,
        "seconds the orderer (--target) may take to answer before the job starts; the job "
        "gives up with exit status 3 naming the address",
    )
    # each defaults to the variable the operator sets in the SparkApplication's pods; strings,
    # as the evb data source takes its options
    add_security_arguments(
        parser, "security (a TLS orderer; the files must exist on driver and executors)", str
    )
    return parser


def _valued(
    parser: argparse.ArgumentParser,
    option: str,
    kind: Callable[[str], Any],
    metavar: str,
    default: object,
    what: str,
    shown: str = "s",
) -> None:
    """A flag that takes a value, with its default at the end of its help (``%(default)s``, or
    ``%(default)g`` with ``shown="g"``)."""
    help_text = f"{what} (default: %(default){shown})"
    parser.add_argument(option, type=kind, metavar=metavar, default=default, help=help_text)


def _security_options(args: argparse.Namespace) -> dict[str, str]:
    """The job's security flags as options of the evb data source."""
    given = {
        "tlsCa": args.tls_ca,
        "tlsCert": args.tls_cert,
        "tlsKey": args.tls_key,
        "tokenFile": args.token_file,
        "tls": "true" if args.tls else None,
    }
    return {name: str(value) for name, value in given.items() if value}


def _channel_security(args: argparse.Namespace) -> Any:
    """The client's ChannelSecurity of the job's security flags, built as the data source
    builds it from the same options (None: plaintext)."""
    from orderer.spark.source import channel_security

    return channel_security(tuple(_security_options(args).items()))


def _glom(args: argparse.Namespace) -> Any:
    """The glom configuration of the flags; a bad value names its flag."""
    if args.max_fragments < 0:  # glom's --maxfragments: 0 is one fragment per event
        raise ConfigError("--max-fragments", args.max_fragments, "must be an integer >= 0")
    if args.no_build:
        return GlomConfig(None, args.max_fragments, args.timestamp_policy)
    if args.dt is None:
        raise ConfigError("--dt", None, "is required (or --no-build)")
    if not 0 <= args.dt < 2**63:
        raise ConfigError("--dt", args.dt, "must be an integer number of ticks >= 0")
    return GlomConfig(args.dt, args.max_fragments, args.timestamp_policy)


def _run_name(args: argparse.Namespace) -> str:
    if args.run:
        return str(args.run)
    if args.target:  # <name>-orderer.<namespace>.svc:50051, as the operator names it
        host = args.target.rsplit(":", 1)[0].split(".")[0]
        name = host.removesuffix("-orderer")
        if name and not re.fullmatch(r"[\d\[\]:]+|localhost", name):
            return name
    return "run"


def _check_writable(flag: str, uri: str) -> None:
    """A local output location must be a directory, or creatable where it would be."""
    local = files.local(uri)
    if local is None:
        return  # a Hadoop URI: its file system says, once Spark runs
    if local.exists() and not local.is_dir():
        raise ConfigError(flag, uri, "exists and is not a directory")
    parent = local
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(flag, uri, f"cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(flag, uri, f"cannot be written: {parent} is not writable")


def check_arguments(args: argparse.Namespace) -> None:
    """Every mistake in the flags that can be seen without Spark, as a ConfigError naming the
    flag: the job refuses them before it spends seconds starting a JVM."""
    from orderer.spark.source import segment_files

    _glom(args)
    check_glom_source_id(args.glom_source_id)
    runs.check_arguments(args)
    if args.run is not None and not RUN_NAME.fullmatch(args.run):
        raise ConfigError(
            "--run", args.run, "must be letters, digits, '.', '_' or '-', starting with a "
            "letter or a digit (it names directories)"
        )
    for flag, value, low in (
        ("--partitions", args.partitions, 1),
        ("--max-fragments-per-trigger", args.max_fragments_per_trigger, 1),
    ):
        if value is not None and value < low:
            raise ConfigError(flag, value, f"must be an integer >= {low}")
    for flag, value, positive in (
        ("--trigger-seconds", args.trigger_seconds, False),
        ("--tick-rate", args.tick_rate, True),
        ("--poll", args.poll, True),
        ("--connect-timeout", args.connect_timeout, True),
    ):
        if not math.isfinite(value) or not (value > 0 if positive else value >= 0):
            raise ConfigError(flag, value, "must be a number " + ("> 0" if positive else ">= 0"))
    if args.path is not None:
        path = Path(args.path)
        if not path.exists():
            raise ConfigError("--path", str(path), "does not exist")
        if not path.is_dir():
            raise ConfigError("--path", str(path), "is not a directory")
        try:
            segment_files(path)
        except ConfigError:
            raise ConfigError(
                "--path", str(path), "is not an evb data directory: it holds no ordered log "
                "(ordered/ordered-*.arrow, as evb serve --data-dir writes)"
            ) from None
    if args.target is not None:
        host, _, port = args.target.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("--target", args.target, "must be HOST:PORT")
    if not str(args.output).strip():
        raise ConfigError("--output", args.output, "must name a directory or a Hadoop URI")
    _check_writable("--output", str(args.output))
    if args.checkpoint:
        _check_writable("--checkpoint", str(args.checkpoint))
    for flag, value in (
        ("--tls-ca", args.tls_ca),
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
        ("--token-file", args.token_file),
    ):
        if value and not os.access(value, os.R_OK):
            raise ConfigError(flag, str(value), "is not a readable file")


def java_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why Spark could not start its JVM here (no Java, or one older than Spark needs), or
    None. Spark finds Java the same way: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit started this: its JVM runs
        return None
    how = (
        f"Spark needs Java {JAVA_RELEASE} or later: install it (e.g. apt-get install "
        f"openjdk-{JAVA_RELEASE}-jre-headless) and put its java on the PATH, or set JAVA_HOME "
        f"to its directory (e.g. JAVA_HOME=/usr/lib/jvm/java-{JAVA_RELEASE}-openjdk-amd64)"
    )
    home = environ.get("JAVA_HOME")
    if home:
        java = str(Path(home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME={home} has no bin/java; {how}"
    else:
        found = shutil.which("java", path=environ.get("PATH", os.defpath))
        if found is None:
            return f"no Java found (java is not on the PATH and JAVA_HOME is not set); {how}"
        java = found
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, env=environ
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{java} -version failed ({error}); {how}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    if match is None:
        return None  # an unusual banner: let Spark try
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    if major < JAVA_RELEASE:
        return f"{java} is Java {major}; {how}"
    return None


BUILDING_FLAGS = {
    "dt": "--dt",
    "maxFragments": "--max-fragments",
    "timestampPolicy": "--timestamp-policy",
    "format": "--format",
    "glomSourceId": "--glom-source-id",
}
"""The settings a streamed run records at its start (``runs/RUN/building.json``), by flag."""


def _check_resumed_building(spark: Any, layout: Layout, building: dict[str, str]) -> None:
    """Why: a run resumed from its checkpoint with another ``--dt`` (or policy, or format)
    would hold events built two ways, and nothing would tell them apart."""
    if not files.exists(spark, layout.building):  # a run started before the record existed
        return
    began = _in_glom_terms(json.loads(files.read_text(spark, layout.building)))
    for key, flag in BUILDING_FLAGS.items():
        if began.get(key) != building.get(key):
            raise ConfigError(
                flag,
                building.get(key),
                f"run {layout.run} began with {flag} {began.get(key, '(none)')} and resumes "
                "from its checkpoint, so it must build its events the same way: give the same "
                f"value, another --run, or remove {layout.run_dir} and {layout.events} to do "
                "the run again",
            )


MAX_FRAGMENTS_MEANING = "glom"
"""Recorded with a run's building: ``maxFragments`` N is glom's ``--maxfragments`` N (events of
up to N + 1 fragments). A record without it is of a run begun when N was the most fragments of
an event."""


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


def _stream(
    spark: Any,
    args: argparse.Namespace,
    glom: Any,
    layout: Layout,
    span: runs.RunSpan | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> tuple[int, int | None]:
    """Stream the orderer into ``layout`` until the run ended and was read to its end: the
    whole output until ``run_ended``, or with ``span`` that run of the run table alone.
    Returns (micro-batches, the offset read to; None: stopped before the run's end)."""
    from orderer.client import commit, get_stats

    security = _channel_security(args)
    checkpoint = args.checkpoint or layout.checkpoint
    if span is not None and args.checkpoint:
        checkpoint = f"{str(args.checkpoint).rstrip('/')}/{span.run}"
    building = _building(args, glom)
    if files.exists(spark, checkpoint):  # a restarted run resumes: it must build as it began
        _check_resumed_building(spark, layout, building)
    else:  # a new run, not a restarted one: replace the old
        files.remove(spark, layout.events)
        files.remove(spark, layout.run_dir)
    files.write_text(spark, layout.building, json.dumps(building, sort_keys=True))

    reader = (
        spark.readStream.format("evb")
        .option("target", args.target)
        .options(**glom.to_options())
        .option("numPartitions", args.partitions)
        .option("consumer", args.consumer)
        .options(**_security_options(args))
    )
    if args.max_fragments_per_trigger:
        reader = reader.option("maxFragmentsPerTrigger", args.max_fragments_per_trigger)
    if span is not None:  # this run's offsets alone: its last event closes at its end
        reader = reader.option("run", span.run).option("startingOffset", span.start)
    events = reader.option("output", "events").load()  # built where read: one Python step
    writer = events.writeStream.option("checkpointLocation", checkpoint).queryName(
        f"evb-{layout.run}"
    )
    if args.format == "nscldaq":  # no file sink writes ring items: batch-id-named files
        writer = writer.foreachBatch(NscldaqSink(spark, layout.events, args.glom_source_id))
    else:  # the run's own directory, with its own sink log: the layout partitionBy("run") gives
        writer = _events_writer(writer, args.format).option("path", layout.events)
    if args.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    query = writer.start()
    read_to: int | None = None
    try:
        while not stopped():  # until the run ended; then read to its end and stop
            if query.awaitTermination(args.poll):
                break
            try:
                stats = get_stats(args.target, security=security, barrier_log_limit=1)
            except ServiceUnavailable as error:  # the orderer restarts: the query retries too
                print(f"evb spark-job: orderer unavailable, waiting: {error}", file=sys.stderr)
                continue
            if span is None:
                run_end = int(stats["next_offset"]) if stats["run_ended"] else None
            else:
                run_end = runs.run_end(stats["runs"], span.run)
            if run_end is None:
                continue
            query.processAllAvailable()
            # Spark commits a batch's end to the source when it plans the next batch, so
            # the last one is never committed: commit it here, or the finished job would
            # show a lag for ever and hold that much of the log from retention
            end = _end_offset(query.lastProgress)
            if span is not None and (span.start if end is None else end) < run_end:
                continue  # not read to the run's end yet
            if end is not None:
                commit(args.target, args.consumer, end, security=security)
            read_to = run_end if end is None else end
            break
    finally:
        batches = int(query.lastProgress["batchId"]) + 1 if query.lastProgress else 0
        query.stop()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"the streaming query failed: {failure}")
    return batches, read_to


def _events_writer(writer: Any, output_format: str) -> Any:
    """A batch or a streaming writer of events, in ``output_format`` with its options."""
    return writer.format(output_format).options(**writer_options(output_format))


def _building(args: argparse.Namespace, glom: Any) -> dict[str, str]:
    """What a streamed run records of its event building (BUILDING_FLAGS); glom's source id
    only where it is written (an older parquet run's record has none, and resumes)."""
    building = {
        **glom.to_options(),
        "maxFragmentsMeaning": MAX_FRAGMENTS_MEANING,
        "format": args.format,
    }
    if args.format == "nscldaq":
        building["glomSourceId"] = str(args.glom_source_id)
    return building


def _end_offset(progress: dict[str, Any] | None) -> int | None:
    """The offset after the last fragment a query's last batch read (its progress holds the
    source's end offset as the JSON of ``{"offset": n}``); None before any batch."""
    if not progress or not progress.get("sources"):
        return None
    end = progress["sources"][0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return int(end["offset"]) if isinstance(end, dict) and "offset" in end else None


def batch_events(spark: Any, args: argparse.Namespace, glom: Any) -> Any:
    """The events of a finished run's ordered log (``--path``), built where they are read."""
    return (
        spark.read.format("evb")
        .option("path", str(args.path))
        .options(**glom.to_options())
        .option("numPartitions", args.partitions)
        .option("output", "events")
        .load()
    )


def _batch(spark: Any, args: argparse.Namespace, glom: Any, layout: Layout) -> int:
    events = batch_events(spark, args, glom)
    # overwrite the run's partition only: the other runs' partitions are not touched
    if args.format == "nscldaq":  # one batch, number 0, through the streaming sink's writer
        files.remove(spark, layout.events)
        NscldaqSink(spark, layout.events, args.glom_source_id)(events, 0)
    else:
        _events_writer(events.write, args.format).mode("overwrite").save(layout.events)
    # the run's summary, report and checkpoint were the old one's
    files.remove(spark, layout.run_dir)
    return 1


def run(spark: Any, args: argparse.Namespace) -> JobResult:
    """Build the events, then write the summary and the report; returns where they are."""
    from orderer.spark.source import register

    register(spark)
    glom = _glom(args)
    layout = Layout(str(args.output).rstrip("/"), _run_name(args))
    started = time.monotonic()
    if args.target:
        batches, _ = _stream(spark, args, glom, layout)
    else:
        batches = _batch(spark, args, glom, layout)
    return _finish(spark, args, glom, layout, batches, time.monotonic() - started)


def follow_runs(spark: Any, args: argparse.Namespace) -> list[JobResult]:
    """``--follow-runs``: every run of the orderer's run table, one after another
    (:func:`orderer.spark.runs.follow`), until SIGTERM, a query that stopped, or
    ``--until-run``; returns the runs built, in order."""
    from orderer.client import get_stats
    from orderer.spark.source import register

    register(spark)
    glom = _glom(args)
    output = str(args.output).rstrip("/")
    security = _channel_security(args)
    results: list[JobResult] = []

    def table() -> list[runs.RunSpan]:
        return runs.table(get_stats(args.target, security=security, barrier_log_limit=1))

    def done(number: int) -> bool:
        return files.exists(spark, Layout(output, str(number)).summary)

    with runs.StopSignal() as stop:

        def build(span: runs.RunSpan) -> bool:
            layout = Layout(output, str(span.run))
            started = time.monotonic()
            batches, end = _stream(spark, args, glom, layout, span, stop.requested)
            if end is None:
                return False
            offsets = {"run_offsets": {"start": span.start, "end": end}}
            built = time.monotonic() - started
            results.append(_finish(spark, args, glom, layout, batches, built, offsets))
            return True

        runs.follow(
            table, done, build, until=args.until_run, stopped=stop.requested, poll=args.poll
        )
    return results


def _finish(
    spark: Any,
    args: argparse.Namespace,
    glom: Any,
    layout: Layout,
    batches: int,
    built: float,
    extra: dict[str, Any] | None = None,
) -> JobResult:
    """The run's summary (with ``extra``) and report, from its events as written."""
    from orderer.spark.report import write_report
    from orderer.spark.summary import SUMMARY_SCHEMA, summarize

    if not files.exists(spark, layout.events):  # no fragment: an empty run all the same
        files.make_directory(spark, layout.events)
    if args.format == "nscldaq":  # ring items hold no offsets: the sink's index of them
        sink = NscldaqSink(spark, layout.events, args.glom_source_id)
        sink.drop_uncommitted()
        events = sink.summary_rows(SUMMARY_SCHEMA)
    else:
        if args.target:
            files.drop_uncommitted(spark, layout.events, SUMMARY_SCHEMA, args.format)
        # the run's directory alone (a streamed run's sink log says which files are committed)
        events = spark.read.format(args.format).schema(SUMMARY_SCHEMA).load(layout.events)
    glom_info = {
        "dt": glom.dt,
        "max_fragments": glom.max_fragments,
        "timestamp_policy": str(glom.timestamp_policy),
    }
    summary = summarize(events, run=layout.run, tick_rate=args.tick_rate, glom=glom_info)
    summary.data["build_seconds"] = round(built, 3)
    summary.data["micro_batches"] = batches
    summary.data["events_path"] = layout.events
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
    if not args.quiet:
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


def _reach_orderer(args: argparse.Namespace) -> None:
    """One GetStats before Spark starts: a wrong address, a server that is down or a refused
    token ends in one line within ``--connect-timeout`` instead of a failed streaming query
    after the JVM's start. (Once running, the data source waits for a restarting orderer up to
    its ``reconnectTimeout``.)"""
    from orderer.client import get_stats

    get_stats(
        args.target,
        barrier_log_limit=1,
        connect_timeout=args.connect_timeout,
        security=_channel_security(args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``evb spark-job``: exit status 0; 2 for bad arguments or no usable Java, in one line
    naming the flag or saying what to install, and 3 for an orderer that cannot be reached, each
    before Spark starts; 1 on failure."""
    args = build_parser().parse_args(argv)
    try:
        check_arguments(args)
    except ConfigError as error:
        missing = error.value is None  # a flag left out: nothing to show of it
        print(f"evb spark-job: {error.parameter}: {error.why}" if missing else
              f"evb spark-job: {error}", file=sys.stderr)
        return 2
    problem = java_problem()
    if problem is not None:
        print(f"evb spark-job: {problem}", file=sys.stderr)
        return 2
    if args.target is not None:
        try:
            _reach_orderer(args)
        except ServiceUnavailable as error:
            print(f"evb spark-job: orderer unavailable: {error}", file=sys.stderr)
            return 3
    spark = create_session(args.master)
    try:
        if args.follow_runs:
            follow_runs(spark, args)
        else:
            run(spark, args)
    except ConfigError as error:  # seen only once Spark reads the output (a resumed run)
        print(f"evb spark-job: {error}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
