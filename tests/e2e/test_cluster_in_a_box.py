"""Cluster in a box: the real operator (``kopf run``, against KMock, the harness of
test_operator.py) creates the children of an EventBuilder, and the test runs them as a kubelet
and the Spark operator would (``tests/e2e/kubelet.py``: what it honours, what it rewrites):
the StatefulSet's container as a real ``evb serve`` (its ConfigMap and Secret volumes as
files, its probes called), the SparkApplication through ``spark-submit`` in local mode.

Sources send to the Service; the events written equal a sequential glom of the ordered log, and
the results of an analysis stage (``spec.spark.stages``: a ConfigMap's Python file that the
driver mounts, the job's ``--stages``) a sequential run of it over those events; a
``buildWindow`` patch of the EventBuilder reaches the orderer (through the operator's
Configure); ``state: Ended`` ends the run and the job exits 0; deleting the EventBuilder
deletes the children. Mutual TLS with a bearer token (Secrets made from tests/certs.py).

The operator cannot resolve the Service's name either: it reaches the orderer through the
``evb.io/endpoint-override`` annotation, set to the loopback port chosen for the pod's gRPC
containerPort before the EventBuilder is created.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderer.client import OrderedStreamReader, SourceClient, get_stats
from orderer.wire.security import ChannelSecurity
from tests.certs import make_pki
from tests.e2e import kubelet
from tests.e2e import test_operator as harness
from tests.e2e.test_operator import EVB, NAMESPACE, KubernetesAPI, Operator, _object, until
from tests.spark.oracle import events_of, fragments_of, glom

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:read_binary is deprecated:DeprecationWarning"),
]

cluster = harness.cluster
"""KMock serving, the operator running against it (test_operator.py's fixture)."""

NAME = "box"
DT = 50
PAIRS = 400
"""Fragments per source and per half of the run (each half: PAIRS events of two fragments)."""
TOKEN = "box-token-0123456789"
JOB_TIMEOUT = 150.0
STAGES_KEY = "box_stages.py"
STAGES_MODULE = """\
import numpy as np
import pyarrow as pa

from orderer.stages import order_sensitive


@order_sensitive(schema=[("event", pa.int64()), ("running", pa.int64())], initial=lambda: 0)
def running(events, total):
    sums = np.cumsum(events.column("multiplicity").to_numpy().astype(np.int64)) + total
    return pa.table({"event": events.column("event"), "running": sums}), int(sums[-1])
"""
"""The user's stages, as the ConfigMap ``box-analysis`` holds them: one order-sensitive stage,
the running sum of the multiplicities in stream order (any other order gives other sums)."""


def _secret(name: str, files: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in files.items()},
    }


async def _create(api: KubernetesAPI, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.post(path, json=body)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def _tls_secrets(api: KubernetesAPI, tmp_path: Path) -> ChannelSecurity:
    """The orderer's, the Spark job's and the token Secrets; the sources' own security."""
    pki = make_pki(tmp_path / "pki", TOKEN)
    ca = pki["ca"].read_bytes()
    secrets = {
        "box-tls": {
            "tls.crt": pki["server_cert"].read_bytes(),
            "tls.key": pki["server_key"].read_bytes(),
            "ca.crt": ca,
        },
        "box-client": {
            "tls.crt": pki["client_cert"].read_bytes(),
            "tls.key": pki["client_key"].read_bytes(),
        },
        "box-token": {"daq": TOKEN.encode()},
    }
    for name, files in secrets.items():
        await _create(api, f"/api/v1/namespaces/{NAMESPACE}/secrets", _secret(name, files))
    return ChannelSecurity(
        root_certificates=ca,
        certificate_chain=pki["client_cert"].read_bytes(),
        private_key=pki["client_key"].read_bytes(),
        token=TOKEN,
    )


@pytest.mark.asyncio
async def test_the_generated_objects_run_as_a_cluster_would_run_them(
    cluster: tuple[KubernetesAPI, Operator], tmp_path: Path
) -> None:
    """One run with everything the objects carry: mutual TLS, a bearer token and the user's
    stages. The plaintext objects run for real as containers in ``make system``
    (tests/system/test_images.py); a second run here would cost half a minute of the suite's
    two cores for the one difference, the absent Secrets."""
    api, _ = cluster
    security = await _tls_secrets(api, tmp_path)
    # the job writes file:///events to the volume claim the operator mounts there (its root
    # filesystem is read-only, and /tmp is an emptyDir that goes with the pod)
    output = tmp_path / "driver-pod" / "events"
    spec: dict[str, Any] = {
        "sources": [1, 2],
        "buildWindow": 0.2,
        "startupDelay": 0,
        "spark": {
            "dt": DT,
            "output": {"path": "file:///events", "volumeClaim": "box-events"},
            "executors": {"instances": 1, "cores": 2},
            "triggerInterval": 0.5,
            "sparkConf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
            "stages": {"configMap": "box-analysis", "key": STAGES_KEY},
        },
        "tls": {"secretName": "box-tls", "mutual": True, "clientSecretName": "box-client"},
        "auth": {"tokenSecretRef": {"name": "box-token", "key": "daq"}},
    }
    await _create(
        api,
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "box-analysis", "namespace": NAMESPACE},
            "data": {STAGES_KEY: STAGES_MODULE},
        },
    )
    grpc_port = kubelet.free_port()
    endpoint = f"127.0.0.1:{grpc_port}"
    await _create(
        api,
        f"{EVB}/namespaces/{NAMESPACE}/eventbuilders",
        harness._eventbuilder(NAME, endpoint, **spec),
    )
    children = await until(lambda: harness._children(api, NAME), "the children")

    box = kubelet.Cluster(lambda resource, name: _object(api, resource, name), NAMESPACE)
    orderer = await asyncio.to_thread(
        kubelet.run_statefulset,
        box,
        children["StatefulSet"],
        tmp_path / "orderer-pod",
        ports={"grpc": grpc_port},
    )
    try:
        await _run(api, box, orderer, children, security, tmp_path, output)
    finally:
        orderer.stop()
    for where, generated, run in box.rewrites:
        print(f"rewritten: {where}: {generated} -> {run}")
    print("accepted, not enforced:", ", ".join(sorted(set(box.accepted))))


async def _run(
    api: KubernetesAPI,
    box: kubelet.Cluster,
    orderer: kubelet.Container,
    children: dict[str, dict[str, Any]],
    security: ChannelSecurity,
    tmp_path: Path,
    output: Path,
) -> None:
    # the kubelet: probes, then the StatefulSet controller's readyReplicas
    await asyncio.to_thread(orderer.wait_probe, "readinessProbe", harness.TIMEOUT)
    await asyncio.to_thread(orderer.wait_probe, "livenessProbe", harness.TIMEOUT)
    await _status(api, "apps/v1", "statefulsets", f"{NAME}-orderer", {"readyReplicas": 1})

    # the Spark operator: spark-submit, then the application's state
    submit = kubelet.spark_submit(box, children["SparkApplication"], tmp_path / "driver-pod")
    assert submit.argv[submit.argv.index("--master") + 1] == "local[2]"
    job_log = tmp_path / "spark-submit.log"
    with kubelet.started(submit, job_log) as job:
        await _status(
            api,
            "sparkoperator.k8s.io/v1beta2",
            "sparkapplications",
            f"{NAME}-spark",
            {"applicationState": {"state": "RUNNING"}},
        )
        await until(lambda: harness._ready(api, NAME, generation=1), "Ready=True at generation 1")
        # sources send to the Service, as a client in the cluster would name it
        source_pod = box.pod("source", {}, tmp_path / "source")
        target = box.resolve(f"{NAME}-orderer.{NAMESPACE}.svc:50051", source_pod, "source")
        assert target == f"127.0.0.1:{orderer.pod.ports['grpc']}"
        await asyncio.to_thread(_send, target, security, 0)

        # a live buildWindow patch reaches the orderer through the operator
        await harness._merge_patch(api, NAME, {"spec": {"buildWindow": 0.3}})
        await until(
            lambda: asyncio.to_thread(_window, target, security, 0.3),
            "the orderer's build window to become 0.3",
        )
        await asyncio.to_thread(_send, target, security, PAIRS)
        await until(lambda: harness._ready(api, NAME, generation=2), "Ready=True at generation 2")
        # the Service's metrics port reaches the orderer's metrics server
        metrics = box.resolve(
            f"{NAME}-orderer.{NAMESPACE}.svc.cluster.local:9090", source_pod, "scrape"
        )
        text = await asyncio.to_thread(_scrape, metrics)
        assert "evb_build_info" in text

        # state Ended -> EndRun; the job finishes by itself, exit status 0
        await harness._merge_patch(api, NAME, {"spec": {"state": "Ended"}})
        status = await asyncio.to_thread(job.wait, JOB_TIMEOUT)
        assert status == 0, job_log.read_text()[-5000:]
    await _status(
        api,
        "sparkoperator.k8s.io/v1beta2",
        "sparkapplications",
        f"{NAME}-spark",
        {"applicationState": {"state": "COMPLETED"}},
    )
    stats = await asyncio.to_thread(get_stats, target, security=security)
    assert stats.run_ended and stats.config.build_window == 0.3

    # the events written equal a sequential glom of the ordered log
    emitted = stats.totals.emitted
    assert emitted == 4 * PAIRS
    log = await asyncio.to_thread(_ordered_log, target, security, emitted)
    args = children["SparkApplication"]["spec"]["arguments"]
    expected = glom(
        fragments_of(log),
        int(args[args.index("--dt") + 1]),
        int(args[args.index("--max-fragments") + 1]),
        args[args.index("--timestamp-policy") + 1],
    )
    # the job names the run after the host of --target: the rewritten 127.0.0.1 gives "run"
    table = pq.read_table(output / "events" / "run=run")
    assert events_of(table) == expected
    assert sum(e.multiplicity == 2 for e in expected) == 2 * PAIRS
    summary = json.loads((output / "runs" / "run" / "summary.json").read_text())
    assert summary["fragments"] == emitted
    _check_stages(output, expected, args)

    # delete -> the children go, the finalizer is released; the kubelet then stops the pod
    response = await api.delete(f"{EVB}/namespaces/{NAMESPACE}/eventbuilders/{NAME}")
    assert response.status == 200
    await until(
        lambda: _object(api, "evb.io/v1alpha1/eventbuilders", NAME) is None,
        "the EventBuilder to be gone",
    )
    for resource, pattern in harness.CHILDREN.values():
        assert _object(api, resource, pattern.format(NAME)) is None, resource
    assert await asyncio.to_thread(orderer.stop) == 0, orderer.log.read_text()[-5000:]


def _check_stages(output: Path, expected: list[Any], args: list[str]) -> None:
    """The stage ran from the file the driver mounted: its results are a sequential run's over
    the events (the running sum of their multiplicities, in event order)."""
    assert args[args.index("--stages") + 1] == f"/etc/evb/stages/{STAGES_KEY}"
    stage = pq.read_table(output / "stages" / "running" / "run=run", columns=["event", "running"])
    multiplicities = np.array([e.multiplicity for e in expected], dtype=np.int64)
    assert sorted(zip(*stage.to_pydict().values(), strict=True)) == list(
        zip([e.event for e in expected], np.cumsum(multiplicities).tolist(), strict=True)
    )


async def _status(api: KubernetesAPI, group: str, plural: str, name: str, body: Any) -> None:
    """What a controller (StatefulSet, Spark operator) writes to its object's status."""
    prefix = "/api/v1" if group == "v1" else f"/apis/{group}"
    response = await api.patch(
        f"{prefix}/namespaces/{NAMESPACE}/{plural}/{name}/status",
        json={"status": body},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, await response.text()


def _send(target: str, security: ChannelSecurity, first: int) -> None:
    """PAIRS events of two fragments (one per source, within DT), after ``first``."""
    stamps = 1000 * np.arange(first, first + PAIRS, dtype=np.uint64) + 1000
    with SourceClient(target, sources=[1, 2], security=security) as source:
        source.send_batch(1, stamps)
        source.send_batch(2, stamps + 7)
        source.flush()
        source.wait_acked(timeout=harness.TIMEOUT)


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _window(target: str, security: ChannelSecurity, window: float) -> bool:
    return bool(get_stats(target, security=security).config.build_window == window)


def _ordered_log(target: str, security: ChannelSecurity, until_offset: int) -> pa.Table:
    from orderer.building.glom import fragment_rows

    reader = OrderedStreamReader(target, 0, until=until_offset, security=security)
    return pa.Table.from_batches([fragment_rows(batch) for batch in reader])


def test_a_field_the_harness_cannot_honour_fails(tmp_path: Path) -> None:
    """Generated objects (the operator's pure spec builders) with one field more: the harness
    refuses them naming the field, before it runs anything."""
    from evb_operator import validation
    from evb_operator.specs import orderer as specs_orderer
    from evb_operator.specs import spark as specs_spark

    valid = validation.validate({"sources": [1], "spark": {"dt": 10, "output": {"path": "s3a://b/o"}}})
    box = kubelet.Cluster(lambda resource, name: None, NAMESPACE)
    statefulset = specs_orderer.build_statefulset_spec(NAME, NAMESPACE, valid, default_image="evb")
    statefulset["spec"]["template"]["spec"]["containers"][0]["workingDir"] = "/srv"
    with pytest.raises(kubelet.Unhonoured, match=r"containers\[0\]\.workingDir"):
        kubelet.run_statefulset(box, statefulset, tmp_path)
    statefulset = specs_orderer.build_statefulset_spec(NAME, NAMESPACE, valid, default_image="evb")
    statefulset["spec"]["template"]["spec"]["hostNetwork"] = True
    with pytest.raises(kubelet.Unhonoured, match=r"template\.spec\.hostNetwork"):
        kubelet.run_statefulset(box, statefulset, tmp_path)
    app = specs_spark.build_sparkapplication_spec(NAME, NAMESPACE, valid, default_image="spark")
    app["spec"]["deps"] = {"pyFiles": ["local:///x.py"]}
    with pytest.raises(kubelet.Unhonoured, match=r"spec\.deps"):
        kubelet.spark_submit(box, app, tmp_path)
    app = specs_spark.build_sparkapplication_spec(NAME, NAMESPACE, valid, default_image="spark")
    app["spec"]["driver"]["env"] = app["spec"]["executor"]["env"] = [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    with pytest.raises(kubelet.Unhonoured, match=r"fieldPath: spec\.nodeName"):
        kubelet.spark_submit(box, app, tmp_path)
