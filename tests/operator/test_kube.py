"""``evb_operator/kube.py``: API paths of the kinds the operator manages (the calls themselves
run against the API emulator in ``tests/e2e/test_operator.py``)."""

from __future__ import annotations

import pytest

from evb_operator import kube


def test_paths_of_core_and_group_kinds() -> None:
    assert kube.resource_path("v1", "ConfigMap", "daq") == "/api/v1/namespaces/daq/configmaps"
    assert (
        kube.resource_path("apps/v1", "StatefulSet", "daq", "r-orderer")
        == "/apis/apps/v1/namespaces/daq/statefulsets/r-orderer"
    )
    assert (
        kube.resource_path("sparkoperator.k8s.io/v1beta2", "SparkApplication", "d", "s")
        == "/apis/sparkoperator.k8s.io/v1beta2/namespaces/d/sparkapplications/s"
    )


def test_an_unmanaged_kind_is_an_error() -> None:
    with pytest.raises(kube.KubeError, match="Pod"):
        kube.resource_path("v1", "Pod", "daq")


def test_no_client_before_login() -> None:
    with pytest.raises(kube.KubeError, match="not logged in"):
        kube.current()
