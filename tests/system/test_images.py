"""The built images (``make images``) run as the operator's objects run them: the orderer's
StatefulSet serving a client on the host, a forwarder's Deployment between two orderers and
stopped by SIGTERM, the SparkApplication's driver building a small run into events, a summary and
a report, and the operator's Deployment starting with no API server to reach.

Each container's user, read-only root, capabilities, volumes, command, arguments and variables
come from ``evb_operator.specs`` (or, for the operator, the rendered chart in ``manifests/``)
through :mod:`tests.system.pods`; the clients (``evb send``, ``stats``, ``end-run``) run on the
host from the project's environment, as a DAQ's would. Needs podman: ``make system``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.system.conftest import ORDERER_IMAGE, SPARK_IMAGE
from tests.system.pods import REPO, Volumes, podman, run_args

sys.path.append(str(REPO / "operator"))

from evb_operator import constants, validation
from evb_operator.specs import common as specs_common
from evb_operator.specs import forward as specs_forward
from evb_operator.specs import orderer as specs_orderer
from evb_operator.specs import spark as specs_spark

NAME, NAMESPACE = "run1", "daq"
START_TIMEOUT = 120.0
STOP_PROMPTLY = 10.0
"""Seconds a container may take from SIGTERM to its exit: well inside the grace periods."""


def _evb(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``evb`` from the host's environment (the project's venv)."""
    done = subprocess.run(
        [sys.executable, "-m", "orderer.cli", *args], capture_output=True, text=True,
        timeout=timeout, cwd=REPO,
    )
    assert done.returncode == 0, f"evb {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done


def _wait_for_log(container: str, text: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        logs = podman("logs", container, check=False)
        if text in logs.stdout + logs.stderr:
            return
        state = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
        assert state == "running", f"{container} {state} before {text!r}:\n{logs.stderr}"
        assert time.monotonic() < deadline, f"{container}: no {text!r} in {timeout} s"
        time.sleep(0.5)


def _published(container: str, port: int) -> str:
    """The host address of the container's ``port``."""
    out = podman("port", container, str(port)).stdout.strip().splitlines()[0]
    return out.replace("0.0.0.0", "127.0.0.1")


def _host_dir(path: Path, uid: int) -> Path:
    """A directory the pod's user owns (what fsGroup does for a claim)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "-R", f"{uid}:{uid}", str(path)], check=True)
    return path


def _orderer(
    start: Callable[..., str], tmp_path: Path, label: str, spec: dict[str, Any]
) -> tuple[str, str, str]:
    """An orderer container as the StatefulSet runs it, its ConfigMap written to a directory
    and its claim a directory; returns (container, gRPC address, metrics address)."""
    valid = validation.validate(spec)
    statefulset = specs_orderer.build_statefulset_spec(
        NAME, NAMESPACE, valid, default_image=ORDERER_IMAGE
    )
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = tmp_path / label / "config"
    config.mkdir(parents=True)
    for key, text in specs_orderer.build_configmap_spec(NAME, NAMESPACE, valid)["data"].items():
        (config / key).write_text(text)
    volumes = Volumes({"config": config, "data": _host_dir(tmp_path / label / "data", 10001)})
    ports = [f"--publish=127.0.0.1::{p['containerPort']}" for p in container["ports"]]
    name = start(*ports, *run_args(pod, container, volumes=volumes))
    _wait_for_log(name, "serving on port")
    return name, _published(name, constants.GRPC_PORT), _published(name, constants.METRICS_PORT)


def _stop(container: str, grace: int) -> tuple[float, int]:
    """``podman stop`` (SIGTERM, SIGKILL after ``grace`` s): seconds taken and exit status."""
    started = time.monotonic()
    podman("stop", "--time", str(grace), container, timeout=grace + 60)
    took = time.monotonic() - started
    code = podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip()
    return took, int(code)


def _send(target: str, fragments: int = 500) -> dict[str, Any]:
    sent = _evb("send", "--target", target, "--n-sources", "2", "--fragments", str(fragments),
                "--rate", "100000", "--speed", "0", "--no-progress")
    return dict(json.loads(sent.stdout.strip().splitlines()[-1]))


def _stats(target: str) -> dict[str, Any]:
    return dict(json.loads(_evb("stats", "--target", target, "--json").stdout))


ORDERER_SPEC = {"sources": [1, 2], "buildWindow": 0.2, "startupDelay": 0}


def test_the_orderer_image_serves_a_client_on_the_host(
    start_container: Callable[..., str], tmp_path: Path
) -> None:
    name, target, metrics = _orderer(start_container, tmp_path, "orderer", ORDERER_SPEC)
    sent = _send(target)
    deadline = time.monotonic() + 60
    while (stats := _stats(target))["totals"]["received"] < sent["fragments"] or not stats[
        "next_offset"
    ]:
        assert time.monotonic() < deadline, stats
        time.sleep(0.5)
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as reply:
        assert b"evb_" in reply.read()
    took, code = _stop(name, constants.TERMINATION_GRACE_SECONDS)
    assert code == 0 and took < STOP_PROMPTLY, (took, code)
    assert any((tmp_path / "orderer" / "data").iterdir())  # the logs are on the claim


def test_a_forwarder_between_two_orderers_stops_promptly_on_sigterm(
    start_container: Callable[..., str], tmp_path: Path
) -> None:
    """Before, ``evb forward`` (the Deployment's PID 1) ignored SIGTERM: killed after the grace
    period, exit 137."""
    _, lower, _ = _orderer(start_container, tmp_path, "lower", ORDERER_SPEC)
    _, upper, _ = _orderer(start_container, tmp_path, "upper", {"orderer": {"startupDelay": 0}})
    _send(lower)
    spec = {**ORDERER_SPEC, "upstreams": [{"target": lower}]}
    deployment = specs_forward.build_forward_spec(
        NAME, NAMESPACE, validation.validate(spec), default_image=ORDERER_IMAGE
    )
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    addresses = {specs_common.orderer_endpoint(NAME, NAMESPACE): upper}
    forwarder = start_container("--network=host", *run_args(pod, container, addresses=addresses))
    _wait_for_log(forwarder, "forwarding")
    deadline = time.monotonic() + 60
    while sum(s["queued"] for s in _stats(upper)["sources"].values()) < 1:
        assert time.monotonic() < deadline, "nothing forwarded"
        time.sleep(0.5)
    took, code = _stop(forwarder, 30)
    assert code == 143 and took < STOP_PROMPTLY, (took, code)  # 128 + SIGTERM


def test_the_spark_job_builds_a_small_run_into_events_summary_and_report(
    start_container: Callable[..., str], tmp_path: Path
) -> None:
    """The SparkApplication's driver as the Spark operator starts it (the image's entry point,
    ``driver``, spark-submit in client mode) with the local master instead of executor pods.
    Before, the job crashed at its end (no boost_histogram in the image): no summary, no report."""
    _, target, _ = _orderer(start_container, tmp_path, "orderer", ORDERER_SPEC)
    _send(target)
    _evb("end-run", "--target", target)
    output = _host_dir(tmp_path / "output", 10001)
    output_spec = {"path": "file:///output", "volumeClaim": "events"}
    spec = {**ORDERER_SPEC, "spark": {"dt": 100, "output": output_spec}}
    app = specs_spark.build_sparkapplication_spec(
        NAME, NAMESPACE, validation.validate(spec), default_image=SPARK_IMAGE
    )["spec"]
    driver = app["driver"]
    pod = {"securityContext": driver["podSecurityContext"], "volumes": app["volumes"]}
    container = {
        "image": app["image"],
        "securityContext": driver["securityContext"],
        "volumeMounts": driver["volumeMounts"],
        "env": driver.get("env", []),
        "args": ["driver", "--master", "local[1]", app["mainApplicationFile"],
                 *app["arguments"]],
    }
    addresses = {specs_common.orderer_endpoint(NAME, NAMESPACE): target}
    job = start_container(
        "--network=host",
        *run_args(pod, container, volumes=Volumes({"output": output}), addresses=addresses,
                  env={"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}),
    )
    done = podman("wait", job, timeout=600)
    logs = podman("logs", job, check=False)
    assert done.stdout.strip() == "0", logs.stdout[-3000:] + logs.stderr[-6000:]
    events = list((output / "events").rglob("*"))
    assert any(p.is_file() and p.stat().st_size > 0 for p in events), events
    (summary_file,) = (output / "runs").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary, summary_file
    assert (summary_file.parent / "report" / "index.html").is_file()
    assert list((summary_file.parent / "report").glob("*.png"))


def _operator_deployment() -> dict[str, Any]:
    documents = yaml.safe_load_all((REPO / "manifests" / "evb-operator.yaml").read_text())
    (deployment,) = [d for d in documents if d and d["kind"] == "Deployment"]
    return dict(deployment)


def test_the_operator_entry_point_starts_and_says_it_cannot_reach_the_api_server(
    start_container: Callable[..., str],
) -> None:
    """The chart's operator Deployment, without a Kubernetes API server to log in to: kopf
    starts (evb_operator.handlers imports in the image), says why it cannot go on (it keeps
    trying, as in a cluster whose API server is away), and stops promptly on SIGTERM."""
    pod = _operator_deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container = {**container, "image": ORDERER_IMAGE}
    operator = start_container(*run_args(pod, container))
    _wait_for_log(operator, "Cannot authenticate")  # kopf's LoginError: no in-cluster config
    logs = podman("logs", operator)
    text = logs.stdout + logs.stderr
    assert "ModuleNotFoundError" not in text and "ImportError" not in text, text
    took, code = _stop(operator, pod.get("terminationGracePeriodSeconds", 30))
    assert took < STOP_PROMPTLY, (took, code)
