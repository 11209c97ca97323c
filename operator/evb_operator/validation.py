"""An EventBuilder spec checked and completed, or :class:`InvalidSpec` naming the field.

Called by every handler before it acts (:mod:`evb_operator.handlers` turns :class:`InvalidSpec`
into ``kopf.PermanentError`` and a ``Valid=False`` status condition: a bad spec is reported
once, never retried in a loop). The API server normally rejects such specs already (the CRD's
schema and CEL rules); the operator checks again because it cannot know that one did (an
emulator, an older cluster, a schema edited by hand), and because the orderer's own rules
(:class:`~orderer.config.OrdererConfig`) are the final word on the orderer's parameters.

Pure: no I/O. The schema and the rules come from :mod:`evb_operator.crd`; the typed spec it
makes, :class:`~evb_operator.typed_spec.ValidSpec`, from :mod:`evb_operator.typed_spec` (named
here too, ``validation.ValidSpec``, as its readers import it).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import jsonschema

from evb_operator import crd
from evb_operator.crd.runs import target_problem
from evb_operator.typed_spec import ValidSpec
from orderer.config import OrdererConfig, camel_case
from orderer.errors import ConfigError

__all__ = [
    "JOB_MODULES",
    "SPARK_CREDENTIAL_SUFFIXES",
    "InvalidSpec",
    "ValidSpec",
    "orderer_config",
    "validate",
    "validate_change",
    "with_defaults",
]

SPARK_CREDENTIAL_SUFFIXES = (".access.key", ".secret.key", ".session.token")
"""s3a's credential settings (``spark.hadoop.fs.s3a[.bucket.B].secret.key``): refused in
``spec.spark.sparkConf``, which every reader of the SparkApplication sees; they belong in the
Secret ``spec.spark.objectStorage.credentialsSecret`` names."""

JOB_MODULES = frozenset(
    {
        "__main__",  # the job's own main file
        "orderer",
        "evb_operator",
        "pyspark",
        "py4j",
        "numpy",
        "pandas",
        "pyarrow",
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "google",
        "yaml",
        "rich",
        "prometheus_client",
        "matplotlib",
        "mpl_toolkits",
        "pylab",
        "boost_histogram",
    }
)
"""Top-level modules of the Spark job's image besides the standard library: evb's and those of
its dependencies and its ``spark`` extra (a test holds them to pyproject.toml). The job imports
``spec.spark.stages.key``'s file under its stem and refuses a name already in use, so such a key
(and a standard library module's name, which the file would hide) is refused here, before a
driver starts only to fail."""


class InvalidSpec(ValueError):
    """The spec cannot be reconciled; ``field`` is its path (``spec.barrierTimeout``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def with_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` completed with the schema's ``default`` values, as the API server does: a
    missing property with a default gets it (then its own defaults), recursively; a copy."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in schema:
        for name, prop in schema["properties"].items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = with_defaults(prop, value[name])
    elif isinstance(value, list) and "items" in schema:
        value = [with_defaults(schema["items"], item) for item in value]
    return value


_VALIDATOR = jsonschema.Draft4Validator(crd.SPEC_SCHEMA)
"""OpenAPI v3.0 schema objects are JSON Schema draft 4 plus extensions (``x-kubernetes-*``),
which a draft-4 validator ignores."""


def _path(parts: Any) -> str:
    out = "spec"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def orderer_config(spec: Mapping[str, Any]) -> OrdererConfig:
    """The orderer's configuration from a defaulted spec. ``sourceTimeout: 0`` is the spec's
    ``off`` (:func:`orderer.config.parse_source_timeout`, shared with ``evb serve --config``);
    an unset ``barrierTimeout`` stays unset (4 x buildWindow)."""
    mapping: dict[str, Any] = {
        camel_case(f.name): spec[camel_case(f.name)]
        for f in fields(OrdererConfig)
        if camel_case(f.name) in spec
    }
    if "flowControl" in spec:
        mapping["flowControl"] = dict(spec["flowControl"])
    try:
        return OrdererConfig.from_mapping(mapping)
    except ConfigError as error:
        raise InvalidSpec(_path(_camel_path(error.parameter)), error.why) from None


def _camel_path(name: str) -> list[str]:
    return [camel_case(part) for part in name.split(".")]


def validate(spec: Mapping[str, Any] | None) -> ValidSpec:
    """Defaults, schema, CEL twins, then the orderer's own checks; the first failure raises."""
    full = with_defaults(crd.SPEC_SCHEMA, dict(spec or {}))
    errors = sorted(_VALIDATOR.iter_errors(full), key=lambda e: [str(p) for p in e.path])
    if errors:
        error = errors[0]
        raise InvalidSpec(_path(error.path), error.message)
    for index, upstream in enumerate(full.get("upstreams", [])):
        problem = target_problem(upstream["target"])
        if problem is not None:  # before the CEL twin: this message names the value
            raise InvalidSpec(f"spec.upstreams[{index}].target", problem)
    for rule in crd.RULES:
        if rule.check is None:
            continue
        node = _at(full, rule.path)
        if node is not None and not rule.check(node):
            raise InvalidSpec(rule.field, rule.message)
    _check_spark_conf(full.get("spark", {}).get("sparkConf", {}))
    _check_stages(full.get("spark", {}).get("stages"))
    return ValidSpec.of(full, orderer_config(full))


def _check_spark_conf(conf: Mapping[str, str]) -> None:
    """No credentials in sparkConf. Checked here only, not by a CEL rule: a rule over every key
    of a map whose keys have no length bound can exceed the API server's cost budget."""
    for key in conf:
        if key.startswith("spark.hadoop.fs.s3a.") and key.endswith(SPARK_CREDENTIAL_SUFFIXES):
            raise InvalidSpec(
                f"spec.spark.sparkConf[{key}]",
                "credentials do not belong in sparkConf (every reader of the SparkApplication"
                " sees it): name a Secret in spec.spark.objectStorage.credentialsSecret",
            )


def _check_stages(stages: Mapping[str, Any] | None) -> None:
    """The stages' module name (the key's stem) is none of the standard library's or the job's
    (:data:`JOB_MODULES`); the schema's pattern made it a Python identifier. Checked here only:
    the list is the operator's Python's (the Spark image runs the same Python 3.11)."""
    if stages is None:
        return
    name = str(stages["key"]).removesuffix(".py")
    if name in sys.stdlib_module_names or name in JOB_MODULES:
        raise InvalidSpec(
            "spec.spark.stages.key",
            f"{name!r} is the name of a module of Python's standard library or of the Spark"
            " job: the job imports the file under that name, which would hide the module;"
            " give the file another name (the ConfigMap's key)",
        )


def validate_change(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
    """The transition rules' twins on two specs (the last handled one and the new one), for
    where no API server held the line (it refuses such a change with the CEL rule); the first
    failure raises, naming the field that changed."""
    before = with_defaults(crd.SPEC_SCHEMA, dict(old or {}))
    after = with_defaults(crd.SPEC_SCHEMA, dict(new or {}))
    for rule in crd.RULES:
        if rule.changed is None:
            continue
        here, there = _at(before, rule.path), _at(after, rule.path)
        if here is None or there is None:  # a transition rule sees only an object in both
            continue
        field = rule.changed(here, there)
        if field is not None:
            raise InvalidSpec(".".join(("spec", *rule.path)) + field, rule.message)


def _at(spec: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node: Any = spec
    for name in path:
        node = node.get(name) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None
