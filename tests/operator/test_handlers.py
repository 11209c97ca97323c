"""``evb_operator/handlers.py`` in isolation: the error translation and the endpoint override
(the handlers themselves run against the API emulator in ``tests/e2e/test_operator.py``)."""

from __future__ import annotations

import kopf
import pytest

from evb_operator import handlers, kube
from orderer.errors import ConfigError, ServiceUnavailable

OVERRIDE = {"evb.io/endpoint-override": "127.0.0.1:1234"}


def test_the_endpoint_override_needs_the_operators_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVB_ALLOW_ENDPOINT_OVERRIDE", raising=False)
    assert handlers._endpoint("r", "daq", OVERRIDE) == "r-orderer.daq.svc:50051"
    monkeypatch.setenv("EVB_ALLOW_ENDPOINT_OVERRIDE", "1")
    assert handlers._endpoint("r", "daq", OVERRIDE) == "127.0.0.1:1234"
    assert handlers._endpoint("r", "daq", {}) == "r-orderer.daq.svc:50051"


def test_an_invalid_spec_is_a_permanent_error_with_a_status() -> None:
    patch = kopf.Patch()
    with pytest.raises(kopf.PermanentError, match=r"spec\.buildWindow"):
        handlers._validate({"buildWindow": -1}, patch, {}, 2)
    assert patch["status"]["phase"] == "Invalid"
    assert patch["status"]["observedGeneration"] == 2  # refused is acted on
    conditions = {c["type"]: c["status"] for c in patch["status"]["conditions"]}
    assert conditions == {"Ready": "False", "Valid": "False"}


def test_errors_are_translated_once() -> None:
    assert isinstance(handlers._orderer_error(ServiceUnavailable("down")), kopf.TemporaryError)
    assert isinstance(handlers._orderer_error(ConfigError("x", 1, "bad")), kopf.PermanentError)
    assert isinstance(handlers._kube_error(kube.KubeError(503, "busy")), kopf.TemporaryError)
    assert isinstance(handlers._kube_error(kube.KubeError(422, "invalid")), kopf.PermanentError)
