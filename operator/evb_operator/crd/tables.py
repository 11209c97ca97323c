"""The README's tables of the ``EventBuilder`` spec's fields, rendered from the CRD's schema and the
fields' texts (:mod:`evb_operator.crd.texts`): the same words as ``kubectl explain``, in Markdown.

README.md holds each table between ``<!-- fields: NAME -->`` and ``<!-- end fields -->``, as it
holds the tables of the orderer's parameters and the commands' flags
(:func:`orderer.cli.field_tables.field_tables`); ``tests/operator/crd/test_spec_texts.py``
fails when they differ from :func:`spec_tables` and prints the fresh ones. A row is a field:
its path in its section, its default (the CRD's; ``(required)``, or ``unset`` when it has
none), the values the CRD accepts (an enumeration, bounds), for the Spark job the flag of ``evb
spark-job`` it becomes (:data:`~evb_operator.crd.texts.JOB_FLAGS`), and its text; an object's
fields follow it (``driver.cores``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from evb_operator.crd.definition import SPEC_SCHEMA
from evb_operator.crd.texts import JOB_FLAGS, spec_text
from orderer.config import markdown_table, markdown_text
from orderer.job_config import build_parser as build_job_parser

__all__ = ["spec_tables"]


def spec_tables() -> dict[str, str]:
    """The README's tables by name: ``eventbuilder-orderers`` (one run over several orderers:
    ``orderers``, ``sliceTicks``) and ``eventbuilder-spark`` (``spec.spark``, every field)."""
    properties = SPEC_SCHEMA["properties"]
    slicing = [
        (f"`{name}`", default, values, text)
        for name, default, values, text in _rows(
            {name: properties[name] for name in ("orderers", "sliceTicks")}, set(), ""
        )
    ]
    spark = properties["spark"]
    flags = _job_flags()
    rows = [
        (f"`{name}`", default, values, flags.get(f"spark.{name}", ""), text)
        for name, default, values, text in _rows(
            spark["properties"], set(spark.get("required", ())), "spark."
        )
    ]
    return {
        "eventbuilder-orderers": markdown_table(("field", "default", "values", ""), slicing),
        "eventbuilder-spark": markdown_table(
            ("field", "default", "values", "job flag", ""), rows
        ),
    }


def _rows(
    properties: Mapping[str, Any], required: set[str], prefix: str, within: str = ""
) -> Iterator[tuple[str, str, str, str]]:
    """(field, default, values, text) of each property, an object's own properties after it;
    ``prefix`` is the section's spec path, ``within`` the object's path in the section."""
    for name, node in properties.items():
        path = f"{within}{name}"
        text = markdown_text(spec_text(f"{prefix}{path}"))
        yield path, _default(node, name in required), _values(node), text
        if "properties" in node:
            inner = set(node.get("required", ()))
            yield from _rows(node["properties"], inner, prefix, f"{path}.")


def _job_flags() -> dict[str, str]:
    """Spec path -> the flag of ``evb spark-job`` it becomes, as code."""
    options = {a.dest: a.option_strings for a in build_job_parser()._actions}
    return {
        path: ", ".join(f"`{option}`" for option in options[field])
        for path, field in JOB_FLAGS.items()
    }


def _default(node: Mapping[str, Any], required: bool) -> str:
    if "default" not in node:
        return "(required)" if required else "unset"
    value = node["default"]
    if isinstance(value, dict):
        return ""  # an object: its fields' defaults follow it
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def _values(node: Mapping[str, Any]) -> str:
    """What the CRD accepts, where it says more than the type: an enumeration, or bounds."""
    if "enum" in node:
        return ", ".join(f"`{value}`" for value in node["enum"])
    if "minimum" not in node:
        return ""
    low, high = _number(node["minimum"]), node.get("maximum")
    if node.get("exclusiveMinimum"):
        return f"> {low}" + ("" if high is None else f", <= {_number(high)}")
    return f">= {low}" if high is None else f"{low} to {_number(high)}"


def _number(value: float) -> str:
    """A bound or a default as the README writes it: ``2^63-1``, ``1e8``, ``86400``."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:g}"
    whole = int(value)
    if whole >= 2**31 - 1 and whole & (whole + 1) == 0:
        return f"2^{whole.bit_length()}-1"
    digits = str(whole)
    if whole >= 10**6 and digits.rstrip("0") == "1":
        return f"1e{len(digits) - 1}"
    return digits
