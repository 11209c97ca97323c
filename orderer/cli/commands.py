"""What each ``evb`` command does with its parsed flags: one ``cmd_*`` function a command, which
builds the library's arguments from the flags and calls the library; the work is elsewhere
(:mod:`orderer.replay`, :mod:`orderer.apps`, :mod:`orderer.client`, :mod:`orderer.service`,
:mod:`orderer.spark.driver.job`, the demos).

Each returns the command's exit status; an error a user can cause is raised as the library's
exception, which :func:`orderer.cli.main` turns into one line and an exit status. Libraries are
imported by the command that needs them, so that ``evb --help`` or a refused flag does not wait
for gRPC, Spark or the Cython core to load.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from typing import IO, Any

from orderer.cli.arguments import renamed, sweep_from_flags
from orderer.cli.config_file import serve_settings
from orderer.errors import ConfigError
from orderer.wire.options import security_from_args

__all__ = [
    "cmd_begin_run",
    "cmd_consumers",
    "cmd_demo",
    "cmd_end_run",
    "cmd_forward",
    "cmd_replay",
    "cmd_send",
    "cmd_serve",
    "cmd_source",
    "cmd_spark_job",
    "cmd_stats",
    "cmd_tail",
    "cmd_top",
]


def cmd_replay(args: argparse.Namespace) -> int:
    """``evb replay`` (:mod:`orderer.apps.replay`). The ordering flags go over a base that the
    replay reads from INPUT (a data directory's recorded parameters): they are passed as a
    function of it."""
    from orderer.apps.replay import run_replay

    run_replay(
        args.input,
        settings=lambda base: sweep_from_flags(args, base),
        nscldaq=args.nscldaq,
        skip_unstamped=args.skip_unstamped,
        output=args.output,
        stats=args.stats,
        overwrite=args.overwrite,
        orderers=args.orderers,
        slice_ticks=args.slice_ticks,
        dt=args.dt,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.replay_only:
        from orderer.apps.demo import run_demo

        if args.orderers != 1:
            raise ConfigError(
                "--orderers", args.orderers, "the live demo's; --replay-only runs one orderer"
            )

        return run_demo(output_dir=args.output_dir, seed=args.seed)
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        raise ConfigError(
            "demo",
            "pyspark",
            "the live demo needs the spark extra (pip install 'evb[spark]'); "
            "evb demo --replay-only runs without it",
        )
    from orderer.spark.driver.demo import run_live_demo

    return run_live_demo(
        output_dir=args.output_dir,
        seed=args.seed,
        seconds=args.seconds,
        orderers=args.orderers,
        ui=None if args.ui == "off" else args.ui,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from orderer.service.server import RunningServer, serve

    settings = serve_settings(args)
    service = settings.service
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

    return asyncio.run(serve(settings.config, service, given=settings.given, ready=ready))


def cmd_spark_job(args: argparse.Namespace) -> int:
    from orderer.spark.driver.job import main as spark_job

    return spark_job(args.job_args)


# ------------------------------------------------------------------------ client commands


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    """How a client command reaches the orderer (the flags of
    :func:`~orderer.cli.arguments.add_target` but the address), as the client's keywords."""
    return {"security": security_from_args(args), "connect_timeout": args.connect_timeout}


def _int_list(flag: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(flag, text, "must be a comma-separated list of integers") from None


def _stalls(texts: list[str]) -> tuple[Any, ...]:
    from orderer.replay.synthetic import Stall

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


def _synthetic_run(args: argparse.Namespace) -> Any:
    """The ``SyntheticRun`` of ``evb send``'s flags; an error names the flag."""
    from orderer.replay.synthetic import SyntheticRun

    try:
        return SyntheticRun(
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
        raise renamed(error, _SYNTHETIC_FLAGS) from None


def cmd_send(args: argparse.Namespace) -> int:
    from orderer.apps.send import send_records, send_synthetic

    # the SourceClient keywords (agreed with orderer.client)
    options = {"batch_size": args.client_batch, "linger": args.linger, **_connection(args)}
    progress = not args.no_progress
    if args.nscldaq is not None:
        from orderer.apps.send import send_nscldaq

        if args.replay is not None:
            raise ConfigError("--nscldaq", None, "give either --replay or --nscldaq, not both")
        summary = send_nscldaq(
            args.target,
            args.nscldaq,
            skip_unstamped=args.skip_unstamped,
            end_sources=args.end_sources,
            resume=args.resume,
            client_options=options,
        )
    elif args.replay is not None:
        summary = send_records(
            args.target, args.replay, speed=args.speed, progress=progress, client_options=options
        )
    else:
        summary = send_synthetic(
            args.target,
            _synthetic_run(args),
            only_sources=_int_list("--only-sources", args.only_sources),
            speed=args.speed,
            end_sources=not args.no_end,
            progress=progress,
            client_options=options,
            resume=args.resume,
        )
    print(json.dumps(summary), flush=True)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from orderer.apps.tail import tail, tail_nscldaq

    if args.nscldaq is not None:
        if args.payload:
            raise ConfigError("--payload", True, "--nscldaq writes the payloads already")
        with _binary_out(args.nscldaq) as out:
            tail_nscldaq(
                args.target,
                out,
                from_offset=args.from_offset,
                until=args.until,
                follow=args.follow,
                **_connection(args),
            )
        return 0
    tail(
        args.target,
        sys.stdout,
        from_offset=args.from_offset,
        until=args.until,
        follow=args.follow,
        payload=args.payload,
        **_connection(args),
    )
    return 0


@contextlib.contextmanager
def _binary_out(name: str) -> Iterator[IO[bytes]]:
    """The file ``name`` opened for binary writing; ``-``: standard output."""
    if name == "-":
        yield sys.stdout.buffer
        return
    with open(name, "wb") as out:
        yield out


def cmd_stats(args: argparse.Namespace) -> int:
    from orderer.apps.stats import print_stats

    print_stats(
        args.target,
        sys.stdout,
        as_json=args.json,
        barriers=args.barriers,
        timeout=args.timeout,
        **_connection(args),
    )
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from orderer.apps.top import run_top

    return run_top(
        args.target,
        sys.stdout,
        interval=args.interval,
        once=args.once,
        recent=args.barriers,
        stdin=sys.stdin,
        timeout=args.timeout,
        **_connection(args),
    )


def cmd_source(args: argparse.Namespace) -> int:
    """``evb source dead|revive SOURCE``. The server refuses a source it does not know (exit 2,
    naming the known ones): a typo must not pass for a change to a running source."""
    from orderer.client import set_source_state

    text = args.source
    try:
        source = int(text)
    except ValueError:
        source = -1
    if not 0 <= source < 2**32:
        raise ConfigError("SOURCE", text, "must be a source id, an integer from 0 to 4294967295")
    from orderer.apps.run_control import run_orderers, source_state_everywhere

    orderers = run_orderers(args.target, timeout=args.timeout, **_connection(args))
    if orderers.sliced:
        rows = source_state_everywhere(
            orderers.targets, source, args.action == "dead", timeout=args.timeout,
            security=security_from_args(args),
        )  # fmt: skip
        print(json.dumps({"source": source, "orderers": rows}), flush=True)
        return 0
    state = set_source_state(
        args.target, source, args.action == "dead", timeout=args.timeout, **_connection(args)
    )
    print(
        json.dumps({"source": source, "was_known": state.was_known, "dead": state.dead}),
        flush=True,
    )
    return 0


def cmd_end_run(args: argparse.Namespace) -> int:
    """One orderer: its offset after the run's last fragment; a run over several
    (:mod:`orderer.apps.run_control`): each orderer's."""
    from orderer.apps.run_control import end_everywhere, run_orderers
    from orderer.client import end_run

    orderers = run_orderers(args.target, timeout=args.timeout, **_connection(args))
    if orderers.sliced:
        rows = end_everywhere(
            orderers.targets, security=security_from_args(args), timeout=args.timeout
        )
        print(json.dumps({"orderers": rows}), flush=True)
        return 0
    next_offset = end_run(args.target, timeout=args.timeout, **_connection(args))
    print(json.dumps({"next_offset": next_offset}), flush=True)
    return 0


def cmd_begin_run(args: argparse.Namespace) -> int:
    from orderer.apps.run_control import begin_everywhere, run_orderers
    from orderer.client import begin_run

    orderers = run_orderers(args.target, timeout=args.timeout, **_connection(args))
    if orderers.sliced:
        rows = begin_everywhere(
            orderers.targets, args.run, security=security_from_args(args), timeout=args.timeout
        )
        print(json.dumps({"orderers": rows}), flush=True)
        return 0
    begun = begin_run(args.target, args.run, timeout=args.timeout, **_connection(args))
    print(json.dumps({"run": begun.run, "start_offset": begun.start_offset}), flush=True)
    return 0


def cmd_forward(args: argparse.Namespace) -> int:
    """``evb forward``: one orderer's ordered output into another (:mod:`orderer.apps.forward`).
    It runs for a whole run (a Deployment's container in a cluster): its steps and reconnects
    are logged at info level on stderr."""
    import logging

    from orderer.apps.forward import forward

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    summary = forward(
        args.upstream,
        args.downstream,
        as_source=args.as_source,
        consumer=args.consumer,
        end_sources=not args.no_end,
        **_connection(args),
    )
    print(json.dumps(summary), flush=True)
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """``evb release``: the release of dead sources (:mod:`orderer.apps.release`), logged at
    info level on stderr as it runs; the releases as JSON at the end."""
    import asyncio
    import logging

    from orderer.apps.release import release_round, watch
    from orderer.client import AsyncSourceClient

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    connection = _connection(args)

    async def run() -> list[Any]:
        client = AsyncSourceClient(args.target, **connection)
        await client.start()  # the run's orderers, in order (one address with --peers: all)
        targets = client.targets
        await client.abort()
        if args.once:
            return await release_round(targets, **connection)
        return await watch(targets, interval=args.interval, **connection)

    released = asyncio.run(run())
    print(json.dumps({"released": [dataclasses.asdict(r) for r in released]}), flush=True)
    return 0


def cmd_consumers(args: argparse.Namespace) -> int:
    """``evb consumers``: each consumer's committed offset, lag (in fragments: the durable
    output it has not committed, and in seconds) and last commit; ``evb consumers delete
    NAME`` forgets one, releasing the output retention kept for it. Deleting an unknown name
    is bad input (exit 2), naming the known consumers: a typo must not look like a release
    that happened."""
    from orderer.client import delete_consumer, get_stats

    connection = {"timeout": args.timeout, **_connection(args)}
    if args.action == "delete":
        if args.name is None:
            raise ConfigError("NAME", None, "evb consumers delete needs the consumer's name")
        existed, lowest = delete_consumer(args.target, args.name, **connection)
        if not existed:
            stats = get_stats(args.target, barrier_log_limit=1, **connection)
            known = sorted(stats.consumers)
            raise ConfigError(
                "NAME", args.name, f"is not a known consumer (known: {', '.join(known) or 'none'})"
            )
        print(json.dumps({"deleted": args.name, "lowest": lowest}), flush=True)
        return 0
    if args.name is not None:
        raise ConfigError("NAME", args.name, "only evb consumers delete takes a name")
    from orderer.apps.console import consumers_tables, write

    stats = get_stats(args.target, barrier_log_limit=1, **connection)
    if args.json:
        print(json.dumps(dict(sorted(stats.to_json()["consumers"].items())), indent=1), flush=True)
    else:
        write(sys.stdout, lambda width, plain: consumers_tables(stats, width, plain=plain))
    return 0
