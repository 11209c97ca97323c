"""The ``evb`` command line: argument parsing and exit statuses only; the work is elsewhere.

Exit status 2 means bad input (a flag value, a ``--config`` file, a record, or input the server
refused), with the culprit named on stderr in one line: the flag, or the file, line and key; 3
means the orderer service could not be reached. A user's mistake never ends in a traceback.

Numeric flags are checked by their argparse ``type`` (:func:`_number`), so a nonsensical value
is refused before anything starts, and the message names the flag as typed (``--rate``); what
a library refuses later under its own name (``rate``) is translated back to the flag here.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from orderer.config import (
    OrdererConfig,
    camel_case,
    check_keys,
    parse_source_timeout,
    snake_case,
)
from orderer.errors import (
    ConfigError,
    EvbError,
    InterfaceError,
    RecordError,
    ServiceUnavailable,
)
from orderer.wire.options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TARGET,
    ENV_TARGET,
    add_security_arguments,
    security_from_args,
)

__all__ = ["HelpFormatter", "build_parser", "main", "serve_configs"]

# gRPC's core logs every failed TLS handshake attempt on stderr (a dozen lines while a command
# waits for its connection, around its one-line error, which names the cause once). gRPC reads
# the setting when it is first imported, and every command imports it lazily, after this; a
# GRPC_VERBOSITY the user set wins. The library leaves the process's environment alone.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3


class BadInput(EvbError):
    """A user mistake that is not one parameter's value (a file that is not valid YAML); the
    message is printed as is."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in its help, except where there is nothing to show (no default, an
    on/off switch) or the help already says it (defaults that come from a file or a variable)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        nothing = action.default is None or action.default is False
        if nothing or action.default == argparse.SUPPRESS or "default" in help_text:
            return help_text
        return super()._get_help_string(action)


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


# ------------------------------------------------------------------------ flag value types


def _number(
    kind: type[int] | type[float],
    minimum: float,
    *,
    exclusive: bool = False,
    maximum: float | None = None,
) -> Callable[[str], Any]:
    """An argparse ``type``: an int or a finite float, at least (or, ``exclusive``, more than)
    ``minimum``; argparse names the flag in the error."""
    bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
    if maximum is not None:
        bound += f" and <= {maximum:g}"
    what = f"an integer {bound}" if kind is int else f"a number {bound}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})") from None
        too_small = value <= minimum if exclusive else value < minimum
        too_large = maximum is not None and value > maximum
        if too_small or too_large or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})")
        return value

    return parse


_COUNT = _number(int, 1)
_NATURAL = _number(int, 0)
_SOURCE_ID = _number(int, 0, maximum=2**32 - 1)
_PORT = _number(int, 0, maximum=65535)
_SECONDS = _number(float, 0, exclusive=True)
_SECONDS_OR_ZERO = _number(float, 0)


# ------------------------------------------------------------------------ ordering flags

_ORDERER_FLAGS = (
    "build_window",
    "startup_delay",
    "barrier_timeout",
    "source_timeout",
    "late_policy",
    "sources",
)


def _add_orderer_flags(parser: argparse.ArgumentParser, *, config_file: bool = False) -> None:
    """The parameters of docs/ordering.md. Their defaults are the dataclass's; with ``config_file``
    (``evb serve``), a flag left out takes the file's value first."""
    defaults = OrdererConfig()

    def default(value: object, key: str) -> str:
        file = f", or {camel_case(key)} in --config" if config_file else ""
        return f"(default: {value}{file})"

    group = parser.add_argument_group("ordering parameters (docs/ordering.md)")
    group.add_argument(
        "--build-window",
        metavar="S",
        help="seconds a fragment may wait for the other sources "
        + default(f"{defaults.build_window:g}", "build_window"),
    )
    group.add_argument(
        "--startup-delay",
        metavar="S",
        help="seconds before the first emission "
        + default(f"{defaults.startup_delay:g}", "startup_delay"),
    )
    group.add_argument(
        "--barrier-timeout",
        metavar="S",
        help="seconds a barrier waits " + default("4 x build window", "barrier_timeout"),
    )
    group.add_argument(
        "--source-timeout",
        metavar="S|off",
        help="seconds until a silent source is dead; 0 or off: never "
        + default(f"{defaults.source_timeout:g}", "source_timeout"),
    )
    group.add_argument(
        "--late-policy",
        metavar="emit|drop",
        help="what to do with late fragments " + default(defaults.late_policy, "late_policy"),
    )
    group.add_argument(
        "--sources",
        metavar="1,2,3",
        help="sources declared from the start " + default("none", "sources"),
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The orderer flags that were given, by parameter name, each checked on its own so that an
    error names the flag."""
    values: dict[str, Any] = {}
    for name in _ORDERER_FLAGS:
        raw = getattr(args, name)
        if raw is None:
            continue
        try:
            if name == "source_timeout":
                parse_source_timeout(raw)
            OrdererConfig.from_mapping({name: raw})
        except ConfigError as error:
            raise ConfigError(_flag(name), raw, error.why) from None
        values[name] = raw
    return values


def _config_from_flags(args: argparse.Namespace) -> OrdererConfig:
    values = _flag_values(args)
    try:
        return OrdererConfig.from_mapping(values)
    except ConfigError as error:  # a combination of flags, e.g. sources repeated
        raise ConfigError(_flag(error.parameter), error.value, error.why) from None


def _renamed(error: ConfigError, names: Mapping[str, str]) -> ConfigError:
    """``error`` naming what the user typed (a flag, a file's line and key) instead of the
    library's parameter; unchanged if its parameter is not in ``names`` (snake_case keys;
    a dotted parameter is looked up by its longest known prefix)."""
    parts = error.parameter.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(snake_case(part) for part in parts[:cut])
        if head in names:
            rest = "".join(f".{camel_case(snake_case(part))}" for part in parts[cut:])
            return ConfigError(names[head] + rest, error.value, error.why)
    return error


# ------------------------------------------------------------------------ commands


def _cmd_replay(args: argparse.Namespace) -> int:
    from orderer.replay import replay_file

    config = _config_from_flags(args)
    replay_file(args.input, args.output, args.stats, config)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.replay_only:
        from orderer.demo import run_demo

        return run_demo(output_dir=args.output_dir, seed=args.seed)
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        raise ConfigError(
            "demo",
            "pyspark",
            "the live demo needs the spark extra (pip install 'evb[spark]'); "
            "evb demo --replay-only runs without it",
        )
    from orderer.spark.demo import run_live_demo

    return run_live_demo(output_dir=args.output_dir, seed=args.seed, seconds=args.seconds)


def _load_yaml(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``--config`` mapping, and where each key is: ``{"build_window": "FILE:LINE:
    buildWindow"}`` (nested keys dotted), so that an error names the line the user wrote.
    Not YAML, not a mapping, or a key given twice in two spellings: :class:`BadInput` or
    :class:`ConfigError` naming the file and the line."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else error.strerror
        raise BadInput(f"--config {path}: {why}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise BadInput(f"{at}: not valid YAML: {problem}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ConfigError("--config", str(path), "must hold a mapping of parameters (key: value)")
    where: dict[str, str] = {}
    _key_lines(node, path, "", "", where)
    return {str(key): value for key, value in data.items()}, where


def _key_lines(node: Any, path: Path, prefix: str, written: str, out: dict[str, str]) -> None:
    import yaml

    for key_node, value_node in node.value:
        key = str(key_node.value)
        name = prefix + snake_case(key)
        if name in out:
            raise BadInput(
                f"{path}:{key_node.start_mark.line + 1}: {written}{key}: given twice "
                f"(first at {out[name].split(': ')[0]})"
            )
        out[name] = f"{path}:{key_node.start_mark.line + 1}: {written}{key}"
        if isinstance(value_node, yaml.MappingNode):
            _key_lines(value_node, path, name + ".", f"{written}{key}.", out)


_SERVE_FLAGS = (
    "listen",
    "data_dir",
    "fsync",
    "metrics_port",
    "max_payload_bytes",
    "strict_sources",
    "stop_grace",
    "retention_bytes",
    "retention_seconds",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "token_file",
)


def serve_configs(args: argparse.Namespace) -> tuple[OrdererConfig, Any]:
    """The configuration ``evb serve`` runs with: the ``--config`` file, the flags over it
    (whatever the key's spelling), checked as a whole; an error names the flag, or the file,
    line and key it came from. Returns ``(OrdererConfig, ServiceConfig)``."""
    from dataclasses import fields

    from orderer.service.server import ServiceConfig, configs_from_mapping

    values, where = _load_yaml(args.config) if args.config else ({}, {})
    flags = _flag_values(args)
    flags.update(
        {name: getattr(args, name) for name in _SERVE_FLAGS if getattr(args, name) is not None}
    )
    for name, value in flags.items():
        for key in [key for key in values if snake_case(key) == name]:
            del values[key]
        where[name] = _flag(name)
        values[name] = value
    known = [f.name for f in fields(OrdererConfig)] + [f.name for f in fields(ServiceConfig)]
    try:
        check_keys(values, known)  # the service's keys too, so the suggestion can be one
        return configs_from_mapping(values)
    except ConfigError as error:
        raise _renamed(error, where) from None


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from orderer.service.server import RunningServer, serve

    config, service = serve_configs(args)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host = service.listen.rsplit(":", 1)[0]

    def ready(running: RunningServer) -> None:
        print(f"evb serve: listening on {host}:{running.port}", flush=True)
        if running.metrics_port is not None:
            print(f"evb serve: metrics on port {running.metrics_port}", flush=True)

    return asyncio.run(serve(config, service, ready=ready))


def _int_list(flag: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(flag, text, "must be a comma-separated list of integers") from None


def _stalls(texts: list[str]) -> tuple[Any, ...]:
    from orderer.synthetic import Stall

    stalls = []
    for text in texts:
        parts = text.split(":")
        try:
            if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "backlog"):
                raise ValueError
            stalls.append(
                Stall(int(parts[0]), float(parts[1]), float(parts[2]), backlog=len(parts) == 4)
            )
        except ValueError:
            raise ConfigError("--stall", text, "must be SOURCE:START:END[:backlog]") from None
    return tuple(stalls)


_SYNTHETIC_FLAGS = {
    "n_sources": "--n-sources",
    "fragments_per_source": "--fragments",
    "rate": "--rate",
    "batch_size": "--batch-size",
    "first_source": "--first-source",
    "payload_size": "--payload-size",
    "sync_barriers": "--sync-barriers",
    "stalls": "--stall",
    "tick_rate": "--fragments/--rate",  # the run's timestamps would overflow
}
"""SyntheticRun's parameters by the flag that sets them (its errors name the parameter)."""


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``SourceClient`` keywords of ``evb send`` (agreed with :mod:`orderer.client`)."""
    return {
        "batch_size": args.client_batch,
        "linger": args.linger,
        "security": security_from_args(args),
        "connect_timeout": args.connect_timeout,
    }


def _cmd_send(args: argparse.Namespace) -> int:
    import json

    from orderer.remote import send_records, send_synthetic
    from orderer.synthetic import SyntheticRun

    options = _client_options(args)
    progress = not args.no_progress
    if args.replay is not None:
        summary = send_records(
            args.target, args.replay, speed=args.speed, progress=progress, client_options=options
        )
    else:
        try:
            spec = SyntheticRun(
                n_sources=args.n_sources,
                fragments_per_source=args.fragments,
                rate=args.rate,
                batch_size=args.batch_size,
                first_source=args.first_source,
                payload_size=args.payload_size,
                seed=args.seed,
                barriers=not args.no_barriers,
                sync_barriers=args.sync_barriers,
                stalls=_stalls(args.stall or []),
            )
        except ConfigError as error:
            raise _renamed(error, _SYNTHETIC_FLAGS) from None
        summary = send_synthetic(
            args.target,
            spec,
            only_sources=_int_list("--only-sources", args.only_sources),
            speed=args.speed,
            end_sources=not args.no_end,
            progress=progress,
            client_options=options,
            resume=args.resume,
        )
    print(json.dumps(summary), flush=True)
    return 0


def _cmd_tail(args: argparse.Namespace) -> int:
    from orderer.remote import tail

    tail(
        args.target,
        sys.stdout,
        from_offset=args.from_offset,
        until=args.until,
        follow=args.follow,
        payload=args.payload,
        security=security_from_args(args),
        connect_timeout=args.connect_timeout,
    )
    return 0


def _cmd_spark_job(args: argparse.Namespace) -> int:
    from orderer.spark.job import main as spark_job

    return spark_job(args.job_args)


def _cmd_stats(args: argparse.Namespace) -> int:
    from orderer.remote import print_stats

    print_stats(
        args.target,
        sys.stdout,
        as_json=args.json,
        timeout=args.timeout,
        security=security_from_args(args),
        connect_timeout=args.connect_timeout,
    )
    return 0


def _cmd_end_run(args: argparse.Namespace) -> int:
    import json

    from orderer.client import end_run

    next_offset = end_run(
        args.target,
        timeout=args.timeout,
        security=security_from_args(args),
        connect_timeout=args.connect_timeout,
    )
    print(json.dumps({"next_offset": next_offset}), flush=True)
    return 0


# ------------------------------------------------------------------------ client flags


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get(ENV_TARGET, DEFAULT_TARGET),
        metavar="HOST:PORT",
        help=f"the orderer service (default: $EVB_TARGET, else {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_SECONDS,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="S",
        help="seconds to wait for a connection before giving up with exit status 3",
    )
    add_security_arguments(parser)


# ------------------------------------------------------------------------ the parser


def _subcommand(
    commands: Any, name: str, help_text: str, description: str | None = None, **kwargs: Any
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help_text,
        description=description or help_text[0].upper() + help_text[1:] + ".",
        formatter_class=HelpFormatter,
        **kwargs,
    )
    return parser


def _add_serve(commands: Any) -> None:
    serve = _subcommand(
        commands,
        "serve",
        "run the orderer as a gRPC service with durable logs",
        "Serve the orderer over gRPC. Flags override the --config file, whose keys are the "
        "custom resource's spec fields (camelCase or snake_case); a flag or key left out takes "
        "the default shown.",
    )

    def default(value: object, key: str) -> str:
        return f"(default: {value}, or {camel_case(key)} in --config)"

    serve.add_argument("--config", type=Path, metavar="YAML", help="parameters and settings")
    serve.add_argument(
        "--listen", metavar="HOST:PORT", help="gRPC address " + default("[::]:50051", "listen")
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="logs directory " + default("evb-data", "data_dir"),
    )
    serve.add_argument(
        "--fsync",
        choices=["always", "batch", "never"],
        help="when the logs are forced to disk " + default("batch", "fsync"),
    )
    serve.add_argument(
        "--metrics-port",
        type=_PORT,
        metavar="PORT",
        help="Prometheus endpoint; 0: any free port " + default("none", "metrics_port"),
    )
    serve.add_argument(
        "--max-payload-bytes",
        type=_COUNT,
        metavar="N",
        help="largest fragment payload " + default(1 << 20, "max_payload_bytes"),
    )
    serve.add_argument(
        "--strict-sources",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse sources not declared in --sources " + default("no", "strict_sources"),
    )
    serve.add_argument(
        "--stop-grace",
        type=_SECONDS_OR_ZERO,
        metavar="S",
        help="seconds calls get to finish on shutdown " + default("10", "stop_grace"),
    )
    serve.add_argument(
        "--retention-bytes",
        type=_COUNT,
        metavar="N",
        help="ordered-log size kept " + default("all", "retention_bytes"),
    )
    serve.add_argument(
        "--retention-seconds",
        type=_SECONDS,
        metavar="S",
        help="ordered-log age kept " + default("all", "retention_seconds"),
    )
    tls = serve.add_argument_group("security (default: plaintext, no token)")
    tls.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="PEM certificate chain: serve TLS only"
    )
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM key of --tls-cert")
    tls.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA: mutual TLS, clients must present a certificate it signed",
    )
    tls.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="file holding the bearer token every call must carry (needs TLS)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning"], help="log detail"
    )
    _add_orderer_flags(serve, config_file=True)
    serve.set_defaults(handler=_cmd_serve)


def _add_send(commands: Any) -> None:
    send = _subcommand(
        commands,
        "send",
        "send a synthetic run or a replay file to a live server",
        "Play data sources against a live server, paced by arrival time; prints a JSON summary.",
    )
    _add_target(send)
    send.add_argument("--replay", type=Path, metavar="INPUT.jsonl", help="send this file")
    synthetic = send.add_argument_group("synthetic run (without --replay)")
    synthetic.add_argument("--n-sources", type=_COUNT, default=4, metavar="N", help="sources")
    synthetic.add_argument(
        "--fragments", type=_COUNT, default=10_000, metavar="N", help="fragments per source"
    )
    synthetic.add_argument(
        "--rate", type=_SECONDS, default=1_000.0, metavar="R", help="fragments/s per source"
    )
    synthetic.add_argument(
        "--batch-size", type=_COUNT, default=1, metavar="N", help="fragments per source batch"
    )
    synthetic.add_argument(
        "--first-source", type=_SOURCE_ID, default=1, metavar="ID", help="the first source id"
    )
    synthetic.add_argument(
        "--payload-size", type=_NATURAL, default=0, metavar="BYTES", help="bytes per fragment"
    )
    synthetic.add_argument(
        "--seed", type=_NATURAL, default=0, metavar="N", help="random seed of the run"
    )
    synthetic.add_argument(
        "--sync-barriers", type=_NATURAL, default=1, metavar="N", help="barriers within the run"
    )
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
        help="after a crash: skip what the server already holds of each source",
    )
    send.add_argument(
        "--speed",
        type=_SECONDS_OR_ZERO,
        default=1.0,
        metavar="X",
        help="time factor; 0 sends as fast as possible",
    )
    send.add_argument(
        "--client-batch", type=_COUNT, default=4096, metavar="N", help="fragments per message"
    )
    send.add_argument(
        "--linger",
        type=_SECONDS_OR_ZERO,
        default=0.05,
        metavar="S",
        help="seconds a partial batch waits",
    )
    send.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    send.set_defaults(handler=_cmd_send)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="evb",
        description="evb: a Kubernetes-native event builder",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evb {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = _subcommand(
        commands,
        "replay",
        "order a recorded run deterministically (docs/ordering.md)",
        "Replay a JSON Lines run through the orderer on simulated time.",
    )
    replay.add_argument("input", type=Path, metavar="INPUT.jsonl", help="the recorded run")
    replay.add_argument(
        "--output", type=Path, required=True, metavar="OUT.jsonl", help="the ordered output"
    )
    replay.add_argument("--stats", type=Path, metavar="STATS.json", help="write the counters")
    _add_orderer_flags(replay)
    replay.set_defaults(handler=_cmd_replay)

    demo = _subcommand(
        commands,
        "demo",
        "a live run: orderer, gRPC sources and the Spark job building events",
    )
    demo.add_argument(
        "--output-dir", type=Path, default=Path("demo-output"), metavar="DIR", help="results"
    )
    demo.add_argument("--seed", type=_NATURAL, default=2026, metavar="N", help="random seed")
    demo.add_argument(
        "--seconds", type=_SECONDS, default=20.0, metavar="S", help="length of the live run"
    )
    demo.add_argument(
        "--replay-only",
        action="store_true",
        help="the in-process demo instead: a synthetic run through evb replay (no gRPC, no Spark)",
    )
    demo.set_defaults(handler=_cmd_demo)

    _add_serve(commands)
    _add_send(commands)

    tail = _subcommand(
        commands, "tail", "print the ordered output as JSON lines (the evb replay OUT format)"
    )
    _add_target(tail)
    tail.add_argument(
        "--from",
        dest="from_offset",
        type=_NATURAL,
        default=0,
        metavar="OFFSET",
        help="the first offset to print",
    )
    tail.add_argument(
        "--until",
        type=_NATURAL,
        metavar="OFFSET",
        help="stop before this offset (default: what is durable now, unless --follow)",
    )
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new output")
    tail.add_argument("--payload", action="store_true", help="add each payload (base64)")
    tail.set_defaults(handler=_cmd_tail)

    stats = _subcommand(commands, "stats", "the counters of a live server")
    _add_target(stats)
    stats.add_argument("--json", action="store_true", help="JSON instead of a table")
    stats.add_argument(
        "--timeout", type=_SECONDS, default=10.0, metavar="S", help="seconds the call may take"
    )
    stats.set_defaults(handler=_cmd_stats)

    end_run = _subcommand(
        commands,
        "end-run",
        "end the run of a live server",
        "End the run: the orderer drains every queue and emits what it held back; a Spark job "
        "reading it (evb spark-job --target) then finishes once it has read to the end. Prints "
        "the offset after the run's last fragment as JSON. Ending an ended run changes "
        "nothing.",
    )
    _add_target(end_run)
    end_run.add_argument(
        "--timeout", type=_SECONDS, default=60.0, metavar="S", help="seconds the call may take"
    )
    end_run.set_defaults(handler=_cmd_end_run)

    spark_job = commands.add_parser(
        "spark-job",
        help="build events from the ordered stream with Spark (see evb spark-job --help)",
        add_help=False,
    )
    spark_job.add_argument("job_args", nargs="*")
    spark_job.set_defaults(handler=_cmd_spark_job)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["spark-job"]:  # its own parser (also the SparkApplication's main file)
        argv = ["spark-job", "--", *argv[1:]]
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a flag argparse refused (status 2)
        return done.code if isinstance(done.code, int) else EXIT_BAD_INPUT
    try:
        return int(args.handler(args))
    except (ConfigError, RecordError, InterfaceError, BadInput) as error:
        print(f"evb {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FileNotFoundError as error:
        print(f"evb {args.command}: {error.filename}: no such file", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServiceUnavailable as error:
        print(f"evb {args.command}: orderer unavailable: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
