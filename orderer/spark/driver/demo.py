"""``evb demo`` (``make demo``): the whole path on one machine, for real.

A local orderer (``evb serve`` as a subprocess on loopback, data in ``OUTPUT/orderer-data``), six
synthetic data sources each streaming its fragments over gRPC from its own client (paced in real
time, with a hung source, a source delivering a late backlog, a heterogeneous barrier and a lost
end-run barrier), and the Spark job in local mode (``local[2]``) consuming the ordered stream
live, building events and writing Parquet, the run summary and the report, and running the
example stages (``examples/physics.py``) over the events. The run has physics
(:mod:`orderer.replay.physics`): triggers in coincidence, implants and decays with a half-life,
scalers. At the end: the summary, the coincidence peak of the Δt spectrum, what the stages found
beside what the run was generated with (:mod:`orderer.spark.driver.demo_physics`), and where the
report and the Parquet files are. About a minute and a half here.

``evb demo --replay-only`` is the older in-process demo (:mod:`orderer.apps.demo`, no gRPC, no
Spark).
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from orderer.apps.send import send_synthetic
from orderer.client import end_run
from orderer.errors import ServiceUnavailable
from orderer.job_config import JobConfig
from orderer.replay import synthetic
from orderer.replay.physics import Physics
from orderer.spark.driver import demo_physics, job
from orderer.spark.driver.checks import stages_plan
from orderer.spark.live.board import Board
from orderer.spark.live.page import LivePage
from orderer.stages.plan import Plan

__all__ = ["live_run", "run_live_demo"]

DT = 2_000
"""Glom window: 20 µs at the sources' 100 MHz clock, wide beside the triggers' spread (1 µs), so
that the report's Δt spectrum shows the coincidence peak and the flat background around it."""
PHYSICS = Physics(trigger_rate=300.0, trigger_jitter=100, background_rate=100.0, implant_rate=500.0)
"""300 triggers/s seen by sources 1-5 within 100 ticks, 100/s of random hits in each, 500
implants/s in source 1's 32 x 32 pixels decaying with a 20 ms half-life (about 10,000 pairs in
20 s: the fit's statistical error about 1.4 %), scalers read every 0.1 s by source 6."""
START_TIMEOUT = 60.0


def live_run(seed: int, seconds: float = 20.0) -> synthetic.SyntheticRun:
    """Six sources for ``seconds`` with :data:`PHYSICS` (source 1 the pixel detector, 6 the
    scalers), in batches of 10 with 20 ms jitter; source 4 hangs for 2 s, source 5 holds its
    data for 3 s then delivers it (late), source 1 sends type 4 at the first sync barrier,
    source 6 loses its end-run barrier."""
    return synthetic.SyntheticRun(
        n_sources=6,
        fragments_per_source=int(200 * seconds),
        rate=200.0,
        tick_rate=1e8,
        jitter=0.02,
        batch_size=10,
        stalls=(
            synthetic.Stall(source=4, start=0.2 * seconds, end=0.2 * seconds + 2.0),
            synthetic.Stall(source=5, start=0.6 * seconds, end=0.6 * seconds + 3.0, backlog=True),
        ),
        sync_barriers=2,
        heterogeneous_barrier=True,
        incomplete_barrier=6,
        payload_size=16,
        seed=seed,
        physics=PHYSICS,
    )


SLICE_TICKS = 1_000_000
"""T of ``evb demo --orderers N``: 10 ms of the demo's 100 MHz clock, many fragments of every
source a slice, many times the demo's dt (docs/scale-out.md, "Choosing T")."""


def _data_dir(output_dir: Path, k: int, orderers: int) -> Path:
    return output_dir / ("orderer-data" if orderers == 1 else f"orderer-{k}-data")


def _log(output_dir: Path, k: int, orderers: int) -> Path:
    return output_dir / ("orderer.log" if orderers == 1 else f"orderer-{k}.log")


class _Server:
    """``evb serve`` in a subprocess on a free loopback port."""

    def __init__(self, data_dir: Path, log: Path, *flags: str) -> None:
        command = [
            sys.executable,
            "-m",
            "orderer.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--stop-grace",
            "2",
            *flags,
        ]
        with log.open("w") as errors:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=errors, text=True
            )
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            line = self.process.stdout.readline() if selector.select(START_TIMEOUT) else ""
        if "listening on" not in line:
            self.stop()
            raise ServiceUnavailable(f"evb serve did not start; see {log}")
        self.target = "127.0.0.1:" + line.rsplit(":", 1)[1].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def _play(
    targets: list[str], spec: synthetic.SyntheticRun, ready: Path, errors: list[BaseException]
) -> None:
    """Every source from its own client (over every orderer of the run), once the Spark query
    has registered with the orderers; the end of run at each."""
    target = ",".join(targets)
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            if time.monotonic() > deadline:
                raise ServiceUnavailable("the Spark job did not start within 300 s")
            time.sleep(0.05)
        senders = [
            threading.Thread(
                target=send_synthetic,
                args=(target, spec),
                kwargs={"only_sources": [source], "progress": False},
                name=f"source-{source}",
            )
            for source in spec.source_ids
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        for orderer in targets:
            end_run(orderer)
    except BaseException as error:
        errors.append(error)


def _summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Per source", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("source", "fragments", "late", "rate (Hz)"):
        table.add_column(column, justify="right")
    for source, values in summary["sources"].items():
        late = values["late"]
        table.add_row(
            source,
            f"{values['fragments']:,}",
            f"[yellow]{late:,}[/yellow]" if late else "0",
            f"{values['rate_hz']}",
        )
    return table


def run_live_demo(
    output_dir: Path,
    seed: int,
    seconds: float = 20.0,
    orderers: int = 1,
    ui: str | None = "127.0.0.1:0",
) -> int:
    """The live demo into ``output_dir`` (replaced); exit status 0. ``orderers``: the run over
    that many orderers by time slices of :data:`SLICE_TICKS` (docs/scale-out.md), each an
    ``evb serve`` of its own, the sources routing by slice and the Spark job reading them all.
    ``ui``: where the run's live page is served while it is taken (None: no page); bound before
    anything starts, so that a port in use is one line."""
    page = planned = None
    if ui is not None:
        stages_file = demo_physics.examples_stages()
        planned = stages_plan(JobConfig(output="", dt=DT, stages=stages_file, ui=ui))
        page = LivePage(ui, Board(planned))
    try:
        return _demo(Path(output_dir), seed, seconds, orderers, page, planned)
    finally:
        if page is not None:
            page.close()


def _demo(
    output_dir: Path,
    seed: int,
    seconds: float,
    orderers: int,
    page: LivePage | None,
    planned: Plan | None,
) -> int:
    console = Console()
    output_dir = Path(output_dir).resolve()
    if output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spec = live_run(seed, seconds)
    sources = ",".join(str(s) for s in spec.source_ids)
    stages = demo_physics.examples_stages()
    console.rule("[bold]evb demo: orderer, gRPC sources and the Spark job, live")
    console.print(
        f"{spec.n_sources} sources for {seconds:g} s over gRPC, with physics: sources 1-5 see "
        f"{PHYSICS.trigger_rate:g} triggers/s within {PHYSICS.trigger_jitter} ticks of each "
        f"other, source 1 (32 x 32 pixels) {PHYSICS.implant_rate:g} implants/s decaying with a "
        f"half-life of {PHYSICS.half_life * 1e3:g} ms, source 6 is a scaler module. Source 4 "
        "hangs for 2 s, source 5 holds its data for 3 s and then delivers it (late), "
        "source 1 sends type 4 at the first sync barrier, source 6 loses its end-run barrier. "
        f"Spark (local[2]) builds events with dt = {DT} ticks ({DT / spec.tick_rate * 1e6:g} µs) "
        "as the data flows" + (f" and runs the example stages ({stages})." if stages else ".")
    )
    if stages is None:
        console.print("No examples/ beside the installed evb (a wheel): the demo runs no stages.")
    started = time.monotonic()
    servers = []
    try:
        for k in range(orderers):
            sliced = (
                ["--orderers", str(orderers), "--orderer-index", str(k),
                 "--slice-ticks", str(SLICE_TICKS)] if orderers > 1 else []
            )  # fmt: skip
            servers.append(_Server(
                _data_dir(output_dir, k, orderers), _log(output_dir, k, orderers),
                "--build-window", "2", "--startup-delay", "1", "--sources", sources, *sliced,
            ))  # fmt: skip
    except BaseException:
        for server in servers:
            server.stop()
        raise
    targets = [server.target for server in servers]
    for k, server in enumerate(servers):
        role = f"orderer {k} of {orderers}" if orderers > 1 else "orderer"
        console.print(
            f"{role}: {server.target} (data in {_data_dir(output_dir, k, orderers)}); watch it"
            f" live from another terminal: evb top --target {server.target}"
        )
    errors: list[BaseException] = []
    ready = _data_dir(output_dir, 0, orderers) / "consumers.json"
    player = threading.Thread(target=_play, args=(targets, spec, ready, errors), name="sources")
    player.start()
    if page is not None:
        page.start()
        console.print(f"Live page of the run (spectra filling as the data comes): {page.url}")
    spark = job.create_session("local[2]", app="evb-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        console.print("Spark job started; the sources start as soon as it reads the stream.")
        config = JobConfig(
            target=",".join(targets),
            dt=DT,
            output=str(output_dir / "spark"),
            run="demo",
            quiet=True,
            poll=0.5,
            stages=stages,
            ui=None if page is None else page.address,
        )
        result = job.run(spark, config, planned, None if page is None else page.board)
    finally:
        player.join()
        spark.stop()
        for server in servers:
            server.stop()
    if errors:
        raise errors[0]
    summary = result.summary
    console.print(
        f"\nDone in {time.monotonic() - started:.0f} s: {summary['fragments']:,} fragments "
        f"in {result.batches} micro-batches -> {summary['events']:,} events "
        f"(mean multiplicity {summary['multiplicity']['mean']}, "
        f"max {summary['multiplicity']['max']}) and {summary['barrier_rows']} barrier rows."
    )
    histogram = summary["multiplicity"]["histogram"]
    console.print("Multiplicity: " + ", ".join(f"{m}: {c:,}" for m, c in histogram.items()))
    console.print(_summary_table(summary))
    late = summary["late"]
    console.print(
        f"Late fragments: {late['fragments']:,} in {late['events_with_late']:,} events, "
        f"max lateness {late['max_lateness_seconds'] * 1e3:.1f} ms."
    )
    console.print(
        "Barriers: "
        + ", ".join(
            f"type {b['type']} from {b['source']} at offset {b['offset']}"
            for b in summary["barriers"]
        ),
        soft_wrap=True,
    )
    console.print(
        demo_physics.spectrum_peak(
            Path(result.report_path).parent, 2.0 * PHYSICS.trigger_jitter
        ).line()
    )
    if stages is not None:
        demo_physics.print_stage_results(console, summary, stages, PHYSICS, spec.source_ids)
    console.print()
    for label, path in (
        ("events", result.events_path),
        ("summary", result.summary_path),
        ("report", result.report_path),
        *(
            (f"orderer {k}" if orderers > 1 else "orderer", str(_data_dir(output_dir, k, orderers)))
            for k in range(orderers)
        ),
    ):
        console.print(f"{label + ':':9}{path}", soft_wrap=True)
    return 0
