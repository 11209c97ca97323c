"""``evb_operator/validation.py``: defaults as the API server applies them, every invalid spec
refused with the field named, the CR spelling mapped onto OrdererConfig, and the valid spec typed
(``evb_operator/typed_spec.py``), a field for every property of the CRD's spec."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evb_operator import crd, typed_spec, validation
from evb_operator.crd.parameters import orderer_properties
from evb_operator.validation import InvalidSpec, ValidSpec
from orderer.config import OrdererConfig, camel_case
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
    assert valid.state == "Running"
    assert (valid.run, valid.orderers, valid.slice_ticks) == (1, 1, None)
    assert valid.storage == typed_spec.Storage("10Gi", None, retain_on_delete=False)
    assert valid.orderer_pod.fsync == "batch"
    assert valid.orderer_pod.resources["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert valid.network_policy == typed_spec.NetworkPolicy(False, (), ())
    assert valid.alerts == typed_spec.Alerts(late_burst=1000)
    assert (valid.tls, valid.auth, valid.upstreams, valid.spark) == (None, None, (), None)
    assert not valid.has_spark


def test_defaults_fill_nested_objects_and_keep_given_values() -> None:
    spec = {
        "flowControl": {"queueXoff": 10, "queueXon": 5},
        "spark": {"dt": 9, "output": {"path": "s3a://b/x"}},
    }
    valid = validation.validate(spec)
    assert valid.orderer.flow_control.queue_xoff == 10
    assert valid.orderer.flow_control.global_xoff == 4_000_000
    spark = valid.spark
    assert spark is not None
    assert spark.executors == typed_spec.SparkExecutors(instances=2, cores=1, memory="2g")
    assert spark.output == typed_spec.SparkOutput("s3a://b/x", "parquet", volume_claim=None)
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
    spark = validation.validate({"spark": {"noBuild": True, "output": {"path": "s3a://b/x"}}}).spark
    assert spark is not None and spark.dt is None
    assert (spark.max_fragments, spark.trigger_interval, spark.tick_rate) == (1000, 0, 1e8)
    assert spark.partitions is None  # computed from the executors (specs.spark.spark_partitions)
    with_storage = validation.validate(
        {"spark": {"dt": 1, "output": {"path": "s3a://b/r"}, "objectStorage": {}}}
    ).spark
    assert with_storage is not None
    assert with_storage.object_storage == typed_spec.ObjectStorage(
        credentials_secret=None,
        access_key_id_key="AWS_ACCESS_KEY_ID",
        secret_access_key_key="AWS_SECRET_ACCESS_KEY",
        session_token_key=None,
        endpoint=None,
        region=None,
        path_style_access=False,
    )


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
    spark = validation.validate({"spark": {"dt": 5, "output": output}}).spark
    assert spark is not None
    assert spark.output.path == output["path"]
    assert spark.output.volume_claim == output.get("volumeClaim")


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
    spark = validation.validate(_spark(stages=stages)).spark
    assert spark is not None
    assert spark.stages == typed_spec.Stages(config_map="my-analysis", key="implant_decay.py")


TYPED_SECTIONS: dict[tuple[str, ...], type[Any]] = {
    ("orderer",): typed_spec.OrdererPod,
    ("storage",): typed_spec.Storage,
    ("tls",): typed_spec.Tls,
    ("auth",): typed_spec.Auth,
    ("auth", "tokenSecretRef"): typed_spec.SecretKeyRef,
    ("networkPolicy",): typed_spec.NetworkPolicy,
    ("alerts",): typed_spec.Alerts,
    ("upstreams", "items"): typed_spec.Upstream,
    ("spark",): typed_spec.Spark,
    ("spark", "driver"): typed_spec.SparkDriver,
    ("spark", "executors"): typed_spec.SparkExecutors,
    ("spark", "output"): typed_spec.SparkOutput,
    ("spark", "stages"): typed_spec.Stages,
    ("spark", "objectStorage"): typed_spec.ObjectStorage,
}
"""Each section of the spec with properties, and the dataclass it is read into."""


def _schema_of(path: tuple[str, ...]) -> dict[str, Any]:
    node = crd.SPEC_SCHEMA
    for name in path:
        node = node["items"] if name == "items" else node["properties"][name]
    return node


@pytest.mark.parametrize("path", TYPED_SECTIONS, ids=".".join)
def test_every_property_of_a_section_is_a_field_of_its_dataclass(path: tuple[str, ...]) -> None:
    """A property the CRD gains is read into the typed spec (or the test names where): the
    builders read the typed spec only, so one left out would be accepted and ignored."""
    schema = _schema_of(path)
    assert {camel_case(f.name) for f in fields(TYPED_SECTIONS[path])} == set(schema["properties"])


def test_every_property_of_the_spec_is_a_field_of_the_valid_spec() -> None:
    """The spec's top level: the orderer's parameters are OrdererConfig's (``valid.orderer``),
    ``spec.orderer`` is ``valid.orderer_pod``, every other property a field of its name."""
    own = {camel_case(f.name) for f in fields(ValidSpec)} - {"orderer", "ordererPod"}
    assert set(crd.SPEC_SCHEMA["properties"]) == {*orderer_properties(), "orderer", *own}
    assert not own & set(orderer_properties())


def test_the_typed_spec_holds_what_the_spec_says() -> None:
    """Every value of a full spec reaches its typed field, a Kubernetes object verbatim."""
    peers = [{"podSelector": {"matchLabels": {"role": "tail"}}}]
    valid = validation.validate(
        {
            "run": 3,
            "state": "Ended",
            "orderers": 2,
            "sliceTicks": 50,
            "storage": {"size": 1000, "storageClassName": "fast"},
            "orderer": {"image": "evb:2", "retentionBytes": 7, "retentionSeconds": 2},
            "tls": {"secretName": "t", "mutual": True, "clientSecretName": "c"},
            "auth": {"tokenSecretRef": {"name": "tok"}},
            "networkPolicy": {"enabled": True, "allowedClients": peers},
            "upstreams": [{"target": "up:1", "asSource": 4}, {"target": "up:2", "consumer": "x"}],
            "spark": {
                "dt": 7,
                "ui": 8090,
                "partitions": 3,
                "output": {"path": "file:///events", "volumeClaim": "pvc", "format": "nscldaq"},
                "sparkConf": {"spark.a": "b"},
            },
        }
    )
    assert (valid.run, valid.state, valid.orderers, valid.slice_ticks) == (3, "Ended", 2, 50)
    assert valid.storage == typed_spec.Storage(1000, "fast", retain_on_delete=False)
    pod = valid.orderer_pod
    assert (pod.image, pod.image_pull_policy) == ("evb:2", None)
    assert (pod.retention_bytes, pod.retention_seconds) == (7, 2.0)
    assert valid.tls == typed_spec.Tls("t", mutual=True, client_secret_name="c")
    assert valid.auth == typed_spec.Auth(typed_spec.SecretKeyRef(name="tok", key="token"))
    assert valid.network_policy == typed_spec.NetworkPolicy(True, tuple(peers), ())
    assert valid.upstreams == (
        typed_spec.Upstream("up:1", as_source=4, consumer=None),
        typed_spec.Upstream("up:2", as_source=None, consumer="x"),
    )
    spark = valid.spark
    assert spark is not None
    assert (spark.dt, spark.ui, spark.partitions, spark.max_fragments_per_trigger) == (
        7,
        8090,
        3,
        None,
    )
    assert spark.output == typed_spec.SparkOutput("file:///events", "nscldaq", "pvc")
    assert (spark.stages, spark.object_storage, spark.spark_conf) == (None, None, {"spark.a": "b"})
