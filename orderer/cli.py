"""The ``evb`` command line: argument parsing and exit statuses only; the work is elsewhere.

Exit status 2 means bad input (a flag value, a record, or input the server refused), with the
culprit named on stderr; 3 means the orderer service could not be reached.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orderer.config import OrdererConfig, parse_source_timeout, snake_case
from orderer.errors import ConfigError, InterfaceError, RecordError, ServiceUnavailable

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
DEFAULT_TARGET = "localhost:50051"


def _add_orderer_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ordering parameters (ORDERING.md)")
    group.add_argument("--build-window", metavar="S", help="seconds a fragment may wait (20)")
    group.add_argument("--startup-delay", metavar="S", help="seconds before the first emission (2)")
    group.add_argument(
        "--barrier-timeout", metavar="S", help="seconds a barrier waits (4 x window)"
    )
    group.add_argument(
        "--source-timeout", metavar="S|off", help="seconds until a silent source is dead (60)"
    )
    group.add_argument(
        "--late-policy", metavar="emit|drop", help="what to do with late fragments (emit)"
    )
    group.add_argument("--sources", metavar="1,2,3", help="sources declared from the start")


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The orderer flags that were given, by parameter name, each checked on its own so that an
    error names the flag."""
    values: dict[str, Any] = {}
    for name in (
        "build_window",
        "startup_delay",
        "barrier_timeout",
        "source_timeout",
        "late_policy",
        "sources",
    ):
        raw = getattr(args, name)
        if raw is None:
            continue
        flag = "--" + name.replace("_", "-")
        try:
            if name == "source_timeout":
                parse_source_timeout(raw)
            OrdererConfig.from_mapping({name: raw})
        except ConfigError as error:
            raise ConfigError(flag, raw, error.why) from None
        values[name] = raw
    return values


def _config_from_flags(args: argparse.Namespace) -> OrdererConfig:
    values = _flag_values(args)
    try:
        return OrdererConfig.from_mapping(values)
    except ConfigError as error:  # a combination of flags, e.g. sources repeated
        raise ConfigError(
            "--" + error.parameter.replace("_", "-"), error.value, error.why
        ) from None


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
            "demo", "pyspark", "the live demo needs the spark extra (pip install 'evb[spark]'); "
            "evb demo --replay-only runs without it"
        )
    from orderer.spark.demo import run_live_demo

    return run_live_demo(output_dir=args.output_dir, seed=args.seed, seconds=args.seconds)


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError("--config", str(path), f"not valid YAML ({error})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("--config", str(path), "must hold a mapping of parameters")
    for key, value in data.items():
        if snake_case(str(key)) == "source_timeout" and value is False:
            data[key] = "off"  # YAML 1.1 reads an unquoted `off` as false
    return {str(key): value for key, value in data.items()}



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


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from orderer.service.server import RunningServer, configs_from_mapping, serve

    values = _load_yaml(args.config) if args.config else {}
    flags = _flag_values(args)
    flags.update(
        {name: getattr(args, name) for name in _SERVE_FLAGS if getattr(args, name) is not None}
    )
    for name, value in flags.items():  # a flag wins over the file, whatever its spelling
        for key in [key for key in values if snake_case(key) == name]:
            del values[key]
        values[name] = value
    config, service = configs_from_mapping(values)
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


def _cmd_send(args: argparse.Namespace) -> int:
    import json

    from orderer.remote import send_records, send_synthetic
    from orderer.synthetic import SyntheticRun

    if args.speed < 0:
        raise ConfigError("--speed", args.speed, "must be >= 0 (0: as fast as possible)")
    options = {
        "batch_size": args.client_batch,
        "linger": args.linger,
        "security": _security(args),
    }
    progress = not args.no_progress
    if args.replay is not None:
        summary = send_records(
            args.target, args.replay, speed=args.speed, progress=progress, client_options=options
        )
    else:
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
            stalls=_stalls(args.stall),
        )
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
        security=_security(args),
    )
    return 0


def _cmd_spark_job(args: argparse.Namespace) -> int:
    from orderer.spark.job import main as spark_job

    return spark_job(args.job_args)


def _cmd_stats(args: argparse.Namespace) -> int:
    from orderer.remote import print_stats

    print_stats(
        args.target, sys.stdout, as_json=args.json, timeout=args.timeout, security=_security(args)
    )
    return 0


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get("EVB_TARGET", DEFAULT_TARGET),
        metavar="HOST:PORT",
        help=f"the orderer service (default: $EVB_TARGET or {DEFAULT_TARGET})",
    )
    add_security_arguments(parser)


def add_security_arguments(
    parser: argparse.ArgumentParser,
    title: str = "security (each flag defaults to its environment variable)",
    path_type: Callable[[str], Any] = Path,
) -> None:
    """A client's TLS and token flags, each defaulting to the variable the operator sets in the
    pods it runs clients in (``evb send/tail/stats`` and the Spark job share them)."""
    group = parser.add_argument_group(title)
    for flag, variable, what in (
        ("--tls-ca", "EVB_TLS_CA", "PEM CA of the server's certificate: connect with TLS"),
        ("--tls-cert", "EVB_TLS_CERT", "PEM client certificate (mutual TLS)"),
        ("--tls-key", "EVB_TLS_KEY", "PEM key of the client certificate"),
        ("--token-file", "EVB_TOKEN_FILE", "file holding the bearer token (TLS only)"),
    ):
        group.add_argument(
            flag,
            type=path_type,
            default=os.environ.get(variable) or None,
            metavar="FILE",
            help=f"{what} (${variable})",
        )
    group.add_argument(
        "--tls",
        action="store_true",
        help="TLS with the system's CA certificates (implied by --tls-ca)",
    )


def _security(args: argparse.Namespace) -> Any:
    """The client's ChannelSecurity from the flags (and $EVB_TOKEN for the token itself)."""
    from orderer.service.security import ENV_TOKEN, ChannelSecurity

    token = os.environ.get(ENV_TOKEN) or None
    return ChannelSecurity.from_files(
        ca=args.tls_ca,
        cert=args.tls_cert,
        key=args.tls_key,
        token=None if args.token_file is not None else token,
        token_file=args.token_file,
        tls=args.tls,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evb", description="evb: a Kubernetes-native event builder"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        help="order a recorded run deterministically (ORDERING.md)",
        description="Replay a JSON Lines run through the orderer on simulated time.",
    )
    replay.add_argument("input", type=Path, metavar="INPUT.jsonl")
    replay.add_argument("--output", type=Path, required=True, metavar="OUT.jsonl")
    replay.add_argument("--stats", type=Path, metavar="STATS.json")
    _add_orderer_flags(replay)
    replay.set_defaults(handler=_cmd_replay)

    demo = commands.add_parser(
        "demo",
        help="a live run: orderer, gRPC sources and the Spark job building events",
    )
    demo.add_argument("--output-dir", type=Path, default=Path("demo-output"))
    demo.add_argument("--seed", type=int, default=2026)
    demo.add_argument("--seconds", type=float, default=20.0, help="length of the live run")
    demo.add_argument(
        "--replay-only",
        action="store_true",
        help="the in-process demo instead: a synthetic run through evb replay (no gRPC, no Spark)",
    )
    demo.set_defaults(handler=_cmd_demo)

    serve = commands.add_parser(
        "serve",
        help="run the orderer as a gRPC service with durable logs",
        description="Serve the orderer over gRPC. Flags override the --config file, whose keys "
        "are the custom resource's spec fields (camelCase or snake_case).",
    )
    serve.add_argument("--config", type=Path, metavar="YAML", help="parameters and settings")
    serve.add_argument("--listen", metavar="HOST:PORT", help="gRPC address ([::]:50051)")
    serve.add_argument("--data-dir", type=Path, metavar="DIR", help="logs directory (evb-data)")
    serve.add_argument("--fsync", choices=["always", "batch", "never"], help="(batch)")
    serve.add_argument("--metrics-port", type=int, metavar="PORT", help="Prometheus endpoint")
    serve.add_argument(
        "--max-payload-bytes", type=int, metavar="N", help="largest fragment payload (1 MiB)"
    )
    serve.add_argument(
        "--strict-sources",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse sources not declared in --sources",
    )
    serve.add_argument("--stop-grace", type=float, metavar="S", help="shutdown grace (10 s)")
    serve.add_argument(
        "--retention-bytes", type=int, metavar="N", help="ordered-log size kept (all)"
    )
    serve.add_argument(
        "--retention-seconds", type=float, metavar="S", help="ordered-log age kept (all)"
    )
    serve.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="PEM certificate chain: serve TLS only"
    )
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM key of --tls-cert")
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA: mutual TLS, clients must present a certificate it signed",
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="file holding the bearer token every call must carry (needs TLS)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    _add_orderer_flags(serve)
    serve.set_defaults(handler=_cmd_serve)

    send = commands.add_parser(
        "send",
        help="send a synthetic run or a replay file to a live server",
        description="Play data sources against a live server, paced by arrival time.",
    )
    _add_target(send)
    send.add_argument("--replay", type=Path, metavar="INPUT.jsonl", help="send this file")
    synthetic = send.add_argument_group("synthetic run (without --replay)")
    synthetic.add_argument("--n-sources", type=int, default=4)
    synthetic.add_argument("--fragments", type=int, default=10_000, help="per source")
    synthetic.add_argument("--rate", type=float, default=1_000.0, help="fragments/s per source")
    synthetic.add_argument("--batch-size", type=int, default=1, help="fragments per source batch")
    synthetic.add_argument("--first-source", type=int, default=1)
    synthetic.add_argument("--payload-size", type=int, default=0)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--sync-barriers", type=int, default=1)
    synthetic.add_argument("--no-barriers", action="store_true")
    synthetic.add_argument(
        "--stall", action="append", default=[], metavar="SOURCE:START:END[:backlog]"
    )
    synthetic.add_argument("--only-sources", metavar="1,2", help="send only these sources")
    synthetic.add_argument("--no-end", action="store_true", help="do not end the sources")
    synthetic.add_argument(
        "--resume",
        action="store_true",
        help="after a crash: skip what the server already holds of each source",
    )
    send.add_argument(
        "--speed", type=float, default=1.0, help="time factor; 0 sends as fast as possible"
    )
    send.add_argument("--client-batch", type=int, default=4096, help="fragments per message")
    send.add_argument("--linger", type=float, default=0.05, help="seconds a partial batch waits")
    send.add_argument("--no-progress", action="store_true")
    send.set_defaults(handler=_cmd_send)

    tail = commands.add_parser(
        "tail", help="print the ordered output as JSON lines (the evb replay OUT format)"
    )
    _add_target(tail)
    tail.add_argument("--from", dest="from_offset", type=int, default=0, metavar="OFFSET")
    tail.add_argument("--until", type=int, metavar="OFFSET", help="stop before this offset")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new output")
    tail.add_argument("--payload", action="store_true", help="add each payload (base64)")
    tail.set_defaults(handler=_cmd_tail)

    stats = commands.add_parser("stats", help="the counters of a live server")
    _add_target(stats)
    stats.add_argument("--json", action="store_true", help="JSON instead of a table")
    stats.add_argument("--timeout", type=float, default=10.0, metavar="S", help="(10)")
    stats.set_defaults(handler=_cmd_stats)

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
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (ConfigError, RecordError) as error:
        print(f"evb {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FileNotFoundError as error:
        print(f"evb {args.command}: {error.filename}: no such file", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InterfaceError as error:
        print(f"evb {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ServiceUnavailable as error:
        print(f"evb {args.command}: orderer unavailable: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
