"""Every pod this repository renders meets the Kubernetes Pod Security Standard "restricted"
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, which includes
"baseline"), plus a read-only root filesystem: the operator Deployment of the chart, the
orderer StatefulSet and the SparkApplication's driver and executor pods, for a plain spec and
one with every feature on (TLS, token, Spark, NetworkPolicy).

:func:`violations` is the check, written from the standard's table, one rule per block: no
library does it here, and a reader can hold it against the document.
"""

from __future__ import annotations

from typing import Any

import pytest

from evb_operator import specs, validation
from tests.operator.test_chart import GENERATOR

RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def violations(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks "restricted" (and the read-only root filesystem rule); [] if
    nothing does. ``pod`` is a PodSpec (``containers``, ``securityContext``, ``volumes``...)."""
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    containers = [
        *pod.get("initContainers", []),
        *pod.get("containers", []),
        *pod.get("ephemeralContainers", []),
    ]
    assert containers, "a pod without containers"

    def setting(container: dict[str, Any], name: str) -> Any:
        """A container's setting, else the pod's (the container's wins)."""
        own = (container.get("securityContext") or {}).get(name)
        return own if own is not None else pod_context.get(name)

    # baseline: host namespaces, privileged, host paths and ports, /proc, sysctls, seccomp
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(name):
            found.append(f"{name} is set")
    for sysctl in pod_context.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']} is not a safe sysctl")
    # restricted: volume types
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']} is of type {sorted(kinds)}")
    # restricted: seccomp RuntimeDefault or Localhost, on the pod or on every container
    for container in containers:
        who = f"container {container['name']}"
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{who} is privileged")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                found.append(f"{who} uses host port {port['hostPort']}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{who} has procMount {context['procMount']}")
        seccomp = setting(container, "seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{who} has no RuntimeDefault/Localhost seccomp profile")
        # restricted: no privilege escalation, spelled out on every container
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{who} does not set allowPrivilegeEscalation: false")
        # restricted: non-root, on the pod or on every container; never user 0
        if setting(container, "runAsNonRoot") is not True:
            found.append(f"{who} does not run as non-root")
        if setting(container, "runAsUser") == 0:
            found.append(f"{who} runs as user 0")
        # restricted: drop ALL capabilities, add back at most NET_BIND_SERVICE
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{who} does not drop ALL capabilities")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{who} adds capabilities {capabilities['add']}")
        # ours: a read-only root filesystem (writable places are volumes)
        if context.get("readOnlyRootFilesystem") is not True:
            found.append(f"{who} has a writable root filesystem")
    return found


def _spark_pod(app: dict[str, Any], role: str) -> dict[str, Any]:
    """The pod the Spark operator makes for ``role`` of a SparkApplication: its
    ``podSecurityContext`` and ``securityContext``, the volumes it mounts, host networking."""
    part = app["spec"][role]
    mounted = {m["name"] for m in part.get("volumeMounts", [])}
    return {
        "hostNetwork": part.get("hostNetwork", False),
        "securityContext": part.get("podSecurityContext"),
        "containers": [
            {
                "name": f"spark-kubernetes-{role}",
                "securityContext": part.get("securityContext"),
                "ports": [],
                "volumeMounts": part.get("volumeMounts", []),
            }
        ],
        "volumes": [v for v in app["spec"].get("volumes", []) if v["name"] in mounted],
    }


FULL = {
    "tls": {"secretName": "t", "mutual": True, "clientSecretName": "c"},
    "auth": {"tokenSecretRef": {"name": "k"}},
    "networkPolicy": {"enabled": True},
    "spark": {"dt": 10, "output": {"path": "file:///events", "volumeClaim": "events"}},
}


def _rendered_pods() -> dict[str, dict[str, Any]]:
    pods: dict[str, dict[str, Any]] = {}
    for values in (None, {"watchNamespaces": ["daq"]}):
        for obj in GENERATOR.render_chart(values):
            if obj["kind"] == "Deployment":
                pods[f"operator Deployment ({values})"] = obj["spec"]["template"]["spec"]
    for label, spec in (("plain", {"spark": FULL["spark"]}), ("full", FULL)):
        children = specs.build_children(
            "run",
            "daq",
            validation.validate(spec),
            orderer_image="evb:1",
            spark_image="evb-spark:1",
            operator_namespace="evb-system",
        )
        for child in children:
            if child["kind"] == "StatefulSet":
                pods[f"orderer StatefulSet ({label})"] = child["spec"]["template"]["spec"]
            if child["kind"] == "SparkApplication":
                for role in ("driver", "executor"):
                    pods[f"Spark {role} ({label})"] = _spark_pod(child, role)
    return pods


PODS = _rendered_pods()


def test_every_kind_of_pod_is_covered() -> None:
    kinds = {name.split(" (")[0] for name in PODS}
    assert kinds == {"operator Deployment", "orderer StatefulSet", "Spark driver", "Spark executor"}


@pytest.mark.parametrize("name", sorted(PODS))
def test_the_pod_meets_the_restricted_standard(name: str) -> None:
    assert violations(PODS[name]) == []


@pytest.mark.parametrize("name", sorted(PODS))
def test_every_read_only_pod_has_a_writable_tmp(name: str) -> None:
    pod = PODS[name]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        tmp = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
        assert len(tmp) == 1, f"{name}: {container['name']} has no /tmp volume"
        assert "emptyDir" in volumes[tmp[0]["name"]]


def test_the_check_catches_each_rule() -> None:
    """Each rule can fail: a good pod broken one way at a time."""
    good = PODS["orderer StatefulSet (full)"]
    assert violations(good) == []

    def broken(change: Any) -> list[str]:
        import copy

        pod = copy.deepcopy(good)
        change(pod, pod["containers"][0]["securityContext"])
        return violations(pod)

    cases = {
        "hostNetwork": lambda p, c: p.update(hostNetwork=True),
        "privileged": lambda p, c: c.update(privileged=True),
        "allowPrivilegeEscalation": lambda p, c: c.pop("allowPrivilegeEscalation"),
        "non-root": lambda p, c: (c.pop("runAsNonRoot"), p["securityContext"].pop("runAsNonRoot")),
        "user 0": lambda p, c: c.update(runAsUser=0),
        "drop ALL": lambda p, c: c.update(capabilities={"drop": ["NET_RAW"]}),
        "adds capabilities": lambda p, c: c.update(
            capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}
        ),
        "seccomp": lambda p, c: c.update(seccompProfile={"type": "Unconfined"}),
        "writable root": lambda p, c: c.update(readOnlyRootFilesystem=False),
        "hostPath": lambda p, c: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "host port": lambda p, c: p["containers"][0]["ports"].append(
            {"containerPort": 1, "hostPort": 1}
        ),
        "sysctl": lambda p, c: p["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
    }
    for what, change in cases.items():
        assert broken(change), f"breaking {what} went unnoticed"
