"""The Spark job finds the orderer's TLS material and token where the operator puts them: the
``EVB_TLS_*``/``EVB_TOKEN_FILE`` variables of the SparkApplication's pods."""

from __future__ import annotations

import pytest

from evb_operator import specs, validation
from orderer.job_config import JobConfig

SPEC = {
    "sources": [1, 2],
    "tls": {"secretName": "run-tls", "mutual": True, "clientSecretName": "run-client"},
    "auth": {"tokenSecretRef": {"name": "run-token", "key": "daq"}},
    "spark": {"dt": 100, "output": {"path": "s3a://bucket/run"}},
}


def test_the_job_reads_the_security_variables_the_operator_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    children = specs.build_children(
        "run1",
        "daq",
        validation.validate(SPEC),
        orderer_image="evb:0.1.0",
        spark_image="evb-spark:0.1.0",
        operator_namespace="evb-system",
    )
    (app,) = [child for child in children if child["kind"] == "SparkApplication"]
    for role in ("driver", "executor"):
        env = {e["name"]: e["value"] for e in app["spec"][role]["env"]}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        args = JobConfig.from_argv(app["spec"]["arguments"])
        assert args.tls_ca == env["EVB_TLS_CA"]
        assert args.tls_cert == env["EVB_TLS_CERT"]
        assert args.tls_key == env["EVB_TLS_KEY"]
        assert args.token_file == env["EVB_TOKEN_FILE"]
        mounted = {m["mountPath"] for m in app["spec"][role]["volumeMounts"]}
        for path in (args.tls_ca, args.tls_cert, args.tls_key, args.token_file):
            assert path.rsplit("/", 1)[0] in mounted


def test_flags_win_over_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVB_TLS_CA", "/from/env.crt")
    args = JobConfig.from_argv(
        ["--target", "h:1", "--output", "o", "--tls-ca", "/from/flag.crt"]
    )
    assert args.tls_ca == "/from/flag.crt"
