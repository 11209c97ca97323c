"""The operator's own activities, not an EventBuilder's: its settings at startup, its login to
the Kubernetes API (and the children's client with it), its readiness probe and its cleanup.
Registered with kopf by :mod:`evb_operator.handlers.registrations`.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from evb_operator import crd, kube
from evb_operator.handlers.common import API_VERSION

__all__ = ["LOGIN_RETRY", "api_reachable", "close_sessions", "configure_operator", "login"]

LOGIN_RETRY = 5.0
"""Seconds between two logins while the API server refuses the credentials."""


def configure_operator(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Progress and the last handled spec in annotations under evb.io (the status subresource
    holds only what the CRD declares), and our own finalizer name."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=crd.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=crd.GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{crd.GROUP}/finalizer"
    settings.posting.level = logging.WARNING  # Events: our notices and handler failures only


async def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else the kubeconfig, loaded by the ``kubernetes`` package;
    the children's client takes the same configuration and runs in kopf's executor.

    The credentials are tried once (:meth:`kube.Kube.served`) before kopf gets them: kopf drops
    credentials the API server refused and, given the same ones again, exits (``Ran out of
    valid credentials``), a crash loop that a token being issued or a binding being created
    would end anyway. Refused, the login is retried instead, and :func:`api_reachable` keeps
    the operator unready meanwhile. Any other failure (no answer) is kopf's to retry."""
    info = kopf.login_via_client(settings=settings, **kwargs)
    client = kube.connect(executor=settings.execution.executor)
    try:
        await client.served(API_VERSION)
    except kube.KubeError as error:
        if error.status == 401:
            raise kopf.TemporaryError(
                f"the Kubernetes API refuses the operator's credentials ({error})",
                delay=LOGIN_RETRY,
            ) from None
    return info


async def api_reachable(**_: Any) -> str:
    """Readiness: ``/healthz`` (kopf's ``--liveness`` endpoint, which the chart's probes ask)
    runs the probes and answers 500 when one fails; without this one it answered 200 while the
    operator could not log in, or reach the API server at all. Ready means: the API server
    answers a discovery read of the EventBuilders' group with the operator's current
    credentials (kopf keeps a success for 10 s)."""
    try:
        await kube.current().served(API_VERSION)
    except kube.KubeError as error:
        raise kopf.PermanentError(f"cannot talk to the Kubernetes API: {error}") from None
    return "ok"


def close_sessions(**_: Any) -> None:
    kube.disconnect()
