"""The release of dead sources of a run over several orderers (``spec.orderers`` > 1): a
Deployment of one ``evb release`` container (docs/scale-out.md, "Release of a dead source").

Why it is needed: a source that has sent to two slices' owners has a watermark at every orderer,
so when it goes silent every orderer waits for it for ever; ``evb release`` ends it at every
orderer once it has been silent at all of them for the run's ``sourceTimeout``, and never in a
look where an orderer does not answer (a source that cannot reach a failed orderer is silent for
that reason, not dead). It is a client of the orderers like any source, so it runs beside them,
not in their pods.
"""

from __future__ import annotations

from typing import Any

from evb_operator import constants as c
from evb_operator.phases import RunPhase
from evb_operator.specs.common import (
    RELEASE,
    ExtraLabels,
    client_container,
    client_deployment,
    client_security,
    labels_for,
    run_targets,
)
from evb_operator.validation import ValidSpec

__all__ = ["RELEASE_RESOURCES", "build_release_spec", "release_args", "release_replicas"]

RELEASE_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "50m", "memory": "128Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
"""One ``GetStats`` per orderer a second, and a few ends of source now and then: a CPU limit
costs it nothing that matters (a look a little later), unlike the orderer's flushes."""


def release_args(name: str, namespace: str, valid: ValidSpec) -> list[str]:
    """``evb release`` over every orderer of the run, in index order, each reached at its own
    stable name; ``--connect-timeout``: how long it waits for an orderer
    (:data:`~evb_operator.constants.RELEASE_CONNECT_TIMEOUT_SECONDS`). The credentials are the
    pod's variables (``EVB_TLS_*``, ``EVB_TOKEN_FILE``), as every client's. Spelled here: ``evb
    release`` has no typed command in ``orderer.flags`` yet (a test reads these arguments with
    ``evb``'s own parser)."""
    return [
        "release",
        "--target",
        run_targets(name, namespace, valid),
        "--connect-timeout",
        repr(float(c.RELEASE_CONNECT_TIMEOUT_SECONDS)),
    ]


def release_replicas(valid: ValidSpec) -> int:
    """1 while the EventBuilder may still run; 0 once ``spec.state`` is Ended (no run begins
    again: :func:`build_release_spec` says why it matters)."""
    return 0 if valid.state == RunPhase.ENDED else 1


def build_release_spec(
    name: str, namespace: str, valid: ValidSpec, *, default_image: str, labels: ExtraLabels = None
) -> dict[str, Any]:
    """One ``evb release`` pod, with the orderer's image, its credentials as a client and
    restricted security contexts.

    Its life: ``evb release`` looks at every orderer every second and exits once every
    orderer's run has ended. A Deployment restarts it (restart policy Always, the only one a
    Deployment takes), which is what runs one after another need: raising ``spec.run`` ends the
    run at the orderers and begins the next, the release that saw every run ended exits, and the
    kubelet starts it again (after its back-off: 10 s, doubling while restarts come quickly, at
    most 5 min), to watch the new run. It fails and is restarted the same way when an orderer
    does not answer at its start (while the orderers' volumes are provisioned, say) within
    ``--connect-timeout``. What keeps it from restarting in a loop after the last run:
    ``spec.state: Ended`` scales it to 0 replicas (:func:`release_replicas`, patched by the
    operator's handler of ``spec.state``), as no run can begin again. A run ended by hand
    (``evb end-run``) while ``spec.state`` stays Running leaves it exiting at each start, at
    most once every 5 min (one ``GetStats`` per orderer each time): the cost of not knowing
    whether another run will begin. ``Recreate``: two releases never run at once."""
    image = default_image if valid.orderer_pod.image is None else valid.orderer_pod.image
    found = client_security(valid)
    pod_labels = labels_for(name, "release", labels)
    container = client_container(
        "release", valid, image, release_args(name, namespace, valid), found, RELEASE_RESOURCES
    )
    deployment = client_deployment(
        RELEASE, name, namespace, "release", pod_labels, release_replicas(valid), [container],
        found,
    )
    deployment["metadata"]["annotations"] = _release_check_skips()
    return deployment


def _release_check_skips() -> dict[str, str]:
    """The checks of the field (checkov reads these annotations) that do not apply to the
    release's Deployment, each with its reason, where the object is made."""
    reasons = [
        "CKV_K8S_8=evb release serves nothing to probe (a client); the kubelet restarts it when"
        " it exits",
        "CKV_K8S_9=evb release serves nothing to probe and nothing reaches it through a Service",
        "CKV_K8S_43=the image is named by its version tag (spec.orderer.image may give a digest)",
        "CKV_K8S_15=a versioned tag never changes (spec.orderer.imagePullPolicy may say Always)",
        "CKV2_K8S_6=evb release listens on no port: no ingress to restrict",
    ]
    return {f"checkov.io/skip{n}": reason for n, reason in enumerate(reasons, start=1)}
