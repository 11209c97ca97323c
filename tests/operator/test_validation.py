"""``evb_operator/validation.py``: defaults as the API server applies them, every invalid spec
refused with the field named, the CR spelling mapped onto OrdererConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evb_operator import crd, validation
from evb_operator.validation import InvalidSpec
from orderer.config import OrdererConfig
from tests.operator.conftest import (
    example_companions,
    example_files,
    load_example,
    unknown_fields,
    validate_builtin,
)


def test_an_empty_spec_gets_every_default() -> None:
    valid = validation.validate({})
    assert valid.orderer == OrdererConfig()
    spec = valid.spec
    assert spec["state"] == "Running"
    assert spec["storage"] == {"size": "10Gi", "retainOnDelete": False}
    assert spec["orderer"]["fsync"] == "batch"
    assert spec["orderer"]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert spec["networkPolicy"] == {"enabled": False}
    assert spec["alerts"] == {"lateBurst": 1000}
    assert not valid.has_spark


def test_defaults_fill_nested_objects_and_keep_given_values() -> None:
    spec = {
        "flowControl": {"queueXoff": 10, "queueXon": 5},
        "spark": {"dt": 9, "output": {"path": "s3a://b/x"}},
    }
    valid = validation.validate(spec)
    assert valid.orderer.flow_control.queue_xoff == 10
    assert valid.orderer.flow_control.global_xoff == 4_000_000
    spark = valid.spec["spark"]
    assert spark["executors"] == {"instances": 2, "cores": 1, "memory": "2g"}
    assert spark["output"] == {"path": "s3a://b/x", "format": "parquet"}
    assert spec == {
        "flowControl": {"queueXoff": 10, "queueXon": 5},
        "spark": {"dt": 9, "output": {"path": "s3a://b/x"}},
    }


def test_source_timeout_zero_is_off() -> None:
    assert validation.validate({"sourceTimeout": 0}).orderer.source_timeout is None
    assert validation.validate({"sourceTimeout": 7.5}).orderer.source_timeout == 7.5


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"buildWindow": 0}, "spec.buildWindow"),
        ({"buildWindow": "5"}, "spec.buildWindow"),
        ({"startupDelay": -1}, "spec.startupDelay"),
        ({"buildWindow": 10, "barrierTimeout": 5}, "spec.barrierTimeout"),
        ({"sourceTimeout": -2}, "spec.sourceTimeout"),
        ({"latePolicy": "keep"}, "spec.latePolicy"),
        ({"state": "Paused"}, "spec.state"),
        ({"sources": [1, 1]}, "spec.sources"),
        ({"sources": [2**32]}, "spec.sources[0]"),
        ({"flowControl": {"globalXon": 5, "globalXoff": 4}}, "spec.flowControl.globalXon"),
        ({"flowControl": {"queueXoff": 0}}, "spec.flowControl.queueXoff"),
        ({"storage": {"size": "lots"}}, "spec.storage.size"),
        ({"orderer": {"fsync": "sometimes"}}, "spec.orderer.fsync"),
        (
            {"orderer": {"resources": {"limits": {"memory": "a lot"}}}},
            "spec.orderer.resources.limits.memory",
        ),
        ({"spark": {"output": {"path": "s3a://b/x"}}}, "spec.spark.dt"),  # dt, unless noBuild
        ({"spark": {"dt": 0, "output": {"path": "s3a://b/x"}}}, "spec.spark.dt"),
        ({"spark": {"dt": 5, "output": {"path": ""}}}, "spec.spark.output.path"),
        (
            {"spark": {"dt": 5, "output": {"path": "s3a://b/x"}, "executors": {"memory": "lots"}}},
            "spec.spark.executors.memory",
        ),
        ({"tls": {}}, "spec.tls"),
        *[
            ({"spark": {"dt": 5, "output": {"path": "s3a://b/x"}, **spark}}, field)
            for spark, field in [
                ({"partitions": 0}, "spec.spark.partitions"),
                ({"partitions": 65537}, "spec.spark.partitions"),
                ({"partitions": "8"}, "spec.spark.partitions"),
                ({"maxFragments": -1}, "spec.spark.maxFragments"),  # glom's 0 is allowed
                ({"maxFragmentsPerTrigger": 0}, "spec.spark.maxFragmentsPerTrigger"),
                ({"triggerInterval": -1}, "spec.spark.triggerInterval"),
                ({"triggerInterval": 86401}, "spec.spark.triggerInterval"),
                ({"tickRate": 0}, "spec.spark.tickRate"),
                ({"noBuild": "yes"}, "spec.spark.noBuild"),
                ({"noBuild": True}, "spec.spark.noBuild"),  # with dt
                ({"output": {"path": "s3a://b/x", "format": "csv"}}, "spec.spark.output.format"),
                (
                    {"objectStorage": {"credentialsSecret": ""}},
                    "spec.spark.objectStorage.credentialsSecret",
                ),
                (
                    {"objectStorage": {"endpoint": "minio:9000"}},
                    "spec.spark.objectStorage.endpoint",
                ),
                (
                    {"sparkConf": {"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}},
                    "spec.spark.sparkConf[spark.hadoop.fs.s3a.secret.key]",
                ),
                (
                    {"sparkConf": {"spark.hadoop.fs.s3a.bucket.b.access.key": "AKIA"}},
                    "spec.spark.sparkConf[spark.hadoop.fs.s3a.bucket.b.access.key]",
                ),
                ({"stages": {"configMap": "a"}}, "spec.spark.stages"),  # key required
                ({"stages": {"configMap": "a", "key": "a.txt"}}, "spec.spark.stages.key"),
                ({"stages": {"configMap": "a", "key": "my-stages.py"}}, "spec.spark.stages.key"),
                ({"stages": {"configMap": "My_Map", "key": "a.py"}}, "spec.spark.stages.configMap"),
                ({"stages": {"configMap": "a", "key": "random.py"}}, "spec.spark.stages.key"),
            ]
        ],
    ],
)
def test_an_invalid_spec_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        validation.validate(spec)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_the_orderer_has_the_last_word() -> None:
    # the schema allows what OrdererConfig refuses? then OrdererConfig's message wins
    with pytest.raises(InvalidSpec, match="unique"):
        validation.orderer_config({"sources": [3, 3]})


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_the_examples_are_valid(path: Path) -> None:
    example = load_example(path)
    assert example["apiVersion"] == f"{crd.GROUP}/{crd.VERSION}"
    assert example["kind"] == crd.KIND
    validation.validate(example["spec"])
    # and against the CRD's own schema, defaulted as the API server would
    (version,) = crd.build_crd()["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    defaulted = validation.with_defaults(schema, example)
    jsonschema.Draft4Validator(schema).validate(defaulted)
    assert unknown_fields(example, schema) == []
    for companion in example_companions(path):  # e.g. the quickstart's volume claim
        validate_builtin(companion)
        assert companion["metadata"]["namespace"] == example["metadata"]["namespace"]


def test_no_build_needs_no_dt_and_the_spark_defaults() -> None:
    spark = validation.validate({"spark": {"noBuild": True, "output": {"path": "s3a://b/x"}}}).spec["spark"]
    assert "dt" not in spark
    assert (spark["maxFragments"], spark["triggerInterval"], spark["tickRate"]) == (1000, 0, 1e8)
    assert "partitions" not in spark  # computed from the executors (specs_spark.spark_partitions)
    storage = validation.validate(
        {"spark": {"dt": 1, "output": {"path": "s3a://b/r"}, "objectStorage": {}}}
    ).spec["spark"]["objectStorage"]
    assert storage == {
        "accessKeyIdKey": "AWS_ACCESS_KEY_ID",
        "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY",
        "pathStyleAccess": False,
    }


def _spark(**fields: Any) -> dict[str, Any]:
    output = {"path": fields.pop("path", "s3a://b/run"), "format": fields.pop("format", "parquet")}
    return {"spark": {"dt": 5, **fields, "output": output}}


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (_spark(), _spark(dt=6), "spec.spark.dt"),
        (_spark(), _spark(maxFragments=10), "spec.spark.maxFragments"),
        (_spark(), _spark(timestampPolicy="latest"), "spec.spark.timestampPolicy"),
        (_spark(), _spark(format="json"), "spec.spark.output.format"),
        (
            _spark(),
            {"spark": {"noBuild": True, "output": {"path": "s3a://b/run"}}},
            "spec.spark.dt",
        ),
        (_spark(maxFragments=1000), _spark(), None),  # the default is the same value
        (_spark(), _spark(dt=6, path="s3a://b/run-again"), None),  # a new place: built anew
        (_spark(), _spark(partitions=9, triggerInterval=3, tickRate=1e6), None),
        ({}, _spark(dt=6), None),  # a Spark stage added: nothing to resume
        (_spark(), {}, None),
    ],
)
def test_a_change_of_the_event_building_is_refused_unless_the_output_moves(
    old: dict[str, Any], new: dict[str, Any], field: str | None
) -> None:
    """The Spark job resumes its checkpoint and refuses another building (exit status 2): the
    operator must not roll the SparkApplication into that refusal."""
    if field is None:
        validation.validate_change(old, new)
        return
    with pytest.raises(InvalidSpec, match=r"cannot change while output\.path stays") as caught:
        validation.validate_change(old, new)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("output", "field"),
    [
        ({"path": "file:///events"}, "spec.spark.output.volumeClaim"),
        ({"path": "file:/events"}, "spec.spark.output.volumeClaim"),
        ({"path": "/events"}, "spec.spark.output.volumeClaim"),
        ({"path": "events"}, "spec.spark.output.volumeClaim"),
        ({"path": "events", "volumeClaim": "c"}, "spec.spark.output.path"),
        ({"path": "file://host/events", "volumeClaim": "c"}, "spec.spark.output.path"),
        ({"path": "s3a://b/r", "volumeClaim": "c"}, "spec.spark.output.path"),
        ({"path": "file:///events", "volumeClaim": ""}, "spec.spark.output.volumeClaim"),
    ],
    ids=["file", "file-one-slash", "absolute", "relative", "relative-claim", "host", "s3a-claim",
         "empty-claim"],
)
def test_a_local_output_without_a_volume_is_refused(output: dict[str, str], field: str) -> None:
    """In the cluster a local output would be written into the Spark pods (a read-only root, an
    emptyDir /tmp), and the events lost with them: refused, naming the field and what to do."""
    with pytest.raises(InvalidSpec) as refused:
        validation.validate({"spark": {"dt": 5, "output": output}})
    assert refused.value.field == field
    if field.endswith("volumeClaim") and output.get("volumeClaim") is None:
        assert "needs output.volumeClaim" in refused.value.message
        assert "lost" in refused.value.message


@pytest.mark.parametrize(
    "output",
    [
        {"path": "s3a://bucket/run"},
        {"path": "hdfs://namenode/run"},
        {"path": "file:///events", "volumeClaim": "run-events"},
        {"path": "/events/run-1/", "volumeClaim": "run-events"},
    ],
)
def test_object_storage_or_a_local_output_on_a_claim_is_valid(output: dict[str, str]) -> None:
    assert validation.validate({"spark": {"dt": 5, "output": output}}).spec["spark"]["output"][
        "path"
    ] == output["path"]


def test_the_stages_module_may_not_take_a_name_the_job_imports() -> None:
    """JOB_MODULES holds the top-level modules of evb, of its dependencies and of its ``spark``
    extra (the Spark image's), as installed here: a key named after one is refused (the job
    would refuse it at the driver's start: the name is in use)."""
    import importlib.metadata
    import re
    import tomllib

    from tests.operator.conftest import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["spark"], "evb", "py4j"]
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0] for requirement in wanted}
    tops: dict[str, set[str]] = {}
    for top, distributions in importlib.metadata.packages_distributions().items():
        for distribution in distributions:
            tops.setdefault(distribution.lower().replace("_", "-"), set()).add(top)
    for name in names:
        found = tops.get(name.lower())
        assert found, f"{name} is not installed here"
        public = {top for top in found if not top.startswith("_")}
        assert public <= validation.JOB_MODULES, (name, public - validation.JOB_MODULES)
    for top in sorted(validation.JOB_MODULES - {"__main__"}):
        with pytest.raises(InvalidSpec, match="the name of a module"):
            validation.validate(_spark(stages={"configMap": "a", "key": f"{top}.py"}))
    stages = {"configMap": "my-analysis", "key": "implant_decay.py"}
    assert validation.validate(_spark(stages=stages)).spec["spark"]["stages"] == stages
