"""The chart's alerts on a real Prometheus: every alert fires when its condition is made for
real and stays quiet on a healthy run.

One Prometheus (``prometheus`` from the distribution, a subprocess with a scrape and evaluation
interval of 1 s) scrapes several live ``evb serve --metrics-port`` processes at once, each
labelled as the PodMonitor's targets are (``namespace``, ``pod``, ``eventbuilder``): one healthy
run and one run per failure (a source that went silent, one never heard from, a late burst, an
incomplete barrier, a consumer that lags, a log volume that is full, one that is nearly full),
and one whose sources fail as the first two do before the run is ended (the source alerts go
quiet). Three runs are spread over 3 orderers each (``--orderers 3``, docs/scale-out.md): a
healthy one, quiet; one whose orderer 2 falls behind the other two (its slices' data stops
coming, while the sources' crossing watermarks keep them alive there: EvbOrdererLagging, once,
for that orderer); one whose sources fall silent and
whose orderer 2 is killed (EvbOrdererDown and the source alerts, each once for the run, not
once per orderer).
The rules are the chart's, rendered as ``tests/operator/test_chart_observability.py`` renders
them (every monitoring option on) and taken out of the PrometheusRule into a plain rules file;
the test's thresholds come through the chart's values, and every ``for:`` is rewritten to
:data:`FOR` in the rendered file (the chart has no value for it: a shift crew has no reason to
tune it, and the test cannot wait minutes). ``promtool check rules`` checks that file, and every
query of the chart's dashboard must return data on the healthy run.

Why one Prometheus for all: starting it and the servers is most of the module's time on two
shared cores, and the alerts are told apart by their ``pod`` label as they are in a cluster.
Needs root (the full and nearly full volumes are tmpfs mounts) and ``apt-get install
prometheus``; ``make system`` runs it. Nothing here is skipped: a missing tool is a failure.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python  # noqa: F401  (the chart renderer: missing, the module fails, never skips)
import numpy as np
import pytest
import yaml

from orderer.client import SourceClient, commit, end_run, get_stats
from tests.e2e.conftest import ServerProcess
from tests.operator.test_chart_observability import _NAME, MONITORING, _dashboard, render

NAMESPACE = "evb-test"
FOR = "2s"
"""Every ``for:`` of the chart, shortened: firing still means the condition held over more
than one evaluation, and a test need not wait minutes."""
VALUES = {
    "monitoring": {
        "podMonitor": {"enabled": True},
        "dashboard": {"enabled": True},
        "prometheusRule": {
            "enabled": True,
            "stalledSeconds": 4,
            "neverSeenSeconds": 4,
            "consumerLagFragments": 100,
            "ordererLagSeconds": 4,
            "ordererDownSeconds": 3,
        },
    }
}
"""Every option on; the thresholds in seconds and fragments scaled down to a test's run (the
fractions, late and free, keep the chart's defaults)."""
SLICE_TICKS = 100
"""T of the runs over 3 orderers: each round of the feed spans 3 slices, one of each
orderer's."""
SOURCE_TIMEOUT = 3.0
"""A silent source is dead after this (the healthy run's sources send every :data:`ROUND`)."""
ROUND = 0.2
"""Seconds between the healthy run's batches (and its consumer's commits)."""
COMMON = (
    "--build-window", "0.2", "--startup-delay", "0", "--source-timeout", str(SOURCE_TIMEOUT),
    "--sources", "1,2",
)
FIRE_TIMEOUT = 90.0
"""Generous: other test runs share the two cores."""
QUIET_WATCH = 12.0
"""The healthy run is watched at least this long after the failures were made: longer than the
slowest alert takes to fire (stalled: 4 s idle + 2 s for + a scrape and an evaluation)."""
VOLUME_BYTES = 16 << 20
HEALTHY = "healthy"
SLICED_HEALTHY = "sliced-healthy"
LAGGING = "sliced-lagging"
SLICED_DOWN = "sliced-down"
QUIET_RUNS = (HEALTHY, SLICED_HEALTHY)
FIRES_AT = {
    "EvbOrdererLagging": (LAGGING, {"orderer": "2", "pod": f"{LAGGING}-orderer-2"}),
    "EvbOrdererDown": (SLICED_DOWN, {}),
    "EvbSourceDead": ("silent-sources", {"source": "1"}),
    "EvbSourceStalled": ("silent-sources", {"source": "1"}),
    "EvbSourceNeverSeen": ("never-seen-source", {"source": "3"}),
    "EvbLateBurst": ("late-burst", {}),
    "EvbIncompleteBarriers": ("incomplete-barrier", {}),
    "EvbConsumerLag": ("consumer-lag", {"consumer": "spark"}),
    "EvbLogVolumeDegraded": ("full-volume", {}),
    "EvbLogVolumeNearlyFull": ("nearly-full-volume", {}),
}
"""Each alert of the chart: the run (``eventbuilder``) that makes its condition, and labels the
alert must carry."""
ONCE = {
    "EvbOrdererLagging": (LAGGING, {}),
    "EvbOrdererDown": (SLICED_DOWN, {}),
    "EvbSourceDead": (SLICED_DOWN, {"source": "1"}),
    "EvbSourceStalled": (SLICED_DOWN, {"source": "2"}),
}
"""Alerts of a run over 3 orderers whose cause every orderer (or, for the lag, one) sees: each
must be active once for the run, not once per orderer."""
ENDED = "ended-run"
QUIET_ONCE_ENDED = ("EvbSourceDead", "EvbSourceNeverSeen", "EvbSourceStalled")
"""The source alerts, which a run's end silences (``evb_run_ended``)."""
SETTLE = 3.0
"""Seconds from ``evb end-run`` until Prometheus has scraped the end and evaluated the rules
(1 s each), with a margin."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (apt-get install prometheus): the alerts need it")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rules_file(directory: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The chart's PrometheusRule as a plain rules file, ``for:`` rewritten to :data:`FOR`;
    returns the file and the rules by alert name."""
    (rule,) = [o for o in render(VALUES, [MONITORING]) if o["kind"] == "PrometheusRule"]
    groups = rule["spec"]["groups"]
    alerts: dict[str, dict[str, Any]] = {}
    for group in groups:
        for entry in group["rules"]:
            if "for" in entry:
                entry["for"] = FOR
            alerts[entry["alert"]] = entry
    path = directory / "evb-rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path, alerts


# ------------------------------------------------------------------------------------- the runs


class Volume:
    """A tmpfs of its own: a log volume that really fills up (needs root)."""

    def __init__(self, path: Path, size: int) -> None:
        path.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            pytest.fail(f"cannot mount a tmpfs (run as root): {mounted.stderr.strip()}")
        self.path = path

    def fill(self, leave: int = 0) -> None:
        """Write zeros until about ``leave`` bytes are free (0: until not a byte is left)."""
        with (self.path / "filler").open("ab", buffering=0) as out:
            for block in (64 << 10, 4096):
                chunk = bytes(block)
                try:
                    while shutil.disk_usage(self.path).free >= leave + block:
                        out.write(chunk)
                except OSError:
                    pass
            while leave == 0:
                try:
                    out.write(b"\0")
                except OSError:
                    break

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@dataclass
class Run:
    """One ``evb serve`` with its metrics endpoint, its ``pod`` label, the sources that send
    all along from its start (``feed``, with a consumer that commits all along, ``consumer``),
    and the failure the test makes (``act``, once Prometheus has scraped the run)."""

    pod: str
    act: Callable[[Run], None] | None = None
    feed: tuple[int, ...] = ()
    """Sources that send all along (the run's, from its first orderer's thread: :func:`_feed`)."""
    consumer: str | None = None
    flags: tuple[str, ...] = COMMON
    volume_bytes: int | None = None
    server: ServerProcess | None = None
    metrics_port: int = 0
    volume: Volume | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    clients: list[SourceClient] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    ended_at: float | None = None
    """``time.monotonic()`` when the test ended the run (``evb end-run``), if it did."""
    eventbuilder: str = ""
    """The run's name (the ``eventbuilder`` label); empty: the pod's."""
    index: int = 0
    orderers: list[Run] = field(default_factory=list)
    """The run's orderers, this one among them (set on each by :func:`_sliced`); empty: a run
    of one orderer."""
    starved: int | None = None
    """On a run's first orderer: the orderer whose slices the feed leaves out from now on."""

    def __post_init__(self) -> None:
        self.eventbuilder = self.eventbuilder or self.pod

    @property
    def target(self) -> str:
        assert self.server is not None
        return self.server.target

    def client(self) -> SourceClient:
        """A source client of the run: of all its orderers (routing by slice) or of this one."""
        targets = ",".join(o.target for o in self.orderers) if self.orderers else self.target
        client = SourceClient(targets, connect_timeout=30.0)
        self.clients.append(client)
        return client

    def start(self, root: Path) -> None:
        base = root / self.pod
        base.mkdir()
        if self.volume_bytes is not None:
            self.volume = Volume(base / "volume", self.volume_bytes)
            data = self.volume.path / "data"
        else:
            data = base / "data"
        (base / "logs").mkdir()
        self.server = ServerProcess(data, base / "logs", "--metrics-port", "0", *self.flags)
        self.server.start()
        assert self.server.process is not None and self.server.process.stdout is not None
        line = self.server.process.stdout.readline()
        if "metrics on port" not in line:
            raise RuntimeError(f"{self.pod}: evb serve said {line!r}, not its metrics port")
        self.metrics_port = int(line.rsplit(" ", 1)[1])

    def background(self, work: Callable[[], None]) -> None:
        """Run ``work`` in a thread until teardown; what it raises fails the quiet tests."""

        def guarded() -> None:
            try:
                work()
            except BaseException as error:
                self.errors.append(error)

        thread = threading.Thread(target=guarded, name=f"run-{self.pod}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        for client in self.clients:
            client.abort()
        if self.server is not None:
            self.server.stop()
        if self.volume is not None:
            self.volume.unmount()


def _send(client: SourceClient, source: int, timestamps: Any, barriers: Any = None) -> None:
    stamps = np.asarray(timestamps, dtype=np.uint64)
    if barriers is None:
        client.send_batch(source, stamps)
    else:
        client.send_batch(source, stamps, np.asarray(barriers, dtype=np.uint32))


def _wait_output(target: str, at_least: int) -> int:
    """The durable output's offset, once it reached ``at_least``."""
    deadline = time.monotonic() + FIRE_TIMEOUT
    while (offset := get_stats(target).next_offset) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{target}: the output stayed at {offset} < {at_least}")
        time.sleep(0.1)
    return offset


def _feed(run: Run) -> None:
    """Sources as they should be: every :data:`ROUND` each source of ``run.feed`` sends 15
    fragments in order, 20 ticks apart, through a client of all the run's orderers (3
    slices a round, one of each orderer's; every tenth round the first a barrier of each at
    the same timestamp: complete), and ``run.consumer`` commits everything durable so far at
    every orderer. Fragments of the ``starved`` orderer's slices are left out once set."""
    orderers = run.orderers or [run]

    def work() -> None:
        client = run.client()
        k = 0
        while not run.stopping.wait(ROUND):
            k += 1
            stamps = [k * 300 + i * 20 for i in range(15)]
            if run.starved is not None:
                stamps = [t for t in stamps if t // SLICE_TICKS % 3 != run.starved]
            barriers = [1 if k % 10 == 0 and i == 0 else 0 for i in range(len(stamps))]
            for source in run.feed:
                _send(client, source, stamps, barriers if any(barriers) else None)
            client.flush()
            if run.consumer is not None:
                for orderer in orderers:
                    commit(orderer.target, run.consumer, get_stats(orderer.target).next_offset)

    run.background(work)


def _sliced(name: str, act: Callable[[Run], None] | None = None, **fields: Any) -> list[Run]:
    """The 3 orderers of run ``name`` (pods ``name-orderer-K``); ``act`` and ``fields`` are
    the first orderer's, which acts for the run."""
    orderers = [
        Run(
            f"{name}-orderer-{k}", eventbuilder=name, index=k,
            flags=(*COMMON, "--orderers", "3", "--orderer-index", str(k),
                   "--slice-ticks", str(SLICE_TICKS)),
            **({"act": act, **fields} if k == 0 else {}),
        )
        for k in range(3)
    ]  # fmt: skip
    for orderer in orderers:
        orderer.orderers = orderers
    return orderers


def _lag(run: Run) -> None:
    """Orderer 2 of the run falls behind: its slices' data stops coming."""
    run.starved = 2


def _silent_then_down(run: Run) -> None:
    """Sources 1 and 2 send each orderer a slice's fragments once, then nothing (dead, stalled
    at every orderer); then orderer 2 is killed (kill -9)."""
    client = run.client()
    for source in (1, 2):
        _send(client, source, [10, 20, 130, 140, 250, 260])
    client.wait_acked(30)
    server = run.orderers[2].server
    assert server is not None
    server.kill()


def _silent_sources(run: Run) -> None:
    """Both sources send once, then nothing, without ending: dead after source_timeout,
    stalled after stalledSeconds."""
    client = run.client()
    for source in (1, 2):
        _send(client, source, [10, 20, 30])
    client.wait_acked(30)


def _late_burst(run: Run) -> None:
    """1,000 fragments per source in order, emitted; then 1,000 of source 1 below the
    high-water mark (a source's clock that jumped back): a third of the input is late."""
    client = run.client()
    for source in (1, 2):
        _send(client, source, np.arange(100_000, 101_000))
    client.wait_acked(30)
    _wait_output(run.target, 2000)
    _send(client, 1, np.arange(1000, 2000))
    client.wait_acked(30)
    _wait_output(run.target, 3000)
    late = get_stats(run.target).totals.late
    assert late > 0, "the burst was not late"


def _incomplete_barrier(run: Run) -> None:
    """Source 1 sends a barrier, source 2 none: barrier_timeout (4 x build window) resolves
    it incomplete."""
    client = run.client()
    _send(client, 1, [10], [1])
    _send(client, 2, [5])
    client.wait_acked(30)


def _consumer_lag(run: Run) -> None:
    """1,000 fragments emitted; the consumer committed 1 of them."""
    client = run.client()
    for source in (1, 2):
        _send(client, source, np.arange(10, 1010))
    client.wait_acked(30)
    _wait_output(run.target, 2000)
    commit(run.target, "spark", 1)


def _full_volume(run: Run) -> None:
    """The log volume filled to the last byte, then input: the write is refused (ENOSPC) and
    retried every second while the volume stays full."""
    assert run.volume is not None
    run.volume.fill()
    client = run.client()
    _send(client, 1, [10, 20, 30])
    client.flush()


def _nearly_full_volume(run: Run) -> None:
    """The log volume filled until 5% is free (the chart's default threshold: 10%)."""
    assert run.volume is not None
    run.volume.fill(leave=VOLUME_BYTES // 20)


def _ended_run(run: Run) -> None:
    """What the silent-sources and never-seen-source runs do (sources 1 and 2 send once and
    fall silent, 3 of 1-3 never sends), then the shift ends the run."""
    client = run.client()
    for source in (1, 2):
        _send(client, source, [10, 20, 30])
    client.wait_acked(30)
    end_run(run.target)
    run.ended_at = time.monotonic()


def _runs() -> list[Run]:
    return [
        Run(HEALTHY, feed=(1, 2), consumer="spark", volume_bytes=4 * VOLUME_BYTES),
        Run("silent-sources", _silent_sources),
        # sources 1-3 declared, 1 and 2 send all along, 3 never (a digitizer never connected)
        Run("never-seen-source", feed=(1, 2), flags=(*COMMON[:-1], "1,2,3")),
        Run(ENDED, _ended_run, flags=(*COMMON[:-1], "1,2,3")),
        Run("late-burst", _late_burst),
        Run("incomplete-barrier", _incomplete_barrier),
        Run("consumer-lag", _consumer_lag),
        Run("full-volume", _full_volume, volume_bytes=VOLUME_BYTES),
        Run("nearly-full-volume", _nearly_full_volume, volume_bytes=VOLUME_BYTES),
        *_sliced(SLICED_HEALTHY, feed=(1, 2), consumer="spark"),
        *_sliced(LAGGING, _lag, feed=(1, 2)),
        *_sliced(SLICED_DOWN, _silent_then_down),
    ]


# ------------------------------------------------------------------------------------ Prometheus


@dataclass
class Prometheus:
    """A running ``prometheus`` and its HTTP API."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as reply:
            answer = json.loads(reply.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/api/v1/query", query=expr)["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["alerts"]
        return found

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


def _start_prometheus(directory: Path, rules: Path, runs: list[Run]) -> Prometheus:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "evb",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{run.metrics_port}"],
                        "labels": {
                            "namespace": NAMESPACE,
                            "pod": run.pod,
                            "eventbuilder": run.eventbuilder,
                        },
                    }
                    for run in runs
                ],
            }
        ],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                _tool("prometheus"),
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + FIRE_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited {process.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=5) as reply:
                if reply.status == 200:
                    return prometheus
        except OSError:
            pass
        if time.monotonic() > deadline:
            prometheus.stop()
            raise RuntimeError(f"prometheus not ready: {log.read_text()}")
        time.sleep(0.2)


def _wait_scraped(prometheus: Prometheus, runs: list[Run]) -> None:
    """Until every run has been scraped (so counters have a sample before the failures: rate()
    and increase() need one)."""
    pods = {run.pod for run in runs}
    deadline = time.monotonic() + FIRE_TIMEOUT
    while True:
        seen = {r["metric"]["pod"] for r in prometheus.query("evb_fragments_late_total")}
        if seen >= pods:
            time.sleep(1.5)  # one more scrape of each
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"never scraped: {sorted(pods - seen)}")
        time.sleep(0.2)


@dataclass
class World:
    prometheus: Prometheus
    rules: Path
    alerts: dict[str, dict[str, Any]]
    runs: dict[str, Run]
    """By pod."""
    acted: float
    """``time.monotonic()`` once every failure was made."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("alerts")
    rules, alerts = rules_file(directory)
    runs = _runs()
    prometheus: Prometheus | None = None
    try:
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            list(pool.map(lambda run: run.start(directory), runs))
        for run in runs:
            if run.feed:  # once all the run's orderers are up
                _feed(run)
        prometheus = _start_prometheus(directory, rules, runs)
        _wait_scraped(prometheus, runs)
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            list(pool.map(lambda run: run.act(run) if run.act else None, runs))
        yield World(prometheus, rules, alerts, {run.pod: run for run in runs}, time.monotonic())
    finally:
        for run in runs:
            run.stop()
        if prometheus is not None:
            prometheus.stop()


# ------------------------------------------------------------------------------------- the tests


def test_promtool_accepts_the_rendered_rules(world: World) -> None:
    checked = subprocess.run(
        [_tool("promtool"), "check", "rules", str(world.rules)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(world.alerts)} rules found" in checked.stdout


def test_every_alert_of_the_chart_is_made_to_fire_here(world: World) -> None:
    assert sorted(world.alerts) == sorted(FIRES_AT)


@pytest.mark.parametrize("alert", sorted(FIRES_AT))
def test_the_alert_fires_when_its_condition_is_made(world: World, alert: str) -> None:
    run, labels = FIRES_AT[alert]
    _wait_firing(world, alert, run, labels)


def _wait_firing(
    world: World, alert: str, run: str, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Until ``alert`` fires for the run ``run`` with ``labels``; returns the active alerts."""
    wanted = {"alertname": alert, "namespace": NAMESPACE, "eventbuilder": run, **labels}
    deadline = time.monotonic() + FIRE_TIMEOUT
    while True:
        active = world.prometheus.alerts()
        if any(a["state"] == "firing" and wanted.items() <= a["labels"].items() for a in active):
            return active
        if time.monotonic() > deadline:
            pending = [a["labels"] for a in active if a["labels"]["alertname"] == alert]
            value = world.prometheus.query(world.alerts[alert]["expr"])
            errors = [e for r in world.runs.values() if r.eventbuilder == run for e in r.errors]
            raise AssertionError(
                f"{alert} did not fire for {run} in {FIRE_TIMEOUT} s; active: {pending}; "
                f"its expression gives {value}; errors: {errors}"
            )
        time.sleep(0.5)


@pytest.mark.parametrize("alert", sorted(ONCE))
def test_an_alert_of_a_run_over_three_orderers_is_active_once(world: World, alert: str) -> None:
    """Once it fires, and a few evaluations later (each orderer's condition had time to hold):
    one alert for the run's cause, pending or firing, not one per orderer."""
    run, labels = ONCE[alert]
    _wait_firing(world, alert, run, labels)
    time.sleep(SETTLE)
    wanted = {"alertname": alert, "eventbuilder": run, **labels}
    active = [
        a["labels"] for a in world.prometheus.alerts() if wanted.items() <= a["labels"].items()
    ]
    assert len(active) == 1, active


@pytest.mark.parametrize("healthy_run", QUIET_RUNS)
@pytest.mark.parametrize("alert", sorted(FIRES_AT))
def test_the_alert_stays_quiet_on_a_healthy_run(
    world: World, alert: str, healthy_run: str
) -> None:
    """Watched from the first scrape until well after every failure was made: the alert was
    never even pending for the healthy run (of one orderer, of three), its rule evaluated
    without error, and the healthy run exports every series its expression reads (a quiet
    alert over missing data proves nothing)."""
    time.sleep(max(0.0, world.acted + QUIET_WATCH - time.monotonic()))
    for run in world.runs.values():
        if run.eventbuilder == healthy_run:
            assert run.errors == []
    (rule,) = [
        r for g in world.prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]
        if r.get("name") == alert
    ]
    assert rule["health"] == "ok", rule
    for name in sorted(set(_NAME.findall(world.alerts[alert]["expr"]))):
        series = world.prometheus.query(f'{name}{{eventbuilder="{healthy_run}"}}')
        assert series, f"the healthy run exports no {name}"
    history = world.prometheus.query(
        f'count_over_time(ALERTS{{alertname="{alert}", eventbuilder="{healthy_run}"}}[1h])'
    )
    assert history == [], f"{alert} was active for the healthy run: {history}"
    fired = [a for a in world.prometheus.alerts() if a["labels"].get("alertname") == alert]
    assert fired, f"{alert} fired nowhere: the quiet run proves nothing"


@pytest.mark.parametrize("alert", QUIET_ONCE_ENDED)
def test_the_source_alerts_go_quiet_once_the_run_ended(world: World, alert: str) -> None:
    """A source that never came, went silent or died is nothing to act on once the shift ended
    the run: from the moment Prometheus saw ``evb_run_ended`` 1 the alert was not even pending
    for that run, whose sources are in the very state that fires it on the silent-sources and
    never-seen-source runs (before ``evb_run_ended``, all three kept firing after the end)."""
    time.sleep(max(0.0, world.acted + QUIET_WATCH - time.monotonic()))
    run = world.runs[ENDED]
    assert run.errors == [] and run.ended_at is not None
    assert world.prometheus.query(f'evb_run_ended{{eventbuilder="{ENDED}"}} == 1'), "no end"
    window = int(time.monotonic() - run.ended_at - SETTLE)
    assert window >= 5, f"only {window} s watched after the end"
    history = world.prometheus.query(
        f'count_over_time(ALERTS{{alertname="{alert}", eventbuilder="{ENDED}"}}[{window}s])'
    )
    assert history == [], f"{alert} was active after the run ended: {history}"


@pytest.mark.parametrize("healthy_run", QUIET_RUNS)
def test_every_dashboard_query_returns_data(world: World, healthy_run: str) -> None:
    """The dashboard's panels, on the same Prometheus, the namespace, eventbuilder and pod
    variables set to a healthy run (of one orderer, of three; every pod of it): each query has
    a series (a panel without data looks like a quiet one)."""
    dashboard = _dashboard(render(VALUES, [MONITORING]))
    empty, queries = [], 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries += 1
            expr = (
                target["expr"]
                .replace("$namespace", NAMESPACE)
                .replace("$eventbuilder", healthy_run)
                .replace("$pod", ".+")
                .replace("$__rate_interval", "1m")
            )
            if not world.prometheus.query(expr):
                empty.append(f"{panel['title']}: {expr}")
    assert queries >= 20
    assert empty == []
