"""``spec.resetOnBeginRun``, ``spec.run`` and ``spec.upstreams`` (``evb_operator/crd/runs.py``)
without an API server: what each renders (the orderer's ConfigMap, the forwarders' Deployment:
pods, containers, arguments parsed by ``evb`` itself), what validation refuses with which
message, and the transition rules' messages evaluated by a real CEL engine (cel-python)."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
import yaml

from evb_operator import constants as c
from evb_operator import crd, specs, validation
from evb_operator.crd.runs import RUN_RULES
from evb_operator.validation import InvalidSpec
from orderer.cli import build_parser
from orderer.config import LIVE_PARAMETERS
from orderer.service.settings import configs_from_mapping
from tests.operator.conftest import validate_builtin

UPSTREAMS: list[dict[str, Any]] = [
    {"target": "lower-a-orderer.daq.svc:50051"},
    {"target": "10.0.0.7:50051", "asSource": 9, "consumer": "to-top"},
    {"target": "[fd00::7]:50051"},
]


def _children(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    children = specs.build_children(
        "top",
        "daq",
        validation.validate(spec),
        orderer_image="evb:0.1.0",
        spark_image="evb-spark:0.1.0",
    )
    return {child["kind"]: child for child in children}


def _serve_config(spec: dict[str, Any]) -> dict[str, Any]:
    text = _children(spec)["ConfigMap"]["data"][c.CONFIG_FILE]
    config: dict[str, Any] = yaml.safe_load(text)
    return config


# ----------------------------------------------------------------------------- resetOnBeginRun


@pytest.mark.parametrize("reset", [False, True])
def test_reset_on_begin_run_reaches_the_orderer_through_its_config_file(reset: bool) -> None:
    spec = {} if not reset else {"resetOnBeginRun": True}
    config, _ = configs_from_mapping(_serve_config(spec))
    assert config.reset_on_begin_run is reset
    assert validation.validate(spec).orderer.reset_on_begin_run is reset


def test_reset_on_begin_run_is_immutable_not_live() -> None:
    """Not a Configure parameter (the orderer reads it at start) and refused once set: the
    orderer replays its log with the rule it started with."""
    assert "reset_on_begin_run" not in LIVE_PARAMETERS
    (rule,) = [r for r in RUN_RULES if r.path == ("resetOnBeginRun",)]
    assert rule.cel == "self == oldSelf" and "replays its log" in rule.message
    with pytest.raises(InvalidSpec, match=r"^spec\.resetOnBeginRun: .*boolean"):
        validation.validate({"resetOnBeginRun": "yes"})


# ----------------------------------------------------------------------------- run


def test_the_orderer_starts_with_the_spec_run() -> None:
    """``run`` in the config file is ``evb serve --run``; the flags do not carry it, so a raise
    does not change the pod template (and roll the pod)."""
    assert validation.validate({}).run == 1
    _, service = configs_from_mapping(_serve_config({"run": 7}))
    assert service.run == 7
    statefulset = _children({"run": 7})["StatefulSet"]
    assert statefulset == _children({"run": 8})["StatefulSet"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert build_parser().parse_args(container["args"]).run is None  # the file's holds


@pytest.mark.parametrize("run", [0, -1, "2", 1.5, True])
def test_a_bad_run_is_refused_naming_the_field(run: Any) -> None:
    with pytest.raises(InvalidSpec) as caught:
        validation.validate({"run": run})
    assert caught.value.field == "spec.run"


def _cel(rule: crd.Rule, new: Any, old: Any, expression: str | None = None) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression or rule.cel))
    activation = {"self": celpy.json_to_cel(new), "oldSelf": celpy.json_to_cel(old)}
    return program.evaluate(activation)


def test_lowering_the_run_is_refused_by_the_api_server_naming_both_values() -> None:
    (rule,) = [r for r in RUN_RULES if r.path == ("run",)]
    assert _cel(rule, 3, 2) and _cel(rule, 2, 2)
    assert not _cel(rule, 1, 2)
    assert rule.message_expression is not None
    message = _cel(rule, 1, 2, rule.message_expression)
    assert message == "run cannot be lowered from 2 to 1: run numbers increase from run to run"
    entry = crd.SPEC_SCHEMA["properties"]["run"]["x-kubernetes-validations"]
    assert {"rule": rule.cel, "message": rule.message,
            "messageExpression": rule.message_expression} in entry  # fmt: skip


def test_an_ended_eventbuilder_begins_no_more_runs() -> None:
    (rule,) = [r for r in RUN_RULES if r.path == () and "oldSelf" in r.cel]
    ended = {"state": "Ended", "run": 1}
    assert not _cel(rule, {**ended, "run": 2}, ended)
    assert _cel(rule, ended, ended)
    assert _cel(rule, {"state": "Running", "run": 2}, {"state": "Running", "run": 1})
    assert rule.field == "spec.run"


# ----------------------------------------------------------------------------- upstreams


def test_no_upstreams_no_forwarders() -> None:
    assert "Deployment" not in _children({})
    assert "Deployment" not in _children({"upstreams": []})


def test_each_upstream_is_one_forward_container_into_this_orderer() -> None:
    deployment = _children({"upstreams": UPSTREAMS, "orderer": {"image": "reg/evb:2"}})[
        "Deployment"
    ]
    validate_builtin(deployment)
    assert deployment["metadata"]["name"] == "top-forward"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    containers = pod["spec"]["containers"]
    assert [x["name"] for x in containers] == ["forward-0", "forward-1", "forward-2"]
    parser = build_parser()
    parsed = [parser.parse_args(x["args"]) for x in containers]
    assert [x["command"] for x in containers] == [["evb"]] * 3
    assert [p.upstream for p in parsed] == [u["target"] for u in UPSTREAMS]
    assert {p.downstream for p in parsed} == {"top-orderer.daq.svc:50051"}
    assert [p.as_source for p in parsed] == [None, 9, None]
    assert [p.consumer for p in parsed] == [None, "to-top", None]
    assert {x["image"] for x in containers} == {"reg/evb:2"}  # the orderer's image


def test_the_forwarders_are_locked_down_as_the_orderer_is() -> None:
    kinds = _children({"upstreams": UPSTREAMS})
    orderer = kinds["StatefulSet"]["spec"]["template"]["spec"]
    forward = kinds["Deployment"]["spec"]["template"]["spec"]
    assert forward["securityContext"] == orderer["securityContext"]
    assert forward["automountServiceAccountToken"] is False
    for container in forward["containers"]:
        assert container["securityContext"] == orderer["containers"][0]["securityContext"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["image"] == orderer["containers"][0]["image"]


def test_the_forwarders_present_this_eventbuilders_credentials() -> None:
    spec = {
        "upstreams": UPSTREAMS[:1],
        "tls": {"secretName": "top-tls", "mutual": True, "clientSecretName": "top-client"},
        "auth": {"tokenSecretRef": {"name": "top-token"}},
    }
    deployment = _children(spec)["Deployment"]
    validate_builtin(deployment)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["EVB_TLS_CA"] == f"{c.TLS_DIR}/ca.crt"
    assert env["EVB_TLS_CERT"] == f"{c.CLIENT_TLS_DIR}/tls.crt"
    assert env["EVB_TOKEN_FILE"] == f"{c.AUTH_DIR}/{c.TOKEN_FILE}"
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert secrets["orderer-ca"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # no key
    assert secrets["client-tls"]["secretName"] == "top-client"
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert {"orderer-ca", "client-tls", "auth"} <= mounted


def test_a_change_of_upstreams_changes_the_forwarders_not_the_orderer() -> None:
    before = _children({"upstreams": UPSTREAMS[:1]})
    after = _children({"upstreams": UPSTREAMS})
    assert before["StatefulSet"] == after["StatefulSet"]
    assert before["Deployment"]["spec"] != after["Deployment"]["spec"]


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("lower-orderer", "is not host:port"),
        ("http://lower:50051", "is not host:port"),
        ("lower:", "is not host:port"),
        ("fd00::7:50051", "is not host:port"),
        ("lower:99999", "port 99999 is not from 1 to 65535"),
        ("lower:0", "port 0 is not from 1 to 65535"),
    ],
)
def test_a_bad_upstream_target_is_refused_with_its_value(target: str, why: str) -> None:
    spec = {"upstreams": [UPSTREAMS[0], {"target": target}]}
    with pytest.raises(InvalidSpec) as caught:
        validation.validate(spec)
    assert caught.value.field == "spec.upstreams[1].target"
    assert repr(target) in caught.value.message and why in caught.value.message


def test_the_target_rule_of_the_api_server_agrees_with_the_operator() -> None:
    (rule,) = [r for r in RUN_RULES if "matches" in r.cel]
    good = [u["target"] for u in UPSTREAMS]
    bad = ["lower-orderer", "http://lower:50051", "lower:", "fd00::7:50051", "a b:1"]
    for target in good + bad:
        spec = {"upstreams": [{"target": target}]}
        assert bool(_cel(rule, spec, spec)) is (target in good), target
        assert rule.check is not None and rule.check(spec) is (target in good), target


@pytest.mark.parametrize(
    ("upstreams", "ok"),
    [
        ([{"target": "a:1"}, {"target": "a:1"}], False),
        ([{"target": "a:1", "consumer": "x"}, {"target": "a:1", "consumer": "x"}], False),
        ([{"target": "a:1"}, {"target": "a:1", "consumer": "x"}], True),
        ([{"target": "a:1"}, {"target": "b:1"}], True),
    ],
)
def test_two_forwarders_of_one_consumer_are_refused(
    upstreams: list[dict[str, Any]], ok: bool
) -> None:
    (rule,) = [r for r in RUN_RULES if "exists_one" in r.cel]
    spec = {"upstreams": upstreams}
    assert bool(_cel(rule, spec, spec)) is ok
    if ok:
        validation.validate(spec)
    else:
        with pytest.raises(InvalidSpec, match=r"^spec\.upstreams: two upstreams"):
            validation.validate(spec)


@pytest.mark.parametrize(
    ("consumer", "accepted"),
    [("forward-a", True), ("-x", True), ("-", True), ("---", True), ("--a", True), ("--", False)],
)
def test_an_upstream_consumer_named_dash_dash_is_refused(consumer: str, accepted: bool) -> None:
    """``evb forward --consumer=--`` reads no name (Python 3.11's argparse drops an option's
    value ``--``): the API server refuses it rather than a forwarder that cannot start."""
    from tests.operator.test_fuzz_spec import api_server_accepts

    upstream = {"target": "lower-orderer.daq.svc:50051", "consumer": consumer}
    ok, why = api_server_accepts({"upstreams": [upstream]})
    assert ok is accepted, why
