"""Run the objects the operator generated the way a kubelet and the Spark operator would, on
this machine, with no container runtime: the working tree (its virtualenv) stands in for both
images.

What the harness honours, field by field, is spelled out in the ``*_FIELDS`` tables below. A
field missing from them is one the harness cannot honour: :func:`check_fields` raises
:class:`Unhonoured` naming it, so the test fails instead of running something else than what
was generated. ``ACCEPTED`` marks fields that are accepted and NOT enforced (security contexts,
resources, sizes, images, restart policies); the test's closing report lists them.

What is rewritten, and only that:

- **paths**: every volume is materialised as files under a temporary root (``<root>/<mount
  path>``); every argument or environment value that is an absolute path (or a ``file://`` URI)
  under a mount path is mapped there, and so are the string values of the orderer's
  ``--config`` file (its ``dataDir``);
- **ports**: each ``containerPort`` gets a free loopback port; the ``--config`` file's
  ``listen`` (``[::]:<grpc containerPort>``) becomes ``127.0.0.1:<its port>`` and its
  ``metricsPort`` the metrics port's; probes on a container port go to its loopback port;
- **Service addresses**: an argument or environment value ``<svc>.<ns>.svc[.cluster.local]:<port>``
  or ``<svc>:<port>`` naming a Service in the API becomes ``127.0.0.1:<loopback port>``
  (Service port -> targetPort -> the pod's containerPort, the Service's selector checked
  against the pod's labels);
- **images**: a ``command`` is looked up in the virtualenv's ``bin`` (the image's PATH), and
  ``local:///opt/evb/orderer/...`` (the Spark image's link to the installed package) is the
  working tree's ``orderer/``.

What is added (what the Spark operator and the image would supply): ``--master local[N]``
(N = executor instances x cores, capped), ``--driver-memory``, ``spark.driver.cores``,
``spark.driver.host``/``bindAddress`` 127.0.0.1, ``spark.local.dir`` under the driver's root;
``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` (the virtualenv's python), ``SPARK_HOME`` and
``TMPDIR`` (the driver's /tmp mount); the orderer gets the test environment (PATH, PYTHONPATH)
under its container's ``env``.

A consequence of the Service rewrite: the Spark job names its run after the host of
``--target`` (``<name>-orderer...`` -> ``<name>``); from ``127.0.0.1`` it falls back to ``run``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.conftest import REPO, environment

VENV_BIN = Path(sys.executable).parent
IMAGE_FILES = {"/opt/evb/orderer": REPO / "orderer"}
"""The Spark image's files the harness maps to the working tree (Dockerfile.spark links
/opt/evb/orderer to the installed package)."""

ACCEPTED = "accepted, not enforced"
LEAF = "honoured"
Schema = Any
"""A field table: a mapping of field name -> table, ``[table]`` for a list, LEAF or ACCEPTED."""

Lookup = Callable[[str, str], dict[str, Any] | None]
"""(resource, name) -> the object in the API (its namespace), or None."""


class Unhonoured(AssertionError):
    """A generated field the harness cannot honour (named by its path)."""


def check_fields(value: Any, schema: Schema, where: str, accepted: list[str]) -> None:
    """Fail on any field of ``value`` that ``schema`` does not list; collect the ACCEPTED ones
    that are present in ``accepted``."""
    if schema == ACCEPTED:
        accepted.append(where)
        return
    if schema == LEAF:
        return
    if isinstance(schema, list):
        for i, item in enumerate(value):
            check_fields(item, schema[0], f"{where}[{i}]", accepted)
        return
    for key, sub in value.items():
        if key not in schema:
            raise Unhonoured(f"{where}.{key}: the harness cannot honour this field")
        check_fields(sub, schema[key], f"{where}.{key}", accepted)


TIMING = {
    k: LEAF
    for k in (
        "initialDelaySeconds",
        "periodSeconds",
        "failureThreshold",
        "timeoutSeconds",
        "successThreshold",
    )
}
PROBE_FIELDS = {
    "grpc": {"port": LEAF, "service": LEAF},
    "tcpSocket": {"port": LEAF},
    "httpGet": {"path": LEAF, "port": LEAF, "scheme": LEAF},
    **TIMING,
}
"""Timing fields are honoured as "probe until it succeeds, within the test's timeout"."""
KEY_REF = {"name": LEAF, "key": LEAF}
ENV_FIELDS = [
    {
        "name": LEAF,
        "value": LEAF,
        "valueFrom": {
            "fieldRef": {"fieldPath": LEAF},
            "secretKeyRef": KEY_REF,
            "configMapKeyRef": KEY_REF,
        },
    }
]
MOUNT_FIELDS = [{"name": LEAF, "mountPath": LEAF, "readOnly": ACCEPTED}]
"""``readOnly`` and ``defaultMode`` are applied as file modes, which root (the user the tests
run as here) does not obey: accepted, not enforced."""
ITEMS = [{"key": LEAF, "path": LEAF}]
VOLUME_FIELDS = [
    {
        "name": LEAF,
        "configMap": {"name": LEAF, "items": ITEMS, "defaultMode": ACCEPTED},
        "secret": {"secretName": LEAF, "items": ITEMS, "defaultMode": ACCEPTED},
        "emptyDir": {"sizeLimit": ACCEPTED},
        "persistentVolumeClaim": {"claimName": LEAF},
    }
]
CONTAINER_FIELDS = {
    "name": LEAF,
    "image": ACCEPTED,
    "imagePullPolicy": ACCEPTED,
    "command": LEAF,
    "args": LEAF,
    "ports": [{"name": LEAF, "containerPort": LEAF, "protocol": LEAF}],
    "env": ENV_FIELDS,
    "readinessProbe": PROBE_FIELDS,
    "livenessProbe": PROBE_FIELDS,
    "resources": ACCEPTED,
    "securityContext": ACCEPTED,
    "terminationMessagePolicy": ACCEPTED,  # no pod status here to hold the message
    "volumeMounts": MOUNT_FIELDS,
}
LABELS = {"labels": LEAF}
STATEFULSET_FIELDS = {
    "replicas": LEAF,
    "serviceName": LEAF,
    "selector": {"matchLabels": LEAF},
    "podManagementPolicy": LEAF,
    "updateStrategy": {"type": LEAF},
    "persistentVolumeClaimRetentionPolicy": ACCEPTED,
    "template": {
        "metadata": LABELS,
        "spec": {
            "automountServiceAccountToken": LEAF,
            "enableServiceLinks": LEAF,
            "terminationGracePeriodSeconds": LEAF,
            "securityContext": ACCEPTED,
            "containers": [CONTAINER_FIELDS],
            "volumes": VOLUME_FIELDS,
        },
    },
    "volumeClaimTemplates": [
        {
            "metadata": {"name": LEAF, "labels": LEAF},
            "spec": {
                "accessModes": LEAF,
                "resources": ACCEPTED,
                "storageClassName": ACCEPTED,
            },
        }
    ],
}
SERVICE_FIELDS = {
    "type": LEAF,
    "selector": LEAF,
    "ports": [
        {"name": LEAF, "port": LEAF, "targetPort": LEAF, "protocol": LEAF, "appProtocol": LEAF}
    ],
}
"""``type: ClusterIP`` only: the harness resolves the Service's name, nothing else."""
SPARK_POD = {
    "labels": LEAF,
    "podSecurityContext": ACCEPTED,
    "securityContext": ACCEPTED,
    "volumeMounts": MOUNT_FIELDS,
    "env": ENV_FIELDS,
}
SPARKAPPLICATION_FIELDS = {
    "type": LEAF,
    "pythonVersion": LEAF,
    "mode": ACCEPTED,
    "image": ACCEPTED,
    "imagePullPolicy": ACCEPTED,
    "mainApplicationFile": LEAF,
    "arguments": LEAF,
    "sparkVersion": LEAF,
    "restartPolicy": ACCEPTED,
    "driver": {**SPARK_POD, "cores": LEAF, "memory": LEAF, "serviceAccount": ACCEPTED},
    "executor": {**SPARK_POD, "instances": LEAF, "cores": LEAF, "memory": ACCEPTED},
    "volumes": VOLUME_FIELDS,
    "sparkConf": LEAF,
}
"""``mode: cluster`` runs as local mode (driver and executors in one JVM: their env must be
equal, and the executors' mounts be among the driver's); ``executor.memory`` has no meaning
there; ``restartPolicy``: the harness runs the job once and any failure fails the test."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pod:
    """One pod's network and filesystem on this machine."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    root: Path
    ports: dict[Any, int] = field(default_factory=dict)
    """containerPort number and name -> loopback port."""
    mounts: dict[str, Path] = field(default_factory=dict)
    """mount path -> its directory under ``root``."""
    rewrites: list[tuple[str, str, str]] = field(default_factory=list)
    """(where, generated value, value run): every rewrite made, for the report."""

    def path(self, value: str, where: str) -> str:
        """``value`` mapped under ``root`` when it is an absolute path (or a ``file://`` URI of
        one) under a mount path."""
        scheme = "file://" if value.startswith("file:///") else ""
        path = value.removeprefix(scheme)
        for mount in sorted(self.mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                mapped = scheme + str(self.mounts[mount]) + path[len(mount.rstrip("/")) :]
                self.rewrites.append((where, value, mapped))
                return mapped
        return value


class Cluster:
    """The API's objects (``lookup``) and the pods run from them, for Service resolution."""

    def __init__(self, lookup: Lookup, namespace: str) -> None:
        self.lookup = lookup
        self.namespace = namespace
        self.pods: list[Pod] = []
        """The pods a Service may select (the StatefulSet's)."""
        self.rewrites: list[tuple[str, str, str]] = []
        """(where, generated value, value run): every rewrite made, for the report."""
        self.accepted: list[str] = []
        """The ACCEPTED fields (accepted, not enforced) the objects run had."""

    def pod(self, name: str, labels: Mapping[str, str], root: Path) -> Pod:
        """A pod of this namespace whose rewrites go to this cluster's report."""
        return Pod(name, self.namespace, labels, root, rewrites=self.rewrites)

    def resolve(self, value: str, pod: Pod, where: str) -> str:
        """A Service address as the pod's loopback address (see the module's docstring)."""
        host, colon, port_text = value.rpartition(":")
        if not colon or not port_text.isdigit():
            return value
        parts = host.split(".")
        if len(parts) == 1:  # <svc>:<port>, through the pod's DNS search path
            name, namespace = parts[0], self.namespace
            if self.lookup("v1/services", name) is None:
                return value  # not a Service's address
        elif len(parts) >= 3 and parts[2:] in (["svc"], ["svc", "cluster", "local"]):
            name, namespace = parts[0], parts[1]
        else:
            return value
        assert namespace == self.namespace, f"{where}: {value}: another namespace"
        port = int(port_text)
        service = self.lookup("v1/services", name)
        assert service is not None, f"{where}: {value}: no Service {name} in {self.namespace}"
        targets = [p["targetPort"] for p in service["spec"]["ports"] if p["port"] == port]
        assert len(targets) == 1, f"{where}: {value}: Service {name} has no port {port}"
        target = targets[0]
        selector = service["spec"]["selector"]
        check_fields(service["spec"], SERVICE_FIELDS, f"Service {name}.spec", self.accepted)
        kind = service["spec"].get("type", "ClusterIP")
        assert kind == "ClusterIP", f"Service {name}.spec.type: {kind}, the harness runs ClusterIP"
        backends = [p for p in self.pods if all(p.labels.get(k) == v for k, v in selector.items())]
        assert len(backends) == 1, f"{where}: Service {name} selects {len(backends)} pods"
        loopback = f"127.0.0.1:{backends[0].ports[target]}"
        pod.rewrites.append((where, value, loopback))
        return loopback

    def value(self, text: str, pod: Pod, where: str) -> str:
        return self.resolve(pod.path(text, where), pod, where)

    def env(self, entries: list[dict[str, Any]], pod: Pod, where: str) -> dict[str, str]:
        """The container's variables, ``valueFrom`` read from the API as the kubelet does."""
        env: dict[str, str] = {}
        for i, entry in enumerate(entries):
            here = f"{where}.env[{i}]({entry['name']})"
            if "value" in entry:
                text = str(entry["value"])
            else:
                source = entry["valueFrom"]
                if "fieldRef" in source:
                    text = self._field(source["fieldRef"]["fieldPath"], pod, here)
                else:
                    ref = source.get("secretKeyRef") or source["configMapKeyRef"]
                    kind = "secret" if "secretKeyRef" in source else "configMap"
                    files = self._data(kind, ref["name"], here)
                    assert ref["key"] in files, f"{here}: {kind} {ref['name']} has no {ref['key']}"
                    text = files[ref["key"]].decode()
            env[entry["name"]] = self.value(text, pod, here)
        return env

    @staticmethod
    def _field(path: str, pod: Pod, where: str) -> str:
        known = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "status.podIP": "127.0.0.1",
        }
        if path not in known:
            raise Unhonoured(f"{where}.valueFrom.fieldRef.fieldPath: {path} is not provided")
        return known[path]

    def _data(self, kind: str, name: str, where: str) -> dict[str, bytes]:
        resource = "v1/secrets" if kind == "secret" else "v1/configmaps"
        obj = self.lookup(resource, name)
        assert obj is not None, f"{where}: {kind} {name} does not exist (the pod cannot start)"
        if kind == "secret":
            return {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
        files = {k: v.encode() for k, v in obj.get("data", {}).items()}
        files.update({k: base64.b64decode(v) for k, v in obj.get("binaryData", {}).items()})
        return files

    def volumes(
        self,
        volumes: list[dict[str, Any]],
        mounts: list[dict[str, Any]],
        pod: Pod,
        where: str,
        claims: tuple[str, ...] = (),
    ) -> list[Path]:
        """Each mounted volume as a directory under the pod's root; returns the read-only ones
        (made read-only once the caller has written what it rewrites)."""
        by_name = {v["name"]: v for v in volumes}
        read_only = []
        for mount in mounts:
            directory = pod.root / mount["mountPath"].lstrip("/")
            directory.mkdir(parents=True, exist_ok=True)
            pod.mounts[mount["mountPath"]] = directory
            if mount["name"] in claims:
                continue  # a volume claim: an empty directory that outlives the pod
            volume = by_name.get(mount["name"])
            assert volume is not None, f"{where}: no volume {mount['name']} for its mount"
            if "persistentVolumeClaim" in volume:
                continue  # likewise (a claim that exists: the test's to create)
            for kind in ("configMap", "secret"):
                if kind in volume:
                    self._materialise(volume[kind], kind, directory, where)
            if mount.get("readOnly"):
                read_only.append(directory)
        return read_only

    def _materialise(self, source: dict[str, Any], kind: str, directory: Path, where: str) -> None:
        name = source["secretName"] if kind == "secret" else source["name"]
        files = self._data(kind, name, where)
        items = source.get("items") or [{"key": k, "path": k} for k in files]
        for item in items:
            assert item["key"] in files, f"{where}: {kind} {name} has no key {item['key']}"
            path = directory / item["path"]
            path.write_bytes(files[item["key"]])
            path.chmod(source.get("defaultMode", 0o644) | 0o400)


def _read_only(directories: list[Path]) -> None:
    for directory in directories:
        directory.chmod(0o555)


# ----------------------------------------------------------------------------- the orderer


@dataclass
class Container:
    """A started container's process and what its probes call."""

    pod: Pod
    process: subprocess.Popen[bytes]
    spec: dict[str, Any]
    grace: float
    log: Path

    def probe(self, kind: str) -> bool:
        """One call of the container's ``kind`` probe (readinessProbe, livenessProbe)."""
        spec = self.spec[kind]
        if "grpc" in spec:
            port = self.pod.ports[spec["grpc"]["port"]]
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                try:
                    answer = stub.Check(
                        health_pb2.HealthCheckRequest(service=spec["grpc"].get("service", "")),
                        timeout=2,
                    )
                except grpc.RpcError:
                    return False
            return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
        if "tcpSocket" in spec:
            port = self.pod.ports[spec["tcpSocket"]["port"]]
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 2):
                return True
            return False
        import urllib.request

        get = spec["httpGet"]
        url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{self.pod.ports[get['port']]}"
        try:
            with urllib.request.urlopen(url + get["path"], timeout=2) as answer:
                return 200 <= answer.status < 400
        except OSError:
            return False

    def wait_probe(self, kind: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.probe(kind):
            assert self.process.poll() is None, f"the container exited; see {self.log}"
            assert time.monotonic() < deadline, f"{kind} never succeeded; see {self.log}"
            time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM, SIGKILL after terminationGracePeriodSeconds: the pod's deletion."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)


def run_statefulset(
    cluster: Cluster,
    statefulset: dict[str, Any],
    root: Path,
    *,
    ports: Mapping[str, int] | None = None,
) -> Container:
    """Pod 0 of ``statefulset``: volumes, command, args, env; its ``evb serve --config`` file
    gets loopback ports and mapped paths (module docstring); ``ports``: loopback ports chosen
    beforehand for named container ports (the others get free ones). Returns once started."""
    where = f"StatefulSet {statefulset['metadata']['name']}"
    spec = statefulset["spec"]
    check_fields(spec, STATEFULSET_FIELDS, f"{where}.spec", cluster.accepted)
    assert spec["replicas"] == 1, f"{where}.spec.replicas: {spec['replicas']}, the harness runs 1"
    template = spec["template"]
    labels = template["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items()), (
        f"{where}.spec.selector does not select its own pods"
    )
    pod_spec = template["spec"]
    # the harness mounts no API token and injects no Service variables: only "false" is honoured
    for flag in ("automountServiceAccountToken", "enableServiceLinks"):
        if pod_spec.get(flag, True) is not False:
            raise Unhonoured(f"{where}.spec.template.spec.{flag}: only false is honoured")
    (container,) = pod_spec["containers"]
    pod = cluster.pod(f"{statefulset['metadata']['name']}-0", labels, root)
    cluster.pods.append(pod)
    for port in container.get("ports", []):
        assert port.get("protocol", "TCP") == "TCP", f"{where}: port {port['name']} not TCP"
        loopback = (ports or {}).get(port["name"]) or free_port()
        pod.ports[port["containerPort"]] = pod.ports[port["name"]] = loopback
    claims = tuple(claim["metadata"]["name"] for claim in spec.get("volumeClaimTemplates", []))
    here = f"{where}.spec.template.spec.containers[0]"
    read_only = cluster.volumes(
        pod_spec.get("volumes", []), container.get("volumeMounts", []), pod, here, claims
    )
    args = [cluster.value(a, pod, f"{here}.args[{i}]") for i, a in enumerate(container["args"])]
    if "--config" in args:
        _serve_config(Path(args[args.index("--config") + 1]), container, pod, here)
    _read_only(read_only)
    command = container["command"]
    executable = VENV_BIN / command[0]
    assert executable.is_file(), f"{here}.command: {command[0]} is not in the image"
    env = {**environment(), **cluster.env(container.get("env", []), pod, here)}
    log = root / "container.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(executable), *command[1:], *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
        )
    grace = float(pod_spec.get("terminationGracePeriodSeconds", 30))
    return Container(pod, process, container, grace, log)


def _serve_config(path: Path, container: dict[str, Any], pod: Pod, where: str) -> None:
    """The orderer's config file (a mounted ConfigMap key): its listen address and metrics port
    must be the container's ports (else the Service could not reach it: the test fails); they
    become loopback ports; its paths are mapped."""
    config = yaml.safe_load(path.read_text())
    host, _, port = str(config["listen"]).rpartition(":")
    assert int(port) in pod.ports, f"{where}: config listen {config['listen']}: no containerPort"
    config["listen"] = f"127.0.0.1:{pod.ports[int(port)]}"
    pod.rewrites.append((f"{path.name}: listen", f"{host}:{port}", config["listen"]))
    if "metricsPort" in config:
        metrics = int(config["metricsPort"])
        assert metrics in pod.ports, f"{where}: config metricsPort {metrics}: no containerPort"
        config["metricsPort"] = pod.ports[metrics]
        pod.rewrites.append((f"{path.name}: metricsPort", str(metrics), str(pod.ports[metrics])))
    for key, value in config.items():
        if isinstance(value, str) and value.startswith("/"):
            config[key] = pod.path(value, f"{path.name}: {key}")
    path.write_text(yaml.safe_dump(config))


# ----------------------------------------------------------------------------- the Spark job


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkSubmit:
    argv: list[str]
    env: dict[str, str]
    pod: Pod
    partitions: int


def spark_submit(
    cluster: Cluster, app: dict[str, Any], root: Path, *, max_cores: int = 2
) -> SparkSubmit:
    """``spark-submit`` of a SparkApplication in local mode: master ``local[N]`` with N the
    executor cores it asks for (instances x cores, at most ``max_cores``), the driver's memory
    and cores, every ``sparkConf`` as ``--conf``, the main file, the arguments; env and volumes
    of the driver (its env equal to the executors', its mounts theirs and its own, such as the
    stages' file: one JVM runs both, so this does not show that the executors do without the
    driver's own mounts)."""
    import pyspark

    where = f"SparkApplication {app['metadata']['name']}"
    spec = app["spec"]
    check_fields(spec, SPARKAPPLICATION_FIELDS, f"{where}.spec", cluster.accepted)
    assert spec["type"] == "Python" and str(spec["pythonVersion"]) == "3", f"{where}.spec.type"
    assert spec["sparkVersion"] == pyspark.__version__, (
        f"{where}.spec.sparkVersion: {spec['sparkVersion']}, but Spark {pyspark.__version__} runs"
    )
    driver, executor = spec["driver"], spec["executor"]
    for key in ("env", "labels"):
        assert driver.get(key) == executor.get(key), (
            f"{where}.spec.executor.{key}: differs from the driver's (local mode runs both in one "
            "process)"
        )
    driver_mounts = driver.get("volumeMounts", [])
    for i, mount in enumerate(executor.get("volumeMounts", [])):
        assert mount in driver_mounts, (
            f"{where}.spec.executor.volumeMounts[{i}]: not the driver's (local mode runs both in "
            "one process, with the driver's mounts)"
        )
    pod = cluster.pod(f"{app['metadata']['name']}-driver", driver["labels"], root)
    here = f"{where}.spec.driver"
    read_only = cluster.volumes(spec.get("volumes", []), driver.get("volumeMounts", []), pod, here)
    _read_only(read_only)
    main = spec["mainApplicationFile"]
    assert main.startswith("local://"), f"{where}.spec.mainApplicationFile: {main} not local://"
    main_path = main.removeprefix("local://")
    (image_dir,) = [d for d in IMAGE_FILES if main_path.startswith(d + "/")]
    main_file = IMAGE_FILES[image_dir] / main_path[len(image_dir) + 1 :]
    assert main_file.is_file(), f"{where}.spec.mainApplicationFile: {main_file} missing"
    partitions = int(executor["instances"]) * int(executor["cores"])
    conf = {
        "spark.driver.cores": str(driver["cores"]),
        # what the Spark operator sets for a driver pod, here its loopback address
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        # the emptyDir local directories the Spark operator adds
        "spark.local.dir": str(root / "spark-local"),
        **{k: str(v) for k, v in spec.get("sparkConf", {}).items()},
    }
    argv = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        f"local[{min(partitions, max_cores)}]",
        "--name",
        app["metadata"]["name"],
        "--driver-memory",
        str(driver["memory"]),
    ]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    driver_env = cluster.env(driver.get("env", []), pod, here)
    args = spec.get("arguments", [])
    argv += [
        str(main_file),
        *(cluster.value(a, pod, f"{where}.spec.arguments[{i}]") for i, a in enumerate(args)),
    ]
    env = environment()
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_HOME=str(spark_home()),
        TMPDIR=str(pod.mounts.get("/tmp", root)),
    )
    env.update(driver_env)
    return SparkSubmit(argv, env, pod, partitions)


@contextlib.contextmanager
def started(submit: SparkSubmit, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The spark-submit process; killed (its process group) if still running at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            submit.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=submit.env,
            cwd=submit.pod.root,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
