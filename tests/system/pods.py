"""A pod's container as ``podman run`` arguments: the user, the read-only root, the dropped
capabilities, the volumes, the command, the arguments and the environment come from the object
the operator generates (``evb_operator.specs``) or the chart renders, never restated here.

What podman cannot take from the object is given by the caller as :class:`Volumes` (where each
volume's files are on this host: a ConfigMap's keys written to a directory, a claim as a
directory) and ``addresses`` (an in-cluster Service name replaced by the host address its
container publishes: there is no cluster DNS here).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PODMAN = REPO / "tools" / "images" / "podman.sh"
"""podman as ``make images`` runs it (runc, the project's containers.conf)."""


def podman(
    *args: str, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; fails the test with podman's stderr when ``check`` and it fails."""
    done = subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done


@dataclass(frozen=True)
class Volumes:
    """Host directories for the pod's volumes that are not emptyDirs, by volume name."""

    directories: dict[str, Path] = field(default_factory=dict)


def _security(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    pod_context = pod.get("securityContext", {})
    context = {**pod_context, **container.get("securityContext", {})}
    args = []
    if "runAsUser" in context:
        user = str(context["runAsUser"])
        if "runAsGroup" in context:
            user += f":{context['runAsGroup']}"
        args += ["--user", user]
    if "fsGroup" in pod_context:
        args += ["--group-add", str(pod_context["fsGroup"])]
    if context.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    for capability in context.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", capability]
    return args


def _mounts(pod: dict[str, Any], container: dict[str, Any], volumes: Volumes) -> list[str]:
    by_name = {v["name"]: v for v in pod.get("volumes", [])}
    args = []
    for mount in container.get("volumeMounts", []):
        volume = by_name.get(mount["name"], {})
        if "emptyDir" in volume:
            # writable by any user, as an emptyDir with fsGroup is for the pod
            args += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
            continue
        if mount["name"] not in volumes.directories:
            raise AssertionError(f"no host directory for the volume {mount['name']!r}")
        options = "ro" if mount.get("readOnly") else "rw"
        args += ["--volume", f"{volumes.directories[mount['name']]}:{mount['mountPath']}:{options}"]
    return args


def _env(container: dict[str, Any], extra: dict[str, str]) -> list[str]:
    args = []
    for variable in container.get("env", []):
        if "value" in variable:
            args += ["--env", f"{variable['name']}={variable['value']}"]
    for name, value in extra.items():
        args += ["--env", f"{name}={value}"]
    return args


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expand(word: str, variables: dict[str, str]) -> str:
    """``$(NAME)`` replaced by the container's variable ``NAME``, as the kubelet expands the
    command and arguments before the container starts (``$$`` is a literal ``$``; a reference
    to a variable the container does not have stays as written). podman passes arguments
    untouched, and ``evb serve --orderer-index $(EVB_ORDERER_INDEX)`` needs the expansion."""

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return variables.get(match.group(1), match.group(0))

    return _REFERENCE.sub(value, word)


def run_args(
    pod: dict[str, Any],
    container: dict[str, Any],
    *,
    volumes: Volumes | None = None,
    addresses: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """``podman run`` options, the image and its arguments for ``container`` of ``pod`` (a pod
    template's ``spec``). Variables set from the API (``valueFrom``) are left out; ``env``
    adds others (what the kubelet or the Spark operator would set: a StatefulSet pod's ordinal
    from its label, say), and the command and arguments are expanded from all of them
    (``$(NAME)``) as the kubelet does."""
    args = [*_security(pod, container), *_mounts(pod, container, volumes or Volumes())]
    args += _env(container, env or {})
    variables = {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}
    variables.update(env or {})
    command = [_expand(word, variables) for word in container.get("command") or []]
    if command:
        args += ["--entrypoint", command[0]]
    rest = [*command[1:], *(_expand(word, variables) for word in container.get("args", []))]
    for cluster_name, host_address in (addresses or {}).items():
        rest = [word.replace(cluster_name, host_address) for word in rest]
    return [*args, container["image"], *rest]
