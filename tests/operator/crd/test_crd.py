"""``evb_operator/crd/``: the CRD mirrors OrdererConfig, its defaults validate, its CEL rules
and their Python twins agree, and the chart's ``crds/`` file is generated from it."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from evb_operator import crd, status, validation
from evb_operator.crd.status import PRINTER_COLUMNS
from orderer.config import LIVE_PARAMETERS, FlowControl, OrdererConfig, camel_case, spec_field
from orderer.errors import ConfigError
from orderer.stats import BarrierCounts
from tests.operator.conftest import REPO, stats_answer


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
        name = camel_case(f.name)
        assert name in properties, f"OrdererConfig.{f.name} has no spec.{name}"
    flow = properties["flowControl"]["properties"]
    assert set(flow) == {camel_case(f.name) for f in fields(FlowControl)}
    for f in fields(FlowControl):
        assert flow[camel_case(f.name)]["default"] == getattr(defaults.flow_control, f.name)
    assert properties["buildWindow"]["default"] == defaults.build_window
    assert properties["startupDelay"]["default"] == defaults.startup_delay
    assert properties["sourceTimeout"]["default"] == defaults.source_timeout
    assert properties["latePolicy"]["default"] == defaults.late_policy
    assert properties["latePolicy"]["enum"] == ["emit", "drop"]
    assert "default" not in properties["barrierTimeout"]  # unset means 4 x buildWindow


def test_max_payload_bytes_is_bounded_as_the_orderer_bounds_it() -> None:
    # a larger value would pass the API server and give a pod that refuses to start
    from orderer.service.settings import ServiceConfig
    from orderer.wire.limits import MAX_PAYLOAD_BYTES

    orderer = crd.SPEC_SCHEMA["properties"]["orderer"]["properties"]["maxPayloadBytes"]
    assert orderer["maximum"] == MAX_PAYLOAD_BYTES
    assert orderer["default"] == ServiceConfig().max_payload_bytes


def test_the_live_fields_are_the_ones_configure_accepts() -> None:
    properties = crd.SPEC_SCHEMA["properties"]
    live = [name for name, p in properties.items() if p.get("description", "").endswith(" Live.")]
    assert live == [camel_case(name) for name in LIVE_PARAMETERS]


def test_the_operator_configures_each_live_field_and_no_other() -> None:
    """The handlers' field handlers of ``configure_live`` are registered from LIVE_PARAMETERS."""
    import kopf

    from evb_operator import handlers

    registry = kopf.get_default_registry()
    configured = [
        (".".join(h.field or ()), h.param)
        for h in registry._changing.get_all_handlers()
        if getattr(h.fn, "__name__", "") == handlers.configure_live.__name__
    ]
    assert configured == [(f"spec.{camel_case(n)}", camel_case(n)) for n in LIVE_PARAMETERS]


def test_the_orderer_part_of_the_spec_is_generated_from_the_fields() -> None:
    """Each orderer parameter's property says what its SpecField says: one place holds the
    text, the bounds and the default."""
    properties = crd.SPEC_SCHEMA["properties"]
    defaults = OrdererConfig()
    groups = [(f, properties) for f in fields(OrdererConfig)]
    groups += [(f, properties["flowControl"]["properties"]) for f in fields(FlowControl)]
    for f, where in groups:
        spec = spec_field(f)
        prop = where[camel_case(f.name)]
        assert prop["description"] == spec.description + (" Live." if spec.live else "")
        if spec.minimum is not None:
            assert prop["minimum"] == spec.minimum, f.name
            assert prop.get("exclusiveMinimum", False) is spec.exclusive_minimum, f.name
        if f.name in {g.name for g in fields(OrdererConfig)}:
            default = getattr(defaults, f.name)
            if default is None or default == ():
                assert "default" not in prop, f.name


def test_the_crd_has_the_names_status_and_printer_columns() -> None:
    body = crd.build_crd()
    assert body["metadata"]["name"] == "eventbuilders.evb.io"
    assert body["spec"]["names"]["shortNames"] == ["evb"]
    assert body["spec"]["scope"] == "Namespaced"
    (version,) = body["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {
        c["name"]: (c["jsonPath"], c.get("priority", 0))
        for c in version["additionalPrinterColumns"]
    }
    assert columns == {
        "Phase": (".status.phase", 0),
        "Run": (".status.run", 0),
        "Ready": ('.status.conditions[?(@.type=="Ready")].status', 0),
        "Window (s)": (".status.window", 0),
        "Fragments": (".status.fragments", 0),
        "Late": (".status.late", 0),
        "Output (offset)": (".status.nextOffset", 0),
        "Age": (".metadata.creationTimestamp", 0),
        "Queued (fragments)": (".status.queued", 1),
        "Dead sources": (".status.deadSources", 1),
        "Consumer lag (fragments)": (".status.consumerLag", 1),
        "Spark": (".status.spark.state", 1),
        "Reason": ('.status.conditions[?(@.type=="Ready")].reason', 1),
    }


_SEGMENT = re.compile(r"\.(\w+)(\[\?\(@\.(\w+)==\"(\w+)\"\)\])?")


def test_every_printer_column_names_a_status_field_of_its_type() -> None:
    """A column whose JSONPath misses the schema shows <none> forever: each path is walked
    through the status schema (a filter ``[?(@.type=="Ready")]`` steps into the items, whose
    key it names), and the column's type is the field's."""
    status = crd.STATUS_SCHEMA
    for column in PRINTER_COLUMNS:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        assert path.startswith(".status."), path
        node = {"properties": {"status": status}}
        for name, selector, key, _ in _SEGMENT.findall(path):
            node = node["properties"][name]
            if selector:
                node = node["items"]
                assert key in node["properties"] and key in node["required"], path
        assert "".join(m.group(0) for m in _SEGMENT.finditer(path)) == path, path
        assert node["type"] == column["type"], path
    assert {c.get("priority", 0) for c in PRINTER_COLUMNS} == {0, 1}


def test_kubectl_wait_finds_the_ready_condition_by_its_type() -> None:
    """``kubectl wait --for=condition=Ready`` reads ``status.conditions[]`` by ``type``: a map
    list keyed on it (server-side apply merges per type), and every field of the conventions."""
    conditions = crd.STATUS_SCHEMA["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert item["properties"]["observedGeneration"]["type"] == "integer"
    assert crd.STATUS_SCHEMA["properties"]["observedGeneration"]["type"] == "integer"
    assert "Ready:" in conditions["description"]


def test_the_status_the_operator_writes_validates_against_the_status_schema() -> None:
    """The API server drops what the schema does not declare and refuses what breaks it: every
    status :mod:`evb_operator.status` computes must pass, or Ready would never reach kubectl."""
    valid = validation.validate({"spark": {"dt": 100, "output": {"path": "s3a://daq/e"}}})
    stats = stats_answer(
        totals={"received": 10, "emitted": 9, "late": 1, "dropped": 0},
        barriers=BarrierCounts(
            complete=1, incomplete=1, homogeneous=1, heterogeneous=1, by_type={}
        ),
        missing={2: 1},
        next_offset=9,
        high_water_mark=2**64 - 1,
        queued=1,
        run_ended=True,
        config=OrdererConfig(build_window=9.0),  # drift: the Configured condition is False
    )
    statefulset = {"metadata": {"name": "r-orderer"}, "spec": {}, "status": {"readyReplicas": 1}}
    app = {"metadata": {"name": "r-spark"}, "status": {"applicationState": {"state": "RUNNING"}}}
    now = "2026-01-01T00:00:00Z"
    written = [
        status.invalid({}, field="spec.x", message="bad", generation=1, now=now),
        status.accepted({}, endpoint="e:50051", generation=2, now=now),
        status.ended({}, offset=9, generation=3, now=now),
    ]
    for stats_or_none, spark in ((stats, app), (None, None)):
        observed, _ = status.observe(
            {"observedGeneration": 3},
            valid=valid,
            endpoint="e:50051",
            stats=stats_or_none,
            error="UNAVAILABLE",
            spark=spark,
            statefulset=statefulset,
            generation=3,
            now=now,
        )
        written.append(observed)
    checker = jsonschema.Draft4Validator(
        crd.STATUS_SCHEMA, format_checker=jsonschema.FormatChecker()
    )
    for new in written:
        errors = list(checker.iter_errors(json.loads(json.dumps(new))))
        assert not errors, f"{errors[0].json_path}: {errors[0].message}"
    ready = [c for c in written[-2]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    bad = {"conditions": [{"type": "Ready", "status": "True", "reason": "not camel"}]}
    assert list(checker.iter_errors(bad))  # the schema does refuse: reason, message, time


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
    ({"spark": {"dt": 5, "noBuild": False}}, True),
    ({"spark": {"noBuild": True}}, True),
    ({"spark": {"noBuild": False}}, False),
    ({"spark": {"dt": 5, "noBuild": True}}, False),
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


def test_the_building_guard_covers_what_the_job_refuses_to_change_on_resume() -> None:
    """The job records BUILDING_FLAGS at a run's start and refuses others on resume; each must
    be a field the transition rule holds (noBuild is dt's absence in the record; liveTotals,
    that the live page's totals are kept, is ui's presence: the rule holds whether it is set,
    not its port)."""
    from orderer.spark.driver.resume import BUILDING_FLAGS

    recorded_as = {"liveTotals": "ui"}
    fields = (*crd.BUILDING_FIELDS, *crd.BUILDING_PRESENCE)
    leaves = {field.rsplit(".", 1)[-1] for field in fields}
    assert {recorded_as.get(key, key) for key in BUILDING_FLAGS} <= leaves
    (rule,) = [r for r in crd.RULES if r.changed is not None]
    assert rule.check is None and "oldSelf" in rule.cel
    spark = crd.SPEC_SCHEMA["properties"]["spark"]
    for field in fields:
        node = spark
        for name in field.split("."):
            node = node["properties"][name]
        if field in crd.BUILDING_PRESENCE:
            assert f"has(self.{field}) == has(oldSelf.{field})" in rule.cel
            assert "Set or unset: Building" in node["description"]
        else:
            assert f"self.{field} == oldSelf.{field}" in rule.cel
            assert "Building." in node["description"]  # the fields table says so


def test_the_spark_defaults_are_the_jobs() -> None:
    from orderer.building.config import GlomConfig
    from orderer.job_config import JobConfig

    spark = crd.SPEC_SCHEMA["properties"]["spark"]["properties"]
    job = JobConfig.from_argv(["--target", "h:1", "--output", "o"])
    assert spark["maxFragments"]["default"] == job.max_fragments == GlomConfig(None).max_fragments
    # glom's --maxfragments, 0 included (one fragment per event): the job's lowest value too
    lowest = spark["maxFragments"]["minimum"]
    assert lowest == 0 and GlomConfig(5, lowest).largest_event == 1
    with pytest.raises(ConfigError, match="max_fragments: must be an integer >= 0"):
        GlomConfig(5, lowest - 1)
    assert spark["tickRate"]["default"] == job.tick_rate
    assert spark["triggerInterval"]["default"] == job.trigger_seconds
    assert spark["timestampPolicy"]["default"] == job.timestamp_policy
    executors = spark["executors"]["properties"]
    largest = executors["instances"]["maximum"] * executors["cores"]["maximum"]
    assert largest <= spark["partitions"]["maximum"]  # every computed default validates


@pytest.mark.parametrize(
    ("stages", "api_server", "operator"),
    [
        ({"configMap": "my-analysis", "key": "stages.py"}, True, True),
        ({"configMap": "my-analysis", "key": "implant_decay.py"}, True, True),
        ({"configMap": "a.b-c", "key": "_Stages2.py"}, True, True),
        ({"configMap": "my-analysis", "key": "stages"}, False, False),  # not FILE.py
        ({"configMap": "my-analysis", "key": "stages.PY"}, False, False),
        ({"configMap": "my-analysis", "key": "stages.py.txt"}, False, False),
        ({"configMap": "my-analysis", "key": "my-stages.py"}, False, False),  # no identifier
        ({"configMap": "my-analysis", "key": "2nd.py"}, False, False),
        ({"configMap": "my-analysis", "key": "a.b.py"}, False, False),
        ({"configMap": "my-analysis", "key": ".py"}, False, False),
        ({"configMap": "my-analysis", "key": "dir/stages.py"}, False, False),
        ({"configMap": "my-analysis", "key": "étapes.py"}, False, False),  # not a ConfigMap key
        ({"configMap": "My_Analysis", "key": "stages.py"}, False, False),  # not an object name
        ({"configMap": "", "key": "stages.py"}, False, False),
        ({"key": "stages.py"}, False, False),
        ({"configMap": "my-analysis"}, False, False),
        # a module name in use where the job imports the file: past the API server, the operator
        ({"configMap": "my-analysis", "key": "json.py"}, True, False),
        ({"configMap": "my-analysis", "key": "numpy.py"}, True, False),
        ({"configMap": "my-analysis", "key": "orderer.py"}, True, False),
    ],
)
def test_the_crd_takes_a_stages_key_that_names_a_python_module_file(
    stages: dict[str, Any], api_server: bool, operator: bool
) -> None:
    """``spec.spark.stages.key`` is the file the job imports under its stem: ``NAME.py``, NAME a
    Python identifier (the schema's pattern, in the generated CRD file the API server holds);
    the operator also refuses the names of modules the job has (``validation.JOB_MODULES``,
    the standard library)."""
    from tests.operator.test_fuzz_spec import api_server_accepts

    spec = {"spark": {"dt": 5, "output": {"path": "s3a://b/r"}, "stages": stages}}
    accepted, why = api_server_accepts(spec)
    assert accepted is api_server, why
    try:
        validation.validate(spec)
    except validation.InvalidSpec as error:
        assert not operator, error
        assert error.field.startswith("spec.spark.stages"), error
    else:
        assert operator


def test_the_stages_key_pattern_is_what_the_job_loads_and_a_configmap_holds() -> None:
    """The pattern admits a key exactly when ``orderer.stages.load`` takes the file (``.py``,
    its stem an identifier: the module's name) and a ConfigMap can hold it (ASCII)."""
    from orderer.stages.load import module_name

    stages = crd.SPEC_SCHEMA["properties"]["spark"]["properties"]["stages"]
    pattern = re.compile(stages["properties"]["key"]["pattern"])
    good = ["a.py", "_.py", "Z9_x.py", "implant_decay.py", "__init__.py"]
    bad = ["a", "a.pyc", "a.py.py", "a-b.py", "9a.py", ".py", "a.Py", "py", "é.py", "a/b.py"]
    for key in [*good, *bad, "a b.py"]:
        loads = Path(key).suffix == ".py" and module_name(Path(key)).isidentifier()
        held = key.isascii() and re.fullmatch(r"[-._a-zA-Z0-9]+", key) is not None
        assert (pattern.search(key) is not None) is (loads and held) is (key in good), key
    assert set(stages["required"]) == {"configMap", "key"}
