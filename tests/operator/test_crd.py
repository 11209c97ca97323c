"""``evb_operator/crd.py``: the CRD mirrors OrdererConfig, its defaults validate, its CEL rules
and their Python twins agree, and the chart's ``crds/`` file is generated from it."""

from __future__ import annotations

import copy
import importlib.util
import re
from dataclasses import fields
from typing import Any

import jsonschema
import pytest
import yaml

from evb_operator import crd
from orderer.config import LIVE_PARAMETERS, FlowControl, OrdererConfig
from tests.operator.conftest import REPO


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate", REPO / "tools" / "generate_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_orderer_parameter_is_a_spec_field_with_the_same_default() -> None:
    properties = crd.SPEC_SCHEMA["properties"]
    defaults = OrdererConfig()
    for f in fields(OrdererConfig):
        name = _camel(f.name)
        assert name in properties, f"OrdererConfig.{f.name} has no spec.{name}"
    flow = properties["flowControl"]["properties"]
    assert set(flow) == {_camel(f.name) for f in fields(FlowControl)}
    for f in fields(FlowControl):
        assert flow[_camel(f.name)]["default"] == getattr(defaults.flow_control, f.name)
    assert properties["buildWindow"]["default"] == defaults.build_window
    assert properties["startupDelay"]["default"] == defaults.startup_delay
    assert properties["sourceTimeout"]["default"] == defaults.source_timeout
    assert properties["latePolicy"]["default"] == defaults.late_policy
    assert properties["latePolicy"]["enum"] == ["emit", "drop"]
    assert "default" not in properties["barrierTimeout"]  # unset means 4 x buildWindow


def test_max_payload_bytes_is_bounded_as_the_orderer_bounds_it() -> None:
    # a larger value would pass the API server and give a pod that refuses to start
    from orderer.service.settings import ServiceConfig
    from orderer.wire.convert import MAX_PAYLOAD_BYTES

    orderer = crd.SPEC_SCHEMA["properties"]["orderer"]["properties"]["maxPayloadBytes"]
    assert orderer["maximum"] == MAX_PAYLOAD_BYTES
    assert orderer["default"] == ServiceConfig().max_payload_bytes


def test_the_live_fields_are_the_ones_configure_accepts() -> None:
    assert tuple(_camel(name) for name in LIVE_PARAMETERS) == crd.LIVE_FIELDS


def test_the_crd_has_the_names_status_and_printer_columns() -> None:
    body = crd.build_crd()
    assert body["metadata"]["name"] == "eventbuilders.evb.io"
    assert body["spec"]["names"]["shortNames"] == ["evb"]
    assert body["spec"]["scope"] == "Namespaced"
    (version,) = body["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Window": ".status.window",
        "Fragments": ".status.fragments",
        "Late": ".status.late",
        "Age": ".metadata.creationTimestamp",
    }
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for column in columns.values():
        if column.startswith(".status."):
            assert column.removeprefix(".status.") in status


def _nodes(schema: dict[str, Any], path: str = "spec") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, prop in schema.get("properties", {}).items():
        out += _nodes(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += _nodes(schema[key], f"{path}[]")
    return out


@pytest.mark.parametrize("root", ["spec", "status"])
def test_the_schema_is_structural(root: str) -> None:
    """Every node has a type (or is int-or-string / preserves unknown fields), as the API
    server requires of a structural schema."""
    schema = crd.SPEC_SCHEMA if root == "spec" else crd.STATUS_SCHEMA
    for path, node in _nodes(schema, root):
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), path
        assert "description" in node or root == "status" or path.endswith("[]"), path


def test_every_default_validates_against_its_own_schema() -> None:
    for path, node in _nodes(crd.SPEC_SCHEMA):
        if "default" in node:
            errors = list(jsonschema.Draft4Validator(node).iter_errors(node["default"]))
            assert not errors, f"{path}: {errors[0].message}"


# each case: a spec fragment, and for every rule twin the expected verdict on it
RULE_CASES = [
    ({"buildWindow": 5, "barrierTimeout": 5}, True),
    ({"buildWindow": 5, "barrierTimeout": 20}, True),
    ({"buildWindow": 5}, True),
    ({"buildWindow": 5, "barrierTimeout": 4.9}, False),
    ({"flowControl": {"globalXon": 10, "globalXoff": 10}}, True),
    ({"flowControl": {"globalXon": 11, "globalXoff": 10}}, False),
    ({"flowControl": {"queueXon": 2, "queueXoff": 1}}, False),
    ({"flowControl": {"queueXon": 1}}, True),
]


@pytest.mark.parametrize(("spec", "ok"), RULE_CASES)
def test_the_rule_twins_judge_the_cases(spec: dict[str, Any], ok: bool) -> None:
    verdicts = []
    for rule in crd.RULES:
        if rule.check is None:
            continue
        node: Any = spec
        for name in rule.path:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            verdicts.append(rule.check(node))
    assert all(verdicts) == ok


def test_each_cel_rule_names_only_fields_of_its_object() -> None:
    for rule in crd.RULES:
        node = crd.SPEC_SCHEMA
        for name in rule.path:
            node = node["properties"][name]
        named = set(re.findall(r"self\.(\w+)", rule.cel))
        assert named <= set(node.get("properties", {})), rule.cel
        assert rule.entry() in node["x-kubernetes-validations"]
        if rule.check is None:
            assert "oldSelf" in rule.cel  # only transition rules go without a twin


def test_the_chart_crd_file_is_generated_from_crd_py() -> None:
    generator = _generator()
    path = generator.CRD_FILE
    assert path.read_text() == generator.crd_text(), "run python tools/generate_manifests.py"
    assert yaml.safe_load(path.read_text()) == crd.build_crd()


def test_build_crd_returns_a_fresh_copy() -> None:
    first = crd.build_crd()
    first["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clear()
    assert crd.build_crd() == copy.deepcopy(crd.build_crd())
    assert crd.SPEC_SCHEMA["properties"]
