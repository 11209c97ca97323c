"""``evb_operator/handlers/common.py`` in isolation: the error translation and the endpoint
override (the handlers themselves run against the API emulator in ``tests/e2e/test_operator.py``),
and the handlers' registration, in the order kopf runs them."""

from __future__ import annotations

import kopf
import pytest

from evb_operator import kube
from evb_operator.handlers import common
from orderer.config import LIVE_PARAMETERS, camel_case
from orderer.errors import ConfigError, ServiceUnavailable

OVERRIDE = {"evb.io/endpoint-override": "127.0.0.1:1234"}


def test_the_endpoint_override_needs_the_operators_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVB_ALLOW_ENDPOINT_OVERRIDE", raising=False)
    assert common.endpoint("r", "daq", OVERRIDE) == "r-orderer.daq.svc:50051"
    monkeypatch.setenv("EVB_ALLOW_ENDPOINT_OVERRIDE", "1")
    assert common.endpoint("r", "daq", OVERRIDE) == "127.0.0.1:1234"
    assert common.endpoint("r", "daq", {}) == "r-orderer.daq.svc:50051"


def test_an_invalid_spec_is_a_permanent_error_with_a_status() -> None:
    patch = kopf.Patch()
    with pytest.raises(kopf.PermanentError, match=r"spec\.buildWindow"):
        common.validate({"buildWindow": -1}, patch, {}, 2)
    assert patch["status"]["phase"] == "Invalid"
    assert patch["status"]["observedGeneration"] == 2  # refused is acted on
    conditions = {c["type"]: c["status"] for c in patch["status"]["conditions"]}
    assert conditions == {"Ready": "False", "Valid": "False"}


def test_errors_are_translated_once() -> None:
    assert isinstance(common.orderer_error(ServiceUnavailable("down")), kopf.TemporaryError)
    assert isinstance(common.orderer_error(ConfigError("x", 1, "bad")), kopf.PermanentError)
    assert isinstance(common.kube_error(kube.KubeError(503, "busy")), kopf.TemporaryError)
    assert isinstance(common.kube_error(kube.KubeError(422, "invalid")), kopf.PermanentError)


def test_the_handlers_are_registered_in_the_order_kopf_runs_them() -> None:
    """kopf runs an event's handlers in the order they were registered, and keeps each one's
    progress under its id (``handlers/registrations.py``): ``reconcile`` first, then the field
    handlers, each under its function's name and field."""
    registry = kopf.get_default_registry()
    ours = [h for h in registry._changing.get_all_handlers() if h.fn.__module__.startswith("evb_")]
    assert [h.id for h in ours] == [
        "reconcile",
        "reconcile",
        "reconcile",
        *[f"configure_live/spec.{camel_case(name)}" for name in LIVE_PARAMETERS],
        "roll_orderer/spec.auth",
        "roll_orderer/spec.tls",
        "roll_orderer/spec.orderer",
        "update_upstreams/spec.upstreams",
        "begin_run/spec.run",
        "update_spark/spec.spark",
        "update_network_policy/spec.networkPolicy",
        "end_run/spec.state",
        "delete_children",
    ]
    assert (ours[0].reason, ours[1].reason, ours[2].initial) == ("update", "create", True)
    timers = [h.id for h in registry._spawning.get_all_handlers()]
    assert timers == ["refresh_status"]
    activities = [h.id for h in registry._activities.get_all_handlers()]
    assert activities[-4:] == ["configure_operator", "login", "kubernetesApi", "close_sessions"]
