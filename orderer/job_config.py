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
the event building, the layout of the output) is :mod:`orderer.spark.driver.job`'s. The timestamp
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
from orderer.config import flag_help
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
    items as NSCLDAQ's glom writes them (:mod:`orderer.spark.output.nscldaq`)."""

    PARQUET = "parquet"
    JSON = "json"
    NSCLDAQ = "nscldaq"


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Every flag of ``evb spark-job``, typed; the defaults are the parser's (it takes them
    from here), and so are the helps (each field's text: :func:`~orderer.config.flag_help`).
    ``output`` and ``checkpoint`` are strings: a Hadoop URI is allowed there."""

    output: str
    """Output directory or Hadoop URI."""
    target: str | None = None
    """A live orderer: read it as a stream; a run over several orderers (``evb serve
    --orderers N``): all of them, in their order, HOST:PORT,HOST:PORT,... (docs/scale-out.md).

    Either this or ``--path``."""
    path: Path | None = None
    """A finished run's data directory (``evb serve --data-dir``): read its ordered log at once;
    a run over several orderers: their data directories in their order, DIR,DIR,..."""
    dt: int | None = None
    """Glom window in timestamp ticks (required unless ``--no-build``)."""
    no_build: bool = False
    """One event per fragment."""
    max_fragments: int = 1000
    """Glom's ``--maxfragments``: at most N+1 fragments per event; 0: one per event."""
    timestamp_policy: TimestampPolicy = TimestampPolicy.EARLIEST
    """Timestamp of a built event, as NSCLDAQ's glom: earliest = its first fragment's in stream
    order (GLOM_TIMESTAMP_FIRST), latest = its last fragment's (GLOM_TIMESTAMP_LAST), average =
    the integer mean."""
    format: OutputFormat = OutputFormat.PARQUET
    """Parquet or json: event rows; nscldaq: one PHYSICS_EVENT ring item per event, as NSCLDAQ's
    glom writes them, in files RUN/<batch>-<partition>.evt that concatenate in offset order."""
    glom_source_id: int = DEFAULT_GLOM_SOURCE_ID
    """``--format nscldaq``: source id in the body header of every built event, as glom's
    ``--sourceid``."""
    run: str | None = None
    """Run name: the run's directories are OUTPUT/events/run=RUN and OUTPUT/runs/RUN (default:
    the EventBuilder's name from ``--target``, else 'run')."""
    checkpoint: str | None = None
    """Checkpoint location; with ``--follow-runs``, DIR/NUMBER for each run (default:
    OUTPUT/runs/RUN/checkpoint)."""
    follow_runs: bool = False
    """``--target``: build every run of the orderer's run table, one after another, each in
    OUTPUT/events/run=NUMBER and OUTPUT/runs/NUMBER (its summary and report once it ended and
    was read to its end); keep going after a run ends, until SIGTERM or ``--until-run``."""
    until_run: int | None = None
    """``--follow-runs``: stop once every run up to run N is built."""
    partitions: int = 2
    """Partitions per micro-batch."""
    max_fragments_per_trigger: int | None = None
    """Cap on a micro-batch (whole events)."""
    trigger_seconds: float = 0.0
    """Micro-batch interval; 0: Spark's default, as soon as the last one is done."""
    consumer: str = "evb-spark-job"
    """Name of the commits.

    The consumer name under which the job commits at the orderer the offsets it has read, so
    that the orderer's retention keeps what it has not (``evb consumers`` lists it)."""
    tick_rate: float = 1e8
    """Timestamp ticks per second."""
    master: str | None = None
    """The Spark master (default: spark-submit's, else local[2])."""
    poll: float = 1.0
    """Seconds between end-of-run checks."""
    quiet: bool = False
    """Do not print the summary."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    """Seconds the orderer (``--target``) may take to answer before the job starts; the job
    gives up with exit status 3 naming the address."""
    tls_ca: str | None = None
    """PEM CA of the server's certificate: connect with TLS.

    Unset: the variable ``EVB_TLS_CA``, which the operator sets in the SparkApplication's
    pods, as it sets the others of the security flags."""
    tls_cert: str | None = None
    """PEM client certificate (mutual TLS).

    Unset: the variable ``EVB_TLS_CERT``."""
    tls_key: str | None = None
    """PEM key of the client certificate.

    Unset: the variable ``EVB_TLS_KEY``."""
    token_file: str | None = None
    """File holding the bearer token (TLS only).

    Unset: the variable ``EVB_TOKEN_FILE``, else the token itself in ``EVB_TOKEN``."""
    tls: bool = False
    """TLS with the system's CA certificates (implied by ``--tls-ca``)."""
    stages: Path | None = None
    """Analysis stages to run on the built events (:mod:`orderer.stages`); their results go to
    OUTPUT/stages/STAGE/run=RUN/.

    A Python file of the user's."""
    explain: bool = False
    """Print how the ``--stages`` run (class, order kept, parallelism) and exit, without Spark."""
    check_order: bool = False
    """Run the ``--stages`` twice over the run's first fragments (in order in one partition, and
    dealt into several) and name a stage declared order-insensitive whose results differ; exit
    status 1 if one does."""
    ui: str | None = None
    """Serve a live page of the run at http://HOST:PORT/ (HOST: 127.0.0.1 unless given; 0.0.0.0
    for every interface): its rates, late fraction, micro-batches, stages and every histogram
    the job draws, updated after each micro-batch; each histogram also as JSON."""

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
    where.add_argument("--target", metavar="HOST:PORT", help=_help("target"))
    where.add_argument("--path", type=Path, metavar="DIR", help=_help("path"))
    parser.add_argument("--dt", type=int, metavar="TICKS", help=_help("dt"))
    parser.add_argument("--no-build", action="store_true", help=_help("no_build"))
    _valued(parser, "--max-fragments", int, "N")
    parser.add_argument(
        "--timestamp-policy",
        choices=[policy.value for policy in TimestampPolicy],
        default=_DEFAULTS.timestamp_policy.value,
        help=_help("timestamp_policy") + " (default: %(default)s)",
    )
    parser.add_argument("--output", required=True, metavar="DIR|URI", help=_help("output"))
    parser.add_argument(
        "--format",
        choices=[output_format.value for output_format in OutputFormat],
        default=_DEFAULTS.format.value,
        help=_help("format") + " (default: %(default)s)",
    )
    _valued(parser, "--glom-source-id", int, "N")
    parser.add_argument("--run", metavar="NAME", help=_help("run"))
    parser.add_argument("--checkpoint", metavar="DIR", help=_help("checkpoint"))
    parser.add_argument("--follow-runs", action="store_true", help=_help("follow_runs"))
    parser.add_argument("--until-run", type=int, metavar="N", help=_help("until_run"))
    _valued(parser, "--partitions", int, "N")
    parser.add_argument(
        "--max-fragments-per-trigger",
        type=int,
        metavar="N",
        help=_help("max_fragments_per_trigger"),
    )
    _valued(parser, "--trigger-seconds", float, "S")
    _valued(parser, "--consumer", str, "NAME")
    _valued(parser, "--tick-rate", float, "HZ", "g")
    parser.add_argument("--master", metavar="URL", help=_help("master"))
    _valued(parser, "--poll", float, "S")
    parser.add_argument("--quiet", action="store_true", help=_help("quiet"))
    parser.add_argument("--stages", type=Path, metavar="FILE.py", help=_help("stages"))
    parser.add_argument("--explain", action="store_true", help=_help("explain"))
    parser.add_argument("--check-order", action="store_true", help=_help("check_order"))
    parser.add_argument("--ui", metavar="[HOST:]PORT", help=_help("ui"))
    _valued(parser, "--connect-timeout", float, "S")
    # each defaults to the variable the operator sets in the SparkApplication's pods; strings,
    # as the evb data source takes its options
    add_security_arguments(
        parser, "security (a TLS orderer; the files must exist on driver and executors)", str
    )
    _describe_security(parser)
    return parser


def _help(name: str) -> str:
    """The help of the flag of the field ``name``: its text's
    (:func:`~orderer.config.flag_help`)."""
    return flag_help(JobConfig, name)


def _describe_security(parser: argparse.ArgumentParser) -> None:
    """The security flags are every client's (:func:`~orderer.wire.options.add_security_arguments`,
    whose help says which variable each defaults to); the job's say what its fields' texts
    say, followed by that default."""
    for action in parser._actions:
        if action.dest in _SECURITY:
            default = (action.help or "").partition(" (default: ")[2]
            action.help = _help(action.dest) + (f" (default: {default}" if default else "")


_SECURITY = ("tls_ca", "tls_cert", "tls_key", "token_file", "tls")
"""The fields whose flags :func:`~orderer.wire.options.add_security_arguments` adds."""


def _valued(
    parser: argparse.ArgumentParser,
    option: str,
    kind: Callable[[str], Any],
    metavar: str,
    shown: str = "s",
) -> None:
    """A flag that takes a value, its default the field's, with that default at the end of its
    help (``%(default)s``, or ``%(default)g`` with ``shown="g"``)."""
    name = option.removeprefix("--").replace("-", "_")
    help_text = f"{_help(name)} (default: %(default){shown})"
    parser.add_argument(
        option, type=kind, metavar=metavar, default=getattr(_DEFAULTS, name), help=help_text
    )
