"""The ``evb`` argument parser: its subcommands, their flags and help, and the command each one
runs (``handler``).

A refused flag ends with exit status 2 (:data:`EXIT_BAD_INPUT`, argparse's own) in two lines:
the error, then where the usage is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from orderer.cli.arguments import HelpFormatter, add_connection, add_orderer_flags, add_target
from orderer.cli.commands import (
    cmd_begin_run,
    cmd_consumers,
    cmd_demo,
    cmd_end_run,
    cmd_forward,
    cmd_release,
    cmd_replay,
    cmd_send,
    cmd_serve,
    cmd_source,
    cmd_spark_job,
    cmd_stats,
    cmd_tail,
    cmd_top,
)
from orderer.flags.forward import add_forward_flags
from orderer.flags.serve import add_serve_flags
from orderer.flags.values import COUNT, NATURAL, SECONDS, SECONDS_OR_ZERO, SOURCE_ID

__all__ = ["EXIT_BAD_INPUT", "build_parser"]

EXIT_BAD_INPUT = 2
"""Bad input: a flag value, a ``--config`` file, a record, or input the server refused."""

_Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse, but a refused flag is reported in two lines instead of under the whole usage
    (nine lines for ``evb send``) that buried it: the error, then where the usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_BAD_INPUT,
            f"{self.prog}: error: {message}\nTry '{self.prog} --help' for more information.\n",
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evb")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _subcommand(
    commands: Any,
    name: str,
    help_text: str,
    handler: _Handler,
    description: str | None = None,
    *,
    client: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand running ``handler``; a ``client`` one talks to a live orderer and takes
    :func:`~orderer.cli.arguments.add_target`'s flags first."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help_text,
        description=description or help_text[0].upper() + help_text[1:] + ".",
        formatter_class=HelpFormatter,
    )
    parser.set_defaults(handler=handler)
    if client:
        add_target(parser)
    return parser


def _add_timeout(parser: argparse.ArgumentParser, seconds: float) -> None:
    parser.add_argument(
        "--timeout", type=SECONDS, default=seconds, metavar="S", help="seconds the call may take"
    )


def _add_replay(commands: Any) -> None:
    replay = _subcommand(
        commands,
        "replay",
        "order a recorded run deterministically (docs/ordering.md)",
        cmd_replay,
        "Replay a recorded run through the orderer on simulated time: a JSON Lines run, a "
        "data directory (or its arrivals/), an Arrow IPC file or stream, or a Parquet file "
        "(docs/ordering.md, evb replay). A comma list of --build-window, --startup-delay, "
        "--barrier-timeout or --source-timeout sweeps: every combination is replayed in one "
        "pass over INPUT and a table compares them (late fraction, barriers, delays). "
        "INPUT d0,d1,d2: the data directories of a run over several orderers (evb serve "
        "--orderers N), in their order: each orderer's own arrival log replayed with its "
        "recorded parameters, the outputs merged in slice order and, with --dt, built as "
        "evb spark-job --path d0,d1,d2 builds them (docs/scale-out.md); prints a summary, "
        "--output OUT.parquet|OUT.arrow writes the events (without --dt the merged stream), "
        "--stats the summary.",
    )
    replay.add_argument(
        "input", type=Path, nargs="?", metavar="INPUT", help="the recorded run"
    )
    _add_nscldaq_input(replay, "replay these NSCLDAQ ring-item files instead (all at t = 0)")
    replay.add_argument(
        "--output",
        type=Path,
        metavar="OUT",
        help="the ordered output: OUT.arrow (the ordered log's layout, an Arrow IPC stream), "
        "OUT.parquet, else JSON Lines (slow); left out: a table of the counters only. A sweep "
        "writes one file per setting: {} in the name becomes the setting, e.g. out-{}.arrow "
        "gives out-build-window=0.5,startup-delay=2.arrow",
    )
    replay.add_argument(
        "--stats", type=Path, metavar="STATS.json",
        help="write the counters (a sweep: a list of {setting, counters})",
    )
    replay.add_argument(
        "--overwrite", action="store_true",
        help="replace an existing OUT or STATS.json (otherwise refused; either is replaced "
        "only once the replay succeeded)",
    )
    add_orderer_flags(replay)
    sliced = replay.add_argument_group("one run across time-sliced orderers (docs/scale-out.md)")
    sliced.add_argument(
        "--orderers", metavar="N[,N...]",
        help="order INPUT as N orderers would, each owning every N-th slice of timestamps, and "
        "print how their merged output differs from one orderer's (fragments moved, late flags, "
        "events, barriers); a comma list sweeps; needs --slice-ticks",
    )
    sliced.add_argument(
        "--slice-ticks", metavar="T[,T...]",
        help="with --orderers: the slice length in timestamp ticks (slice floor(ts / T) belongs "
        "to orderer slice mod N); a comma list sweeps",
    )
    sliced.add_argument(
        "--dt", type=NATURAL, metavar="TICKS",
        help="with --orderers: build events with glom's window dt (ticks, as evb spark-job "
        "--dt) and count the events that differ",
    )


def _add_nscldaq_input(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--nscldaq FILE...`` and ``--skip-unstamped`` (docs/nscldaq.md)."""
    parser.add_argument("--nscldaq", nargs="+", metavar="FILE", help=help_text + "; - is stdin")
    parser.add_argument(
        "--skip-unstamped",
        action="store_true",
        help="with --nscldaq: leave out (and count) ring items without a body header",
    )


def _add_demo(commands: Any) -> None:
    demo = _subcommand(
        commands,
        "demo",
        "a live run: orderer, gRPC sources and the Spark job building events",
        cmd_demo,
    )
    demo.add_argument(
        "--output-dir", type=Path, default=Path("demo-output"), metavar="DIR", help="results"
    )
    demo.add_argument("--seed", type=NATURAL, default=2026, metavar="N", help="random seed")
    demo.add_argument(
        "--seconds", type=SECONDS, default=20.0, metavar="S", help="length of the live run"
    )
    demo.add_argument(
        "--orderers",
        type=COUNT,
        default=1,
        metavar="N",
        help="spread the run over N orderers by time slices (docs/scale-out.md)",
    )
    demo.add_argument(
        "--ui",
        default="127.0.0.1:0",
        metavar="[HOST:]PORT",
        help="where the live page of the run is served while it is taken (evb spark-job --ui); "
        "port 0: a free one, printed (default: %(default)s); 'off': no page",
    )
    demo.add_argument(
        "--replay-only",
        action="store_true",
        help="the in-process demo instead: a synthetic run through evb replay (no gRPC, no Spark)",
    )


def _add_serve(commands: Any) -> None:
    serve = _subcommand(
        commands,
        "serve",
        "run the orderer as a gRPC service with durable logs",
        cmd_serve,
        "Serve the orderer over gRPC. Flags override the --config file, whose keys are the "
        "custom resource's spec fields (camelCase or snake_case); a flag or key left out takes "
        "the default shown, except that a data directory holding a run keeps the ordering "
        "parameters the run recorded: there a live parameter given with another value is "
        "changed live once the run is recovered, and any other is refused.",
    )
    add_serve_flags(serve)  # the operator writes them too (ServeCommand)
    add_orderer_flags(serve, config_file=True)


def _add_send(commands: Any) -> None:
    send = _subcommand(
        commands,
        "send",
        "send a synthetic run or a replay file to a live server",
        cmd_send,
        "Play data sources against a live server, paced by arrival time; prints a JSON summary.",
        client=True,
    )
    send.add_argument("--replay", type=Path, metavar="INPUT.jsonl", help="send this file")
    _add_nscldaq_input(send, "send these NSCLDAQ ring-item files as they are read")
    send.add_argument(
        "--end-sources", action="store_true", help="with --nscldaq: end the sources at the end"
    )
    synthetic = send.add_argument_group("synthetic run (without --replay)")
    for option, kind, default, metavar, what in (
        ("--n-sources", COUNT, 4, "N", "sources"),
        ("--fragments", COUNT, 10_000, "N", "fragments per source"),
        ("--rate", SECONDS, 1_000.0, "R", "fragments/s per source"),
        ("--batch-size", COUNT, 1, "N", "fragments per source batch"),
        ("--first-source", SOURCE_ID, 1, "ID", "the first source id"),
        ("--payload-size", NATURAL, 0, "BYTES", "bytes per fragment"),
        ("--seed", NATURAL, 0, "N", "random seed of the run"),
        ("--sync-barriers", NATURAL, 1, "N", "barriers within the run"),
    ):
        synthetic.add_argument(option, type=kind, default=default, metavar=metavar, help=what)
    synthetic.add_argument("--no-barriers", action="store_true", help="no barriers at all")
    synthetic.add_argument(
        "--stall",
        action="append",
        default=None,
        metavar="SOURCE:START:END[:backlog]",
        help="a source goes silent from START to END seconds (backlog: then sends it all); "
        "repeatable",
    )
    synthetic.add_argument("--only-sources", metavar="1,2", help="send only these sources")
    synthetic.add_argument("--no-end", action="store_true", help="do not end the sources")
    synthetic.add_argument(
        "--resume",
        action="store_true",
        help="after a crash: skip what the server already holds of each source (also with "
        "--nscldaq: the same files sent again from their start)",
    )
    send.add_argument(
        "--speed",
        type=SECONDS_OR_ZERO,
        default=1.0,
        metavar="X",
        help="how many times faster than its arrival times the run is sent: 2 sends a 10 s run"
        " in 5 s, 0.5 in 20 s; 0 as fast as possible",
    )
    send.add_argument(
        "--client-batch", type=COUNT, default=4096, metavar="N", help="fragments per message"
    )
    send.add_argument(
        "--linger",
        type=SECONDS_OR_ZERO,
        default=0.05,
        metavar="S",
        help="seconds a partial batch waits",
    )
    send.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _add_tail(commands: Any) -> None:
    tail = _subcommand(
        commands,
        "tail",
        "print the ordered output as JSON lines (the evb replay OUT format)",
        cmd_tail,
        client=True,
    )
    tail.add_argument(
        "--from",
        dest="from_offset",
        type=NATURAL,
        default=0,
        metavar="OFFSET",
        help="the first offset to print",
    )
    tail.add_argument(
        "--until",
        type=NATURAL,
        metavar="OFFSET",
        help="stop before this offset (default: what is durable now, unless --follow)",
    )
    tail.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new output until the run ended and all of it was printed",
    )
    tail.add_argument("--payload", action="store_true", help="add each payload (base64)")
    tail.add_argument(
        "--nscldaq",
        metavar="OUT",
        help="write NSCLDAQ event-builder fragments (glom's input) to OUT (- is stdout) instead",
    )


def _add_stats(commands: Any) -> None:
    stats = _subcommand(
        commands, "stats", "the counters of a live server", cmd_stats, client=True
    )
    stats.add_argument("--json", action="store_true", help="JSON instead of a table")
    stats.add_argument(
        "--barriers",
        type=COUNT,
        metavar="N",
        help="the newest N resolved barriers of the barrier log (default: 1000 with --json, "
        "5 in the table)",
    )
    _add_timeout(stats, 10.0)


def _add_top(commands: Any) -> None:
    top = _subcommand(
        commands,
        "top",
        "a live view of a running server (Ctrl-C or q quits)",
        cmd_top,
        "A live view of a running server, refreshed every --interval seconds: the run state, "
        "output offset, queued fragments, build window and fragments/s; the sources; the "
        "newest barriers (incomplete ones with their missing sources); the consumers and their "
        "lag; the connections. An unreachable server is shown in the header and asked again. "
        "Ctrl-C or q quits (exit 0). Piped, each frame is printed plainly after the last.",
        client=True,
    )
    top.add_argument(
        "--interval", type=SECONDS, default=1.0, metavar="S", help="seconds between refreshes"
    )
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument(
        "--barriers", type=COUNT, default=5, metavar="N", help="the newest N barriers to show"
    )
    _add_timeout(top, 10.0)


def _add_source(commands: Any) -> None:
    source = _subcommand(
        commands,
        "source",
        "mark a source dead by hand, or revive it",
        cmd_source,
        "Mark a source dead (it no longer holds pending barriers: NSCLDAQ's dead-source "
        "control; the build window is not affected), or revive it; new input from a source "
        "marked dead revives it too. Durable: a restarted server remembers. Prints the source's "
        "state as JSON. A source the server does not know (neither declared nor heard from) is "
        "refused, naming the known ones (exit 2).",
        client=True,
    )
    source.add_argument("action", choices=("dead", "revive"), help="what to do")
    source.add_argument("source", metavar="SOURCE", help="the source id")
    _add_timeout(source, 10.0)


def _add_release(commands: Any) -> None:
    release = _subcommand(
        commands,
        "release",
        "end the dead sources of a run spread over several orderers, at every orderer",
        cmd_release,
        "For a run over several orderers (docs/scale-out.md): a source silent at every orderer "
        "for the run's source_timeout and not ended everywhere holds every orderer's output; "
        "this sends it an end of source at every orderer (its next fragment re-opens it). "
        "Looks every --interval seconds until every orderer's run has ended, then prints the "
        "releases as JSON; never releases in a round where an orderer does not answer. "
        "--target names every orderer in order (HOST:PORT,...), or one started with --peers.",
        client=True,
    )
    release.add_argument(
        "--interval", type=SECONDS, default=1.0, metavar="S", help="seconds between two looks"
    )
    release.add_argument("--once", action="store_true", help="one look, then exit")


def _add_end_run(commands: Any) -> None:
    end_run = _subcommand(
        commands,
        "end-run",
        "end the run of a live server",
        cmd_end_run,
        "End the run: the orderer drains every queue and emits what it held back; a Spark job "
        "reading it (evb spark-job --target) then finishes once it has read to the end. Prints "
        "the offset after the run's last fragment as JSON. Ending an ended run changes "
        "nothing.",
        client=True,
    )
    _add_timeout(end_run, 60.0)


def _add_begin_run(commands: Any) -> None:
    begin_run = _subcommand(
        commands,
        "begin-run",
        "begin the next run on a live server",
        cmd_begin_run,
        "Begin the next run once the current one has ended (evb end-run): the output from now "
        "on is the new run's. Prints the run number and the output offset of its first "
        "fragment as JSON. The orderer's state is kept; with --reset-on-begin-run on the "
        "server, the run's begin-run barriers restart its clocks.",
        client=True,
    )
    begin_run.add_argument(
        "--run", type=int, metavar="N", help="the new run's number (default: the current + 1)"
    )
    _add_timeout(begin_run, 60.0)


def _add_consumers(commands: Any) -> None:
    consumers = _subcommand(
        commands,
        "consumers",
        "list the consumers of a live server, or delete one",
        cmd_consumers,
        "List the consumers (each one's committed offset, lag in fragments and in seconds, and "
        "when it last committed), or, with "
        "'delete NAME', forget one so that retention no longer keeps the output it has not "
        "committed. An unknown NAME is refused (exit 2).",
        client=True,
    )
    consumers.add_argument(
        "action", nargs="?", choices=("list", "delete"), default="list", help="(default: list)"
    )
    consumers.add_argument("name", nargs="?", metavar="NAME", help="the consumer to delete")
    consumers.add_argument("--json", action="store_true", help="JSON instead of a table")
    _add_timeout(consumers, 10.0)


def _add_forward(commands: Any) -> None:
    forward = _subcommand(
        commands,
        "forward",
        "forward one orderer's ordered output to another as its sources (build in levels)",
        cmd_forward,
        "Read the ordered output of the orderer --from (from the offset its consumer NAME "
        "committed) and send it to the orderer --to (or the run over several orderers it "
        "names, routing as every source does): each upstream source keeps its id, or "
        "with --as-source all become one source. Commits to --from only what --to "
        "acknowledged durable, and numbers each source from --from's log, so a kill -9 of "
        "either orderer or of the forwarder loses and duplicates nothing; sends --from's "
        "high-water mark as the sources' watermark. Once --from's run ended and everything "
        "was forwarded, ends the sources at --to (unless --no-end), prints a JSON summary and "
        "exits. The same TLS and token flags serve both orderers.",
    )
    add_forward_flags(forward)  # the operator writes them too (ForwardCommand)
    add_connection(forward)


def _add_spark_job(commands: Any) -> None:
    """``evb spark-job``: its arguments go to the job (:mod:`orderer.spark.driver.job`, also the
    SparkApplication's main file), whose parser (:func:`orderer.job_config.build_parser`) prints
    its help."""
    spark_job = commands.add_parser(
        "spark-job",
        help="build events from the ordered stream with Spark (see evb spark-job --help)",
        add_help=False,
    )
    spark_job.add_argument("job_args", nargs="*")
    spark_job.set_defaults(handler=cmd_spark_job)


def build_parser() -> argparse.ArgumentParser:
    """The ``evb`` parser; the parsed namespace's ``handler`` runs the command."""
    parser = _Parser(
        prog="evb",
        description="evb: a Kubernetes-native event builder",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evb {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_replay,
        _add_demo,
        _add_serve,
        _add_send,
        _add_tail,
        _add_stats,
        _add_top,
        _add_source,
        _add_end_run,
        _add_begin_run,
        _add_consumers,
        _add_forward,
        _add_release,
        _add_spark_job,
    ):
        add(commands)
    return parser
