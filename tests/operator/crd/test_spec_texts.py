"""Every field of the ``EventBuilder`` spec is described once, beside the field, and that one text
is the CRD's description and the README's (:mod:`evb_operator.crd.texts`): the setting's text of
a field that is a setting of a command the operator runs (``ServeCommand``, ``ForwardCommand``,
``JobConfig``: :data:`~evb_operator.crd.texts.BORROWED`), else its typed spec field's docstring
(:mod:`evb_operator.typed_spec`); the orderer's parameters are
``tests/orderer/test_field_texts.py``'s and ``test_crd.py``'s.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evb_operator import crd, typed_spec, validation
from evb_operator.crd.live import MAX_UI_PORT, MIN_UI_PORT, SPARK_DRIVER_PORTS
from evb_operator.crd.parameters import orderer_properties
from evb_operator.crd.tables import spec_tables
from evb_operator.crd.texts import BORROWED, JOB_FLAGS, described, spec_text, typed_field
from evb_operator.phases import REQUESTED_STATES
from evb_operator.specs.spark import spark_job_config
from orderer.config import field_text, field_texts, summary
from orderer.job_config import JobConfig

README = Path(__file__).resolve().parents[3] / "README.md"

VERBATIM = ("orderer.resources", "networkPolicy.allowedClients", "networkPolicy.metricsFrom")
"""Kubernetes' objects the spec passes on verbatim (a container's ``resources``, NetworkPolicy
peers): the typed spec holds them as mappings, so their insides are described where the CRD
builds them."""

TYPED_CLASSES = [
    cls
    for _, cls in inspect.getmembers(typed_spec, inspect.isclass)
    if dataclasses.is_dataclass(cls) and cls.__module__ == typed_spec.__name__
]


def _properties(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property under ``node`` with its spec path (a list's items left out:
    ``upstreams.target``)."""
    if "items" in node:
        node = node["items"]
    for name, prop in node.get("properties", {}).items():
        here = f"{path}{name}"
        yield here, prop
        yield from _properties(prop, f"{here}.")


def _is_parameter(path: str) -> bool:
    """An orderer parameter (``OrdererConfig``'s: ``test_crd.py`` holds their descriptions)."""
    return path.split(".")[0] in orderer_properties()


# ------------------------------------------------------------------------ described once


def test_every_description_of_the_spec_is_its_fields_text() -> None:
    """No property of the spec carries a text of its own: each one's description is what
    :func:`~evb_operator.crd.texts.described` finds beside its field."""
    checked = set()
    for path, prop in _properties(crd.SPEC_SCHEMA):
        if _is_parameter(path) or path.startswith(tuple(f"{v}." for v in VERBATIM)):
            continue
        assert prop["description"] == described(path), path
        checked.add(path)
    assert set(BORROWED) <= checked
    for path in VERBATIM:  # the typed spec holds each as Kubernetes' own object
        owner, name = typed_field(path)
        assert "verbatim" in field_text(owner, name), path


@pytest.mark.parametrize("cls", TYPED_CLASSES, ids=lambda cls: cls.__name__)
def test_every_field_of_the_typed_spec_has_its_text(cls: type) -> None:
    texts = field_texts(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not texts.get(f.name, "").strip()]
    assert not missing, f"{cls.__name__}: fields without a text: {missing}"


def test_a_borrowed_field_names_the_setting_that_describes_it_and_only_it() -> None:
    """A typed field whose spec field is described by a command's setting says which, instead of
    describing it again; no other typed field says so."""
    pointers = {typed_field(path): b for path, b in BORROWED.items()}
    for cls in TYPED_CLASSES:
        for name, text in field_texts(cls).items():
            borrowed = pointers.get((cls, name))
            if borrowed is None:
                assert not text.startswith("Described by"), (cls.__name__, name)
            else:
                pointer = f"Described by ``{borrowed.owner.__name__}.{borrowed.field}``."
                assert text.startswith(pointer), (cls.__name__, name, pointer)


@pytest.mark.parametrize("path", list(BORROWED))
def test_a_borrowed_description_is_the_settings_summary_and_the_crds_suffix(path: str) -> None:
    borrowed = BORROWED[path]
    assert borrowed.field in {f.name for f in dataclasses.fields(borrowed.owner)}
    text = spec_text(path)
    assert text.endswith(borrowed.suffix)
    own = summary(field_text(borrowed.owner, borrowed.field))
    literals = re.compile(r"``[^`]*``")  # where a flag may be named as the spec names it
    assert literals.sub("L", text.removesuffix(borrowed.suffix)) == literals.sub("L", own)


@pytest.mark.parametrize(
    ("path", "says", "not_says"),
    [
        ("spark.dt", "(required unless noBuild)", "--no-build"),
        ("spark.glomSourceId", "output.format nscldaq:", "--format"),
        ("spark.maxFragments", "Glom's --maxfragments", ""),  # glom's flag, not the job's
        ("orderer.strictSources", "declared in spec.sources", "--sources"),
        ("upstreams.consumer", "Consumer name at target", "--from"),
    ],
)
def test_a_setting_names_the_spec_fields_as_the_spec_does(
    path: str, says: str, not_says: str
) -> None:
    """A flag of the command that is a spec field too is named as the spec names it, relative
    to the field's section (``spec.`` from elsewhere)."""
    assert says in described(path)
    assert not not_says or not_says not in described(path)


def test_building_is_said_of_exactly_the_fields_the_rule_holds() -> None:
    """``Building.`` ends the description of each field of ``crd.BUILDING_FIELDS`` and no
    other; ``ui``, whose presence is building, says so in its own words."""
    building = {
        path
        for path, prop in _properties(crd.SPEC_SCHEMA["properties"]["spark"])
        if prop["description"].endswith(" Building.")
    }
    assert building == set(crd.BUILDING_FIELDS)
    for field in crd.BUILDING_PRESENCE:
        assert "Set or unset: Building" in described(f"spark.{field}")


def test_the_texts_name_the_crds_values() -> None:
    """A typed field's text that names values of the CRD's (a docstring cannot compute them)
    names the CRD's own."""
    ui = described("spark.ui")
    assert f"{MIN_UI_PORT} to {MAX_UI_PORT}" in ui
    assert "(" + ", ".join(str(port) for port in SPARK_DRIVER_PORTS) + ")" in ui
    assert all(f"{state}" in described("state") for state in REQUESTED_STATES)


def test_each_job_flag_is_the_one_the_operator_writes() -> None:
    """A spec field of :data:`~evb_operator.crd.texts.JOB_FLAGS` changed changes that field of
    the job's configuration (``spark_job_config``), whose flag the README names."""
    base: dict[str, Any] = {"dt": 5, "output": {"path": "s3a://b/x"}}
    changes: dict[str, dict[str, Any]] = {
        "spark.dt": {"dt": 7},
        "spark.noBuild": {"noBuild": True, "dt": None},
        "spark.maxFragments": {"maxFragments": 3},
        "spark.timestampPolicy": {"timestampPolicy": "latest"},
        "spark.followRuns": {"followRuns": True},
        "spark.glomSourceId": {"glomSourceId": 4},
        "spark.partitions": {"partitions": 9},
        "spark.maxFragmentsPerTrigger": {"maxFragmentsPerTrigger": 10},
        "spark.triggerInterval": {"triggerInterval": 2.0},
        "spark.tickRate": {"tickRate": 1e9},
        "spark.output.path": {"output": {"path": "s3a://b/y"}},
        "spark.output.format": {"output": {"path": "s3a://b/x", "format": "json"}},
        "spark.stages": {"stages": {"configMap": "analysis", "key": "mine.py"}},
        "spark.ui": {"ui": 8080},
    }
    assert set(changes) == set(JOB_FLAGS)

    def job(spark: dict[str, Any]) -> JobConfig:
        section = validation.validate({"spark": spark}).spark
        assert section is not None
        return spark_job_config("eb", "daq", section)

    before = job(base)
    for path, change in changes.items():
        spark = {k: v for k, v in {**base, **change}.items() if v is not None}
        after = job(spark)
        changed = {
            f.name
            for f in dataclasses.fields(JobConfig)
            if getattr(before, f.name) != getattr(after, f.name)
        }
        assert JOB_FLAGS[path] in changed, (path, changed)


# ------------------------------------------------------------------------ the README's tables


def _readme_table(name: str) -> str | None:
    match = re.search(
        rf"<!-- fields: {re.escape(name)} -->\n(.*?)\n<!-- end fields -->", README.read_text(), re.S
    )
    return match.group(1) if match else None


@pytest.mark.parametrize("name", ["eventbuilder-orderers", "eventbuilder-spark"])
def test_the_readme_tables_are_the_spec_fields_texts(name: str) -> None:
    """README.md holds each table of the spec's fields as :func:`~evb_operator.crd.tables.
    spec_tables` renders it from the CRD and the fields' texts; on a difference the fresh table
    is printed, to paste between the table's markers."""
    fresh = spec_tables()[name]
    written = _readme_table(name)
    if written != fresh:
        print(f"<!-- fields: {name} -->\n{fresh}\n<!-- end fields -->")
    assert written is not None, f"README.md has no table <!-- fields: {name} -->"
    assert written == fresh, f"README.md's table {name} differs from the fields' texts (above)"


def test_a_table_row_is_a_spec_field() -> None:
    """Every field of ``spec.spark`` has its row, with its default, its values and its text."""
    table = spec_tables()["eventbuilder-spark"]
    rows = {line.split(" | ")[0].removeprefix("| ").strip("`"): line for line in
            table.splitlines()[2:]}
    assert set(rows) == {path for path, _ in _properties(crd.SPEC_SCHEMA["properties"]["spark"])}
    assert rows["maxFragments"].startswith("| `maxFragments` | `1000` | 0 to 2^31-1 |")
    assert "| `--max-fragments` |" in rows["maxFragments"]
    assert rows["tickRate"].startswith("| `tickRate` | `1e8` | > 0, <= 1e15 |")
    assert rows["output.path"].startswith("| `output.path` | (required) |")
    assert rows["partitions"].startswith("| `partitions` | unset | 1 to 65536 |")
