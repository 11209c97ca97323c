"""One run over three orderers (``spec.orderers: 3``, docs/scale-out.md) with the built images,
as the operator's objects run it: the StatefulSet's three orderer pods, a source pod sending to
all three, the release Deployment's ``evb release``, one orderer killed and started again on its
volume in the middle of the run, and the SparkApplication's driver building the run from the
three into events that equal ``evb replay``'s from the three arrival logs.

Each container comes from ``evb_operator.specs.*`` through :mod:`tests.system.pods`, as in
``test_images.py``; what a cluster gives and podman does not is given here: each pod's ordinal
(the variable the kubelet takes from the ``apps.kubernetes.io/pod-index`` label) and the
headless Service's names of the orderers, mapped to a loopback port each (``addresses``).
Needs podman: ``make system``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from evb_operator import constants, validation
from evb_operator.specs import common as specs_common
from evb_operator.specs import orderer as specs_orderer
from evb_operator.specs import release as specs_release
from evb_operator.specs import spark as specs_spark
from orderer.client import get_stats
from orderer.errors import ServiceUnavailable
from orderer.stats import Stats
from tests.system.conftest import ORDERER_IMAGE, SPARK_IMAGE
from tests.system.pods import Volumes, podman, run_args
from tests.system.test_images import (
    NAME,
    NAMESPACE,
    START_TIMEOUT,
    _evb,
    _host_dir,
    _wait_for_log,
)

ORDERERS, SLICE_TICKS, DT = 3, 1_000_000, 100_000
"""10 ms slices of the synthetic runs' 100 MHz clock, about 10 fragments of each source per
slice at 1 kHz; the glom window of the README's walkthrough."""

SOURCES, FRAGMENTS, RATE = 4, 6000, 1000
"""6 s of data at 1 kHz per source, sent in real time (``--speed 1``): long enough to kill an
orderer in the middle and to start it again while the sources still send."""

KILL_AFTER = 500
"""Fragments the killed orderer has received when it is killed (about 1.5 s into the run): its
logs hold part of its share, and most of the run is still to come."""

SPEC: dict[str, Any] = {
    "sources": list(range(1, SOURCES + 1)),
    "orderers": ORDERERS,
    "sliceTicks": SLICE_TICKS,
    "buildWindow": 0.2,
    "startupDelay": 0,
    "spark": {"dt": DT, "output": {"path": "file:///output", "volumeClaim": "events"}},
}

KILLED = 1
"""The orderer killed in the middle of the run: neither the first (whose address ``evb
end-run`` is given) nor the last."""


def _free_ports(n: int) -> list[int]:
    """Loopback ports free now, one per orderer (the host side of each orderer's gRPC port)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ordinal(container: dict[str, Any], index: int) -> dict[str, str]:
    """The variables the kubelet sets from pod ``index``'s ordinal label (the downward API), as
    the container asks for them: podman has no pod labels to read."""
    path = f"metadata.labels['{constants.POD_INDEX_LABEL}']"
    found = {
        v["name"]: str(index)
        for v in container["env"]
        if v.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == path
    }
    assert found, f"no variable from {path} in {container['env']}"
    return found


def _answer(target: str, timeout: float = START_TIMEOUT) -> Stats:
    """The orderer's ``GetStats`` once it answers (it listens once its recovery is done)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return get_stats(target, timeout=5.0, connect_timeout=2.0)
        except ServiceUnavailable:
            assert time.monotonic() < deadline, f"{target}: no answer in {timeout} s"
            time.sleep(0.2)


def _state(container: str) -> str:
    return podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()


def _exit_code(container: str, timeout: float) -> int:
    return int(podman("wait", container, timeout=timeout).stdout.strip())


def _client(valid: validation.ValidSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The release Deployment's pod and its ``evb release`` container: a client of the run's
    orderers as the operator makes one (``specs_common.client_container``: the orderer's image,
    restricted, a writable /tmp). The source is that container with ``evb send``'s arguments,
    as a readout pod in the cluster would run it (the operator makes no source)."""
    deployment = specs_release.build_release_spec(
        NAME, NAMESPACE, valid, default_image=ORDERER_IMAGE
    )
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def _spark_driver(
    valid: validation.ValidSpec,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SparkApplication's driver as the Spark operator starts it (the image's entry point,
    ``driver``, spark-submit in client mode), with the local master instead of executor pods."""
    app = specs_spark.build_sparkapplication_spec(
        NAME, NAMESPACE, valid, default_image=SPARK_IMAGE
    )["spec"]
    driver = app["driver"]
    pod = {"securityContext": driver["podSecurityContext"], "volumes": app["volumes"]}
    container = {
        "image": app["image"],
        "securityContext": driver["securityContext"],
        "volumeMounts": driver["volumeMounts"],
        "env": driver.get("env", []),
        "args": ["driver", "--master", "local[1]", app["mainApplicationFile"], *app["arguments"]],
    }
    return pod, container


def test_a_run_over_three_orderers_survives_one_killed_and_builds_the_replayed_events(
    start_container: Callable[..., str], tmp_path: Path
) -> None:
    """The run's promise across an orderer's crash, with every part in its container: the
    source's stream to the killed orderer is cut and taken up again (everything not yet
    acknowledged sent again), the restarted orderer recovers its share from its volume, the
    release keeps looking through the crash and exits once the run has ended, having released
    nothing (no source went silent), and the job's events, built from the three orderers'
    ordered logs, are the simulator's from their three arrival logs: each fragment sent is in
    exactly one event."""
    valid = validation.validate(SPEC)
    statefulset = specs_orderer.build_statefulset_spec(
        NAME, NAMESPACE, valid, default_image=ORDERER_IMAGE
    )
    assert statefulset["spec"]["replicas"] == ORDERERS
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = tmp_path / "config"  # the ConfigMap, the same for every pod
    config.mkdir()
    for key, text in specs_orderer.build_configmap_spec(NAME, NAMESPACE, valid)["data"].items():
        (config / key).write_text(text)

    ports = _free_ports(ORDERERS)
    targets = [f"127.0.0.1:{port}" for port in ports]
    peers = specs_common.orderer_peers(NAME, NAMESPACE, ORDERERS)
    addresses = dict(zip(peers, targets, strict=True))
    data = [_host_dir(tmp_path / f"data-{k}", constants.RUN_AS_USER) for k in range(ORDERERS)]
    orderers = [
        start_container(
            f"--publish=127.0.0.1:{ports[k]}:{constants.GRPC_PORT}",
            *run_args(
                pod,
                container,
                volumes=Volumes({"config": config, "data": data[k]}),
                addresses=addresses,
                env=_ordinal(container, k),
            ),
        )
        for k in range(ORDERERS)
    ]
    for k, name in enumerate(orderers):
        _wait_for_log(name, "serving on port")
        role = _answer(targets[k]).slicing
        assert (role.orderers, role.index, role.slice_ticks) == (ORDERERS, k, SLICE_TICKS)
        assert list(role.peers) == targets  # --peers, as the headless Service names them

    release_pod, release = _client(valid)
    run = specs_common.run_targets(NAME, NAMESPACE, valid)
    releaser = start_container(
        "--network=host", *run_args(release_pod, release, addresses=addresses)
    )
    send = ["send", "--target", run, "--n-sources", str(SOURCES), "--fragments", str(FRAGMENTS),
            "--rate", str(RATE), "--no-progress"]  # fmt: skip
    source = start_container(
        "--network=host",
        *run_args(release_pod, {**release, "name": "source", "args": send}, addresses=addresses),
    )

    # orderer 1 killed once it has taken in part of the run, started again on its volume
    deadline = time.monotonic() + START_TIMEOUT
    while _answer(targets[KILLED]).totals.received < KILL_AFTER:
        assert time.monotonic() < deadline, "orderer 1 received too little"
        time.sleep(0.1)
    podman("kill", "--signal", "KILL", orderers[KILLED])
    assert _exit_code(orderers[KILLED], 60) == 137  # 128 + SIGKILL: no shutdown code ran
    assert _state(source) == "running", "the source finished before the kill"
    podman("start", orderers[KILLED])
    assert _answer(targets[KILLED]).slicing.index == KILLED
    assert _state(releaser) == "running"  # it skips a look where an orderer does not answer

    assert _exit_code(source, 300) == 0, podman("logs", source).stderr[-3000:]
    sent = json.loads(podman("logs", source).stdout.strip().splitlines()[-1])
    assert sent["reconnects"] >= 1, sent  # the kill cut its stream to orderer 1
    assert set(sent["acked"]) == {str(s) for s in SPEC["sources"]}, sent
    assert all(n >= FRAGMENTS for n in sent["acked"].values()), sent  # and barriers' copies

    ended = json.loads(_evb("end-run", "--target", targets[0]).stdout.strip().splitlines()[-1])
    assert [row["orderer"] for row in ended["orderers"]] == list(range(ORDERERS)), ended
    assert _exit_code(releaser, 120) == 0  # every orderer's run has ended
    released = json.loads(podman("logs", releaser).stdout.strip().splitlines()[-1])
    assert released == {"released": []}, released

    output = _host_dir(tmp_path / "output", constants.RUN_AS_USER)
    driver_pod, driver = _spark_driver(valid)
    job = start_container(
        "--network=host",
        *run_args(driver_pod, driver, volumes=Volumes({"output": output}), addresses=addresses,
                  env={"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}),
    )  # fmt: skip
    code = _exit_code(job, 600)
    logs = podman("logs", job, check=False)
    assert code == 0, logs.stdout[-3000:] + logs.stderr[-6000:]

    replayed_file = tmp_path / "replayed.parquet"
    _evb("replay", ",".join(str(d) for d in data), "--orderers", str(ORDERERS),
         "--slice-ticks", str(SLICE_TICKS), "--dt", str(DT), "--output", str(replayed_file),
         timeout=300)  # fmt: skip
    built = pq.read_table(sorted((output / "events").rglob("*.parquet")))
    replayed = pq.read_table(replayed_file)
    columns = replayed.schema.names  # the job's rows carry their run besides
    assert built.num_rows == replayed.num_rows > 0
    assert (
        built.select(columns).sort_by("event").to_pylist() == replayed.sort_by("event").to_pylist()
    )
    fragments = sum(len(row["fragments"]) for row in replayed.to_pylist())
    assert fragments == sent["fragments"]  # every one sent (and barrier), once: none lost
