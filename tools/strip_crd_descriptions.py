"""Strip every ``description`` from a CustomResourceDefinition, keeping its whole structure.

The operator tests validate each SparkApplication evb generates against the Kubeflow Spark
operator's published CRD. The structure (types, properties, enums, required fields, CEL rules)
is what they need; the descriptions are two thirds of its 840 kB and only prose. So the
repository keeps the CRD with its descriptions removed, and this is the tool that produced it::

    python tools/strip_crd_descriptions.py sparkoperator.k8s.io_sparkapplications.yaml \\
        --output tests/data/schemas/sparkapplication-v1beta2.yaml \\
        --origin "The SparkApplication CRD (sparkoperator.k8s.io/v1beta2) of the Kubeflow ..."

(the ``--origin`` lines actually used are the data file's header). Only a ``description`` whose
value is a string goes: a property that happens to be *named* ``description`` has a schema (a
mapping) as its value and stays.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

__all__ = ["InputError", "load_crd", "main", "render", "strip_descriptions"]

TOOL = "tools/strip_crd_descriptions.py"


def strip_descriptions(node: Any) -> Any:
    """A copy of ``node`` without any ``description: <string>`` entry, at any depth."""
    if isinstance(node, dict):
        return {
            key: strip_descriptions(value)
            for key, value in node.items()
            if not (key == "description" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [strip_descriptions(item) for item in node]
    return node


def render(crd: dict[str, Any], origin: list[str]) -> str:
    """The stripped CRD as YAML, after a comment header saying where it came from."""
    header = [*origin, f"Every `description` was removed by {TOOL}; nothing else changed."]
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header)
    body = yaml.safe_dump(
        strip_descriptions(crd), sort_keys=False, default_flow_style=False, width=100
    )
    return f"{comment}---\n{body}"


class InputError(Exception):
    """The input file cannot be used; the message names the file (and line) and the cause."""


def load_crd(path: Path) -> dict[str, Any]:
    """The CRD in ``path``; InputError says what is wrong with the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        cause = getattr(error, "strerror", None) or str(error)
        raise InputError(f"{path}: cannot be read ({cause})") from None
    try:
        crd = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise InputError(f"{path}{where}: not valid YAML ({problem})") from None
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise InputError(f"{path}: not a CustomResourceDefinition (its kind is not that)")
    return crd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=TOOL, description="Strip every description from a CustomResourceDefinition."
    )
    parser.add_argument("crd", type=Path, help="the CRD YAML file to read")
    parser.add_argument(
        "--output", type=Path, help="where to write the stripped CRD (default: standard output)"
    )
    parser.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="TEXT",
        help="a line of the header comment saying where the CRD came from (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        text = render(load_crd(args.crd), args.origin)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
