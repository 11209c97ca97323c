"""RBAC is derived, not copied: every handler of ``evb_operator.handlers`` runs, on every path
that calls the Kubernetes API (create, spec changes, network policy on and off, Spark section
changed and removed, end of run, the status timer, deletion), with a spec that uses every
feature (TLS, mutual TLS, token, NetworkPolicy, Spark and its live page), through the operator's
real client (:mod:`evb_operator.kube` on the ``kubernetes`` package) against an in-process API
emulator that records every request. The (apiGroup, resource, verb) set of those requests, plus
what kopf itself needs, must equal exactly the set the chart renders: a verb added to the chart
without a use fails, and so does a new call the chart does not grant.

Only the orderer's client calls are stand-ins here (no orderer runs;
``tests/e2e/test_operator.py`` runs the real operator and a real orderer and checks their calls
against the chart too).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest

from evb_operator import handlers
from orderer import client as orderer_client
from orderer.config import OrdererConfig
from orderer.stats import BarrierCounts, RunSpan, Stats
from tests.operator.conftest import stats_answer
from tests.operator.kubernetes_api import calls, emulated, put_secret
from tests.operator.test_chart import GENERATOR, WATCHED

SPEC: dict[str, Any] = {
    "sources": [1, 2],
    "tls": {"secretName": "run-tls", "mutual": True, "clientSecretName": "run-client"},
    "auth": {"tokenSecretRef": {"name": "run-token"}},
    "networkPolicy": {"enabled": True, "allowedClients": [{"podSelector": {}}]},
    "spark": {
        "dt": 10,
        "output": {"path": "file:///events", "volumeClaim": "events"},
        "ui": 8080,
    },
    "upstreams": [{"target": "lower-orderer.daq.svc:50051", "asSource": 7}],
}

KOPF_NEEDS = {
    ("evb.io", "eventbuilders", "list"),  # the watch stream starts with a list
    ("evb.io", "eventbuilders", "watch"),
    ("evb.io", "eventbuilders", "patch"),  # finalizer, progress and diff-base annotations
    ("evb.io", "eventbuilders/status", "patch"),  # every patch.status of the handlers
    ("evb.io", "eventbuilders/finalizers", "update"),  # owner references blockOwnerDeletion
    ("", "events", "create"),  # kopf.event and handler failures
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),  # resource discovery
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
}
"""What kopf does on the operator's behalf (kopf/_cogs/clients, _core/reactor)."""
KOPF_WATCHING_NAMESPACES = {("", "namespaces", "list"), ("", "namespaces", "watch")}
"""kopf's namespace observer, when it runs with --namespace (a list of namespaces)."""


def _used_by_the_handlers(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str, str]]:
    async def stats(*_: Any, **__: Any) -> Stats:
        return stats_answer(
            sources={},
            barriers=BarrierCounts(by_type={}),
            config=OrdererConfig(build_window=20.0),
            run_ended=False,
            run=1,
        )

    async def control(*_: Any, **__: Any) -> Any:
        return OrdererConfig(build_window=20.0)

    async def end(*_: Any, **__: Any) -> int:
        return 0

    async def begin(*_: Any, **__: Any) -> RunSpan:
        return RunSpan(2, 0)

    monkeypatch.setattr(orderer_client, "get_stats_async", stats)
    monkeypatch.setattr(orderer_client, "configure_async", control)
    monkeypatch.setattr(orderer_client, "end_run_async", end)
    monkeypatch.setattr(orderer_client, "begin_run_async", begin)
    monkeypatch.setattr(kopf, "event", lambda *_, **__: None)
    body = {
        "apiVersion": "evb.io/v1alpha1",
        "kind": "EventBuilder",
        "metadata": {"name": "run", "namespace": "daq", "uid": "u-1"},
        "spec": SPEC,
    }
    common: dict[str, Any] = {
        "body": body,
        "spec": SPEC,
        "name": "run",
        "namespace": "daq",
        "labels": {},
        "annotations": {},
        "status": {},
        "patch": kopf.Patch(),
        "logger": logging.getLogger("test"),
    }
    no_policy = {**SPEC, "networkPolicy": {"enabled": False}}

    async def every_path() -> set[tuple[str, str, str]]:
        async with emulated() as (api, _):
            material = {"ca.crt": b"CA", "tls.crt": b"C", "tls.key": b"K", "token": b"t"}
            for secret in ("run-tls", "run-client", "run-token"):
                put_secret(api, "daq", secret, **material)
            await handlers.reconcile(**common)
            await handlers.configure_live(**{**common, "param": "buildWindow", "reason": "update"})
            await handlers.roll_orderer(**{**common, "reason": "update"})
            spark = SPEC["spark"]
            await handlers.update_spark(
                **{**common, "reason": "update", "old": spark, "new": spark}
            )
            await handlers.update_spark(**{**common, "reason": "update", "old": {}, "new": None})
            await handlers.update_network_policy(**{**common, "reason": "update"})
            await handlers.update_network_policy(
                **{**common, "reason": "update", "spec": no_policy}
            )
            await handlers.update_upstreams(**{**common, "reason": "update", "old": []})
            await handlers.update_upstreams(
                **{**common, "reason": "update", "old": [], "spec": {**SPEC, "upstreams": []}}
            )
            await handlers.begin_run(**{**common, "reason": "update", "old": 1, "new": 2})
            await handlers.end_run(**{**common, "new": "Ended"})
            await handlers.refresh_status(**common)
            await handlers.delete_children(**common)
            return calls(api)

    return asyncio.run(every_path())


def _granted(values: dict[str, Any] | None) -> set[tuple[str, str, str]]:
    granted = set()
    for obj in GENERATOR.render_chart(values):
        if obj["kind"] in ("ClusterRole", "Role"):
            for rule in obj["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted


def test_the_chart_grants_exactly_the_verbs_the_operator_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    used = _used_by_the_handlers(monkeypatch)
    # what the handlers do on their own
    assert ("", "secrets", "get") in used  # the operator's TLS material; never list or watch
    assert not {call for call in used if call[1] == "secrets" and call[2] != "get"}
    assert _granted(None) == used | KOPF_NEEDS
    assert _granted(WATCHED) == used | KOPF_NEEDS | KOPF_WATCHING_NAMESPACES


def test_a_verb_granted_without_use_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: an extra grant (list on secrets) is a difference."""
    used = _used_by_the_handlers(monkeypatch)
    assert _granted(None) | {("", "secrets", "list")} != used | KOPF_NEEDS
