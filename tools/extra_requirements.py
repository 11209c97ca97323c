"""Print one extra of pyproject.toml as requirement lines, less the packages named.

Why: the Spark image installs the ``spark`` extra, all of it but pyspark, which its Spark base
provides (spark-submit puts the base's pyspark on the PYTHONPATH; a second copy would add half
a gigabyte and could differ from the JVM side). pip cannot install an extra less one of its
packages, so ``Dockerfile.spark`` installs this script's output: the image's list is
pyproject's, never a copy of it that can fall behind (a copy once left boost-histogram out and
every job crashed at its end).

    python tools/extra_requirements.py spark --without pyspark

Runs on the bare Python of the build stage: the standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _name(requirement: str) -> str:
    """The normalised project name of a requirement string (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def extra_requirements(pyproject: Path, extra: str, without: list[str]) -> list[str]:
    """The requirements of ``extra`` in ``pyproject``, less those named in ``without``; a name
    that is not in the extra is an error (a stale exclusion would hide a renamed package)."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    if extra not in extras:
        raise ValueError(f"{pyproject.name} has no extra {extra!r} (it has {', '.join(extras)})")
    requirements = list(extras[extra])
    names = {_name(r) for r in requirements}
    for name in without:
        if _name(name) not in names:
            raise ValueError(f"--without {name}: not a package of the extra {extra!r}")
    excluded = {_name(n) for n in without}
    return [r for r in requirements if _name(r) not in excluded]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extra", help="the extra of pyproject.toml, e.g. spark")
    parser.add_argument("--without", action="append", default=[], metavar="NAME",
                        help="leave this package out (repeatable)")
    args = parser.parse_args(argv)
    try:
        lines = extra_requirements(PYPROJECT, args.extra, args.without)
    except ValueError as error:
        print(f"extra_requirements.py: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
