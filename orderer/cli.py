"""The ``evb`` command line: argument parsing and exit statuses only; the work is elsewhere.

Exit status 2 means bad input (a flag value or a record), with the culprit named on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orderer.config import OrdererConfig, parse_source_timeout
from orderer.errors import ConfigError, RecordError

EXIT_BAD_INPUT = 2


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
    from orderer.demo import run_demo

    return run_demo(output_dir=args.output_dir, seed=args.seed)


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

    demo = commands.add_parser("demo", help="generate a synthetic run, replay it, print a summary")
    demo.add_argument("--output-dir", type=Path, default=Path("demo-output"))
    demo.add_argument("--seed", type=int, default=2026)
    demo.set_defaults(handler=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (ConfigError, RecordError) as error:
        print(f"evb {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FileNotFoundError as error:
        print(f"evb {args.command}: {error.filename}: no such file", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
