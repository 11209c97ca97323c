"""One run over several orderers (``spec.orderers``, ``spec.sliceTicks``; docs/scale-out.md)
without an API server: the two fields in the CRD, generated and bounded as the orderer bounds
them; the refusals (no ``sliceTicks`` with three orderers, ``sliceTicks: 0``, a change of
either), each naming its field, by the operator's validation and by the generated CRD's schema
and CEL rules (evaluated by a real CEL engine, cel-python); and what the operator builds for
N = 3: every object valid against Kubernetes 1.32 (strictly) and the Spark operator's CRD, the
pieces fitting together (the headless Service governing the StatefulSet, the peers' names, the
anti-affinity, the release's targets), each orderer pod's command line read by ``evb serve``
itself as the kubelet would start pod k (orderer k of 3, its peers, N and T from the ConfigMap),
and ``evb release``'s by ``evb``'s parser. With one orderer nothing changes
(``tests/operator/specs/test_specs.py`` pins those objects)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from evb_operator import constants as c
from evb_operator import crd, specs, validation
from evb_operator.crd import slicing as crd_slicing
from evb_operator.handlers import common as handler_common
from evb_operator.specs import common as specs_common
from evb_operator.validation import InvalidSpec
from orderer.cli import build_parser
from orderer.cli.config_file import serve_settings
from orderer.flags.serve import ServeCommand
from tests.operator.conftest import (
    POD_INDEX_LABEL,
    kubelet_args,
    pod_of,
    validate_builtin,
)
from tests.operator.specs.test_specs import FULL_SPEC
from tests.operator.test_fuzz_spec import SPEC_SCHEMA, _cel, _rules, _schema_at, api_server_accepts

SLICED = {"orderers": 3, "sliceTicks": 1_000_000}


def _children(spec: dict[str, Any], name: str = "run1") -> list[dict[str, Any]]:
    return specs.build_children(
        name,
        "daq",
        validation.validate(spec),
        orderer_image="evb:0.1.0",
        spark_image="evb-spark:0.1.0",
        operator_namespace="evb-system",
        labels={"team": "daq"},
    )


def _named(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> child: two children share a kind (the Services)."""
    return {(child["kind"], child["metadata"]["name"]): child for child in children}


PEERS = tuple(f"run1-orderer-{k}.run1-orderer-headless.daq.svc:50051" for k in range(3))


# ----------------------------------------------------------------------------- the resource


def test_the_fields_are_serve_commands_bounded_as_the_orderer_bounds_them() -> None:
    """Named and typed by ServeCommand's fields; N from 1 to the orderer's most, T from 1 to
    int64's largest (the orderer's goes to 2^64-1); N's default is the service's."""
    from orderer.errors import ConfigError
    from orderer.replay.slicing import MAX_ORDERERS, Slicing
    from orderer.service.settings import ServiceConfig

    properties = crd.SPEC_SCHEMA["properties"]
    names = {f.name for f in fields(ServeCommand)}
    assert {"orderers", "slice_ticks"} <= names
    orderers, ticks = properties["orderers"], properties["sliceTicks"]
    assert (orderers["type"], ticks["type"]) == ("integer", "integer")
    assert orderers["default"] == ServiceConfig().orderers == crd_slicing.DEFAULT_ORDERERS
    assert "default" not in ticks and ServiceConfig().slice_ticks is None
    assert orderers["minimum"] == 1 and orderers["maximum"] == MAX_ORDERERS
    Slicing(MAX_ORDERERS, 1)
    with pytest.raises(ConfigError):
        Slicing(MAX_ORDERERS + 1, 1)
    with pytest.raises(ConfigError):
        Slicing(2, 0)
    assert ticks["minimum"] == 1 and ticks["maximum"] == 2**63 - 1
    Slicing(2, ticks["maximum"])
    assert orderers["description"].endswith("Immutable.")
    assert ticks["description"].endswith("Immutable.")


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"orderers": 3}, "spec.sliceTicks", "required when orderers > 1"),
        ({"orderers": 3, "sliceTicks": 0}, "spec.sliceTicks", "minimum"),
        ({"orderers": 3, "sliceTicks": -5}, "spec.sliceTicks", "minimum"),
        ({"orderers": 3, "sliceTicks": 2**63}, "spec.sliceTicks", "maximum"),
        ({"orderers": 3, "sliceTicks": "10"}, "spec.sliceTicks", "integer"),
        ({"sliceTicks": 10}, "spec.sliceTicks", "one orderer"),
        ({"orderers": 1, "sliceTicks": 10}, "spec.sliceTicks", "one orderer"),
        ({"orderers": 0, "sliceTicks": 10}, "spec.orderers", "minimum"),
        ({"orderers": 1025, "sliceTicks": 10}, "spec.orderers", "maximum"),
        ({"orderers": 2.5, "sliceTicks": 10}, "spec.orderers", "integer"),
    ],
)
def test_a_bad_slicing_is_refused_naming_the_field(
    spec: dict[str, Any], field: str, says: str
) -> None:
    """By the operator (its validation) and by the API server (the generated CRD file: schema
    and CEL, evaluated)."""
    with pytest.raises(InvalidSpec) as caught:
        validation.validate(spec)
    assert caught.value.field == field
    assert says in caught.value.message
    accepted, why = api_server_accepts(spec)
    assert not accepted
    assert field.removeprefix("spec.") in why or why.startswith("schema"), why


@pytest.mark.parametrize(
    "spec", [{}, {"orderers": 1}, SLICED, {"orderers": 1024, "sliceTicks": 2**63 - 1}]
)
def test_a_good_slicing_is_accepted_by_both(spec: dict[str, Any]) -> None:
    valid = validation.validate(spec)
    assert valid.orderers == spec.get("orderers", 1)
    assert valid.slice_ticks == spec.get("sliceTicks")
    assert api_server_accepts(spec) == (True, "")


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (SLICED, {**SLICED, "orderers": 4}, "orderers", "orderers cannot change from 3 to 4"),
        (SLICED, {**SLICED, "orderers": 1}, "orderers", "orderers cannot change from 3 to 1"),
        (
            SLICED,
            {**SLICED, "sliceTicks": 10},
            "sliceTicks",
            "sliceTicks cannot change from 1000000 to 10",
        ),
    ],
)
def test_a_change_of_either_is_refused_by_the_api_server_naming_the_field(
    old: dict[str, Any], new: dict[str, Any], field: str, message: str
) -> None:
    """The transition rules of the generated CRD file (the API server's alone: only it holds
    the old object), messages evaluated with both values."""
    (entry,) = [e for path, e in _rules(SPEC_SCHEMA) if path == (field,)]
    schema = _schema_at((field,))
    assert _cel(entry["rule"], old[field], schema, old=old[field])
    assert not _cel(entry["rule"], new[field], schema, old=old[field])
    import celpy

    env = celpy.Environment()
    program = env.program(env.compile(entry["messageExpression"]))
    said = program.evaluate(
        {"self": celpy.json_to_cel(new[field]), "oldSelf": celpy.json_to_cel(old[field])}
    )
    assert str(said).startswith(message)
    assert entry["message"].startswith(f"{field} cannot change during a run")


def test_adding_or_removing_slice_ticks_is_refused_as_every_write_is_checked() -> None:
    """The create-time rules run on updates too: with N fixed, sliceTicks cannot come (N = 1)
    nor go (N > 1), so the field's own transition rule (which sees only a field present on both
    sides) leaves no way around."""
    assert not api_server_accepts({"orderers": 1, "sliceTicks": 5})[0]  # added to N = 1
    assert not api_server_accepts({"orderers": 3})[0]  # removed from N = 3


# ----------------------------------------------------------------------------- the objects


@pytest.mark.parametrize("base", [{}, FULL_SPEC, {"state": "Ended"}], ids=["bare", "full", "ended"])
def test_every_child_of_three_orderers_validates(
    base: dict[str, Any], validate_spark: Any
) -> None:
    for child in _children({**base, **SLICED}):
        if child["kind"] == "SparkApplication":
            validate_spark(child)
        else:
            validate_builtin(child)


def test_three_orderers_make_a_headless_service_and_a_release_besides() -> None:
    assert set(_named(_children(SLICED))) == {
        ("ConfigMap", "run1-orderer-config"),
        ("Service", "run1-orderer"),
        ("Service", "run1-orderer-headless"),
        ("StatefulSet", "run1-orderer"),
        ("Deployment", "run1-release"),
    }
    full = _named(_children({**FULL_SPEC, **SLICED}))
    assert {kind for kind, _ in full} == {
        "ConfigMap", "Service", "StatefulSet", "Deployment", "NetworkPolicy", "SparkApplication",
    }  # fmt: skip
    deletable = {(kind.kind, kind.name("run1")) for kind in specs_common.DELETION_ORDER}
    assert set(full) <= deletable  # the delete handler removes every child, in its order
    for child in full.values():
        assert child["metadata"]["labels"]["team"] == "daq"
        assert child["metadata"]["labels"][c.LABEL_MANAGED_BY] == "evb-operator"


def test_one_orderer_makes_neither_and_no_scale_out_setting() -> None:
    named = _named(_children({}))
    assert ("Service", "run1-orderer-headless") not in named
    assert ("Deployment", "run1-release") not in named
    statefulset = named[("StatefulSet", "run1-orderer")]
    pod = statefulset["spec"]["template"]["spec"]
    assert statefulset["spec"]["serviceName"] == "run1-orderer"
    assert statefulset["spec"]["podManagementPolicy"] == "OrderedReady"
    assert "affinity" not in pod
    (container,) = pod["containers"]
    assert "--peers" not in container["args"] and "--orderer-index" not in container["args"]
    assert [e["name"] for e in container["env"]] == ["OPENBLAS_NUM_THREADS"]
    config = yaml.safe_load(named[("ConfigMap", "run1-orderer-config")]["data"][c.CONFIG_FILE])
    assert "orderers" not in config and "sliceTicks" not in config


def test_the_statefulset_has_three_pods_one_per_node_each_with_its_claim() -> None:
    named = _named(_children(SLICED))
    statefulset = named[("StatefulSet", "run1-orderer")]
    headless = named[("Service", "run1-orderer-headless")]
    spec = statefulset["spec"]
    assert spec["replicas"] == 3
    assert spec["serviceName"] == headless["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert "publishNotReadyAddresses" not in headless["spec"]  # a name only while ready
    assert spec["podManagementPolicy"] == "Parallel"
    (claim,) = spec["volumeClaimTemplates"]  # one claim per pod: data-run1-orderer-k
    assert claim["metadata"]["name"] == "data"
    pod = spec["template"]
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in pod["spec"]["affinity"][
        "podAntiAffinity"
    ]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in headless["spec"]["ports"]} <= ports
    (index,) = [e for e in container["env"] if e["name"] == c.ENV_ORDERER_INDEX]
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{POD_INDEX_LABEL}']"
    assert c.POD_INDEX_LABEL == POD_INDEX_LABEL
    assert specs_common.orderer_peers("run1", "daq", 3) == PEERS
    assert all(
        peer.startswith(f"{statefulset['metadata']['name']}-{k}.{headless['metadata']['name']}.")
        for k, peer in enumerate(PEERS)
    )


@pytest.mark.parametrize("base", [{}, FULL_SPEC], ids=["bare", "full"])
def test_evb_serve_starts_pod_k_as_orderer_k_of_three(base: dict[str, Any], tmp_path: Path) -> None:
    """Each pod as the kubelet starts it (its ordinal in the variable, the ConfigMap at its
    mount): ``evb serve``'s own settings say orderer k of 3, T, every peer in order."""
    spec = {**base, **SLICED}
    valid = validation.validate(spec)
    named = _named(_children(spec))
    statefulset = named[("StatefulSet", "run1-orderer")]
    config_file = tmp_path / c.CONFIG_FILE
    config_file.write_text(named[("ConfigMap", "run1-orderer-config")]["data"][c.CONFIG_FILE])
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    for ordinal in range(3):
        args = kubelet_args(pod_of(statefulset, ordinal), container)
        args[args.index("--config") + 1] = str(config_file)
        settings = serve_settings(build_parser().parse_args(args))
        service = settings.service
        assert (service.orderers, service.orderer_index) == (3, ordinal)
        assert service.slice_ticks == 1_000_000
        assert service.peers == PEERS
        assert settings.config == valid.orderer  # the run's parameters, the same in every pod
        assert service.fsync.value == valid.orderer_pod.fsync


def test_a_pod_without_its_ordinal_label_refuses_to_start(tmp_path: Path) -> None:
    """A cluster that does not label the pod with its ordinal (older than 1.28) gives an empty
    variable: ``evb serve`` refuses it, naming the flag (argparse's exit 2), never guessing."""
    statefulset = _named(_children(SLICED))[("StatefulSet", "run1-orderer")]
    pod = pod_of(statefulset, 1)
    del pod["metadata"]["labels"][POD_INDEX_LABEL]
    (container,) = pod["spec"]["containers"]
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(kubelet_args(pod, container))
    assert exited.value.code == 2


def test_the_release_runs_evb_release_over_every_orderer_in_order() -> None:
    named = _named(_children({**FULL_SPEC, **SLICED}))
    deployment = named[("Deployment", "run1-release")]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"].get("restartPolicy", "Always") == "Always"
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["evb"]
    assert container["image"] == FULL_SPEC["orderer"]["image"]
    args = build_parser().parse_args(container["args"])
    assert args.handler.__name__ == "cmd_release"
    assert args.target.split(",") == list(PEERS)
    assert args.connect_timeout == c.RELEASE_CONNECT_TIMEOUT_SECONDS
    assert not args.once and args.interval == 1.0
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # a client of the orderers like the Spark job: the CA, the client certificate, the token
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("EVB_")}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env == {
        "EVB_TLS_CA": f"{mounts['orderer-ca']}/ca.crt",
        "EVB_TLS_CERT": f"{mounts['client-tls']}/tls.crt",
        "EVB_TLS_KEY": f"{mounts['client-tls']}/tls.key",
        "EVB_TOKEN_FILE": f"{mounts['auth']}/token",
    }
    # the orderers' NetworkPolicy lets it in
    policy = named[("NetworkPolicy", "run1-orderer")]
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert {"podSelector": {"matchLabels": spec["selector"]["matchLabels"]}} in peers


def test_the_release_stops_for_good_once_the_eventbuilder_ended() -> None:
    """``state: Ended``: 0 replicas, so that it does not restart in a loop for a run that will
    never begin (the handler of spec.state patches it)."""
    ended = _named(_children({**SLICED, "state": "Ended"}))[("Deployment", "run1-release")]
    assert ended["spec"]["replicas"] == 0
    running = _named(_children(SLICED))[("Deployment", "run1-release")]
    assert ended["spec"]["template"] == running["spec"]["template"]


def test_the_spark_job_is_given_every_orderer_in_order() -> None:
    from orderer.job_config import JobConfig

    app = _named(_children({**FULL_SPEC, **SLICED}))[("SparkApplication", "run1-spark")]
    job = JobConfig.from_argv(app["spec"]["arguments"])
    assert job.target is not None and job.target.split(",") == list(PEERS)
    assert job.target == specs_common.run_targets("run1", "daq", validation.validate(SLICED))


def test_the_handlers_find_each_child_by_its_name() -> None:
    """Two children share a kind (the Services; the forwarders' and the release's
    Deployments): a field handler must patch the one it means."""
    children = _children({**FULL_SPEC, **SLICED})
    release = handler_common.find_child(children, specs_common.RELEASE, "run1")
    assert release is not None and release["metadata"]["name"] == "run1-release"
    assert handler_common.find_child(children, specs_common.FORWARD, "run1") is None
    service = handler_common.find_child(children, specs_common.SERVICE, "run1")
    assert service is not None and service["spec"]["type"] == "ClusterIP"
    headless = handler_common.find_child(children, specs_common.HEADLESS, "run1")
    assert headless is not None and headless["spec"]["clusterIP"] == "None"


def test_the_forwarders_feed_every_orderer_in_order() -> None:
    """``spec.upstreams`` of a run over several orderers: each ``evb forward`` is given every
    orderer of this run in index order (it routes as every source does), accepted by the
    operator and by the API server."""
    spec = {**SLICED, "upstreams": [{"target": "lower-orderer.daq.svc:50051", "asSource": 7}]}
    validation.validate(spec)
    accepted, why = api_server_accepts(spec)
    assert accepted, why
    forward = _named(_children(spec))[("Deployment", "run1-forward")]
    (container,) = forward["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.handler.__name__ == "cmd_forward"
    assert args.downstream.split(",") == list(PEERS)
    assert args.upstream == "lower-orderer.daq.svc:50051"
