"""The Spark job's configuration (``evb spark-job``): :class:`JobConfig`, its command line
(:func:`build_parser`, :meth:`JobConfig.from_argv`) and the arguments that give it back
(:meth:`JobConfig.to_argv`).

Why one place: the job reads its flags, the live demo runs the job in process, and the operator
writes the SparkApplication's arguments. Each of them holds a JobConfig, and the only arguments
any of them builds are :meth:`JobConfig.to_argv`'s, which the job's own parser reads back into
the same JobConfig (a property test holds it), so the operator cannot give a flag the job does
not know or a value it would read otherwise.

Why here and not in :mod:`orderer.spark`: the operator may not import the Spark job, and nothing
here imports pyspark. What the flags mean once Spark runs (the checks that need the file system,
the event building, the layout of the output) is :mod:`orderer.spark.job`'s. The timestamp
policy is event building's own (:class:`orderer.building.config.TimestampPolicy`, beside the rule
that applies it); it is named here too, with the configuration whose field it types, so the
operator takes both from the one module it may use.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orderer.building.config import TimestampPolicy
from orderer.flags.argv import command_arguments
from orderer.wire.options import DEFAULT_CONNECT_TIMEOUT, add_security_arguments

__all__ = [
    "DEFAULT_GLOM_SOURCE_ID",
    "JobConfig",
    "OutputFormat",
    "TimestampPolicy",
    "build_parser",
]

DEFAULT_GLOM_SOURCE_ID = 0
"""glom's ``--sourceid`` default: the source id in the body header of the events it builds."""


class OutputFormat(enum.StrEnum):
    """Output formats, as the EventBuilder CRD allows (spec.spark.output.format); nscldaq: ring
    items as NSCLDAQ's glom writes them (:mod:`orderer.spark.nscldaq`)."""

    PARQUET = "parquet"
    JSON = "json"
    NSCLDAQ = "nscldaq"


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Every flag of ``evb spark-job``, typed; the defaults are the parser's (it takes them
    from here). ``output`` and ``checkpoint`` are strings: a Hadoop URI is allowed there."""

    output: str
    """The output directory or Hadoop URI (``--output``)."""
    target: str | None = None
    """A live orderer, HOST:PORT, read as a stream (``--target``); else ``path``. A comma list:
    the orderers of a run over several, in their order."""
    path: Path | None = None
    """A finished run's data directory, read at once (``--path``); a comma list: the data
    directories of a run over several orderers, in their order."""
    dt: int | None = None
    no_build: bool = False
    max_fragments: int = 1000
    timestamp_policy: TimestampPolicy = TimestampPolicy.EARLIEST
    format: OutputFormat = OutputFormat.PARQUET
    glom_source_id: int = DEFAULT_GLOM_SOURCE_ID
    run: str | None = None
    checkpoint: str | None = None
    follow_runs: bool = False
    until_run: int | None = None
    partitions: int = 2
    max_fragments_per_trigger: int | None = None
    trigger_seconds: float = 0.0
    consumer: str = "evb-spark-job"
    tick_rate: float = 1e8
    master: str | None = None
    poll: float = 1.0
    quiet: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    token_file: str | None = None
    tls: bool = False
    stages: Path | None = None
    """The user's analysis stages, a Python file (:mod:`orderer.stages`)."""
    explain: bool = False
    """Print the stages' plan and exit, without Spark."""
    check_order: bool = False
    """Run the stages twice over the run's first fragments and name a stage declared
    order-insensitive whose results differ; then exit."""
    ui: str | None = None
    """Serve the live page at ``[HOST:]PORT`` (loopback when no host is given): the run's
    figures and every histogram the job draws, updated after each micro-batch."""

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> JobConfig:
        """The configuration of :func:`build_parser`'s result (its names are the fields')."""
        values = {field.name: getattr(args, field.name) for field in dataclasses.fields(cls)}
        values["timestamp_policy"] = TimestampPolicy(values["timestamp_policy"])
        values["format"] = OutputFormat(values["format"])
        return cls(**values)

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None) -> JobConfig:
        """The configuration of a command line (argparse's exit status 2 on a bad one)."""
        return cls.from_namespace(build_parser().parse_args(argv))

    def to_argv(self) -> list[str]:
        """The arguments that give this configuration back (``from_argv(c.to_argv()) == c``
        where no ``EVB_TLS_*``/``EVB_TOKEN_FILE`` variable says otherwise: an unset security
        file is left to them, as in the operator's pods). Every other value is written out,
        defaults included, so that a job whose defaults changed still reads this one."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return command_arguments(None, build_parser(), values, defaults=True)


_DEFAULTS = JobConfig(output="")
"""The parser's defaults, as the configuration's."""


def build_parser() -> argparse.ArgumentParser:
    """The ``evb spark-job`` parser; :meth:`JobConfig.from_namespace` takes its result."""
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
    where.add_argument(
        "--target",
        metavar="HOST:PORT",
        help="a live orderer: read it as a stream; a run over several orderers (evb serve "
        "--orderers N): all of them, in their order, HOST:PORT,HOST:PORT,... (docs/scale-out.md)",
    )
    where.add_argument(
        "--path",
        type=Path,
        metavar="DIR",
        help="a finished run's data directory (evb serve --data-dir): read its ordered log at "
        "once; a run over several orderers: their data directories in their order, DIR,DIR,...",
    )
    parser.add_argument(
        "--dt",
        type=int,
        metavar="TICKS",
        help="glom window in timestamp ticks (required unless --no-build)",
    )
    parser.add_argument("--no-build", action="store_true", help="one event per fragment")
    _valued(
        parser, "--max-fragments", int, "N", _DEFAULTS.max_fragments,
        "glom's --maxfragments: at most N+1 fragments per event; 0: one per event",
    )
    parser.add_argument(
        "--timestamp-policy",
        choices=[policy.value for policy in TimestampPolicy],
        default=_DEFAULTS.timestamp_policy.value,
        help="timestamp of a built event, as NSCLDAQ's glom: earliest = its first fragment's in "
        "stream order (GLOM_TIMESTAMP_FIRST), latest = its last fragment's "
        "(GLOM_TIMESTAMP_LAST), average = the integer mean (default: %(default)s)",
    )
    parser.add_argument(
        "--output", required=True, metavar="DIR|URI", help="output directory or Hadoop URI"
    )
    parser.add_argument(
        "--format",
        choices=[output_format.value for output_format in OutputFormat],
        default=_DEFAULTS.format.value,
        help="parquet or json: event rows; nscldaq: one PHYSICS_EVENT ring item per event, as "
        "NSCLDAQ's glom writes them, in files RUN/<batch>-<partition>.evt that concatenate in "
        "offset order (default: %(default)s)",
    )
    _valued(
        parser,
        "--glom-source-id",
        int,
        "N",
        _DEFAULTS.glom_source_id,
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
    parser.add_argument(
        "--follow-runs",
        action="store_true",
        help="--target: build every run of the orderer's run table, one after another, each in "
        "OUTPUT/events/run=NUMBER and OUTPUT/runs/NUMBER (its summary and report once it ended "
        "and was read to its end); keep going after a run ends, until SIGTERM or --until-run",
    )
    parser.add_argument(
        "--until-run",
        type=int,
        metavar="N",
        help="--follow-runs: stop once every run up to run N is built",
    )
    _valued(parser, "--partitions", int, "N", _DEFAULTS.partitions, "partitions per micro-batch")
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
        _DEFAULTS.trigger_seconds,
        "micro-batch interval; 0: Spark's default, as soon as the last one is done",
    )
    _valued(parser, "--consumer", str, "NAME", _DEFAULTS.consumer, "name of the commits")
    _valued(parser, "--tick-rate", float, "HZ", _DEFAULTS.tick_rate, "timestamp ticks per second",
            "g")
    parser.add_argument(
        "--master", metavar="URL", help="Spark master (default: spark-submit's, else local[2])"
    )
    _valued(parser, "--poll", float, "S", _DEFAULTS.poll, "seconds between end-of-run checks")
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    parser.add_argument(
        "--stages",
        type=Path,
        metavar="FILE.py",
        help="analysis stages to run on the built events (orderer.stages); their results go "
        "to OUTPUT/stages/STAGE/run=RUN/",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print how the --stages run (class, order kept, parallelism) and exit",
    )
    parser.add_argument(
        "--check-order",
        action="store_true",
        help="run the --stages twice over the run's first fragments (in order in one partition, "
        "and dealt into several) and name a stage declared order-insensitive whose results "
        "differ; exit status 1 if one does",
    )
    parser.add_argument(
        "--ui",
        metavar="[HOST:]PORT",
        help="serve a live page of the run at http://HOST:PORT/ (HOST: 127.0.0.1 unless given; "
        "0.0.0.0 for every interface): its rates, late fraction, micro-batches, stages and every "
        "histogram the job draws, updated after each micro-batch; each histogram also as JSON",
    )
    _valued(
        parser,
        "--connect-timeout",
        float,
        "S",
        _DEFAULTS.connect_timeout,
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
