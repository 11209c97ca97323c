"""The tests mirror the packages: a test folder is named after the product package whose code
its files test, so that a package's tests are found by its name (issue 41, item 4).

- ``tests/<name>/`` holds the tests of ``orderer/<name>/`` (``tests/client/`` for
  ``orderer/client/``); a private package drops its underscore (``tests/core/`` for
  ``orderer/_core/``). Below it, ``tests/<name>/<sub>/`` is ``orderer/<name>/<sub>/``.
- ``tests/orderer/`` holds the tests of ``orderer``'s top-level modules (``config.py``,
  ``api.py``, ``batch.py``, ``stats.py``...), so it has no sub-folder: a sub-package's tests
  have their own top-level folder.
- ``tests/operator/`` holds the tests of ``operator/evb_operator/``'s top-level modules
  (``validation.py``, ``kube.py``, ``security.py``...) and of the chart that deploys it;
  ``tests/operator/<sub>/`` is ``operator/evb_operator/<sub>/`` (``crd``, ``specs``,
  ``status``, ``handlers``).
- Test files directly in ``tests/`` check the repository as a whole (its layers, its docs,
  its images, the wheel, this layout).

Every mirroring folder is a package (an ``__init__.py``), as ``tests/`` is: test modules of the
same name in two folders then do not clash, and a test imports another's helpers by a dotted
name (``tests.service.harness``).

:data:`EXEMPT` are the folders that are not about one package, each for the reason given
beside it. ``spark``, ``stages`` and ``nscldaq`` are not among them: they are the tests of
``orderer/spark/``, ``orderer/stages/`` and ``orderer/nscldaq/`` and are checked as mirrors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

TESTS = REPO / "tests"
ORDERER = REPO / "orderer"
OPERATOR = REPO / "operator" / "evb_operator"

EXEMPT = {
    "e2e": "end-to-end tests: real processes (evb serve, kopf run, Spark) across the packages",
    "system": "the images run as the operator's objects say (podman, Prometheus): make system",
    "bench": "benchmarks (make bench) and their smoke tests, each across the packages",
    "examples": "the repository's examples/ folder run as a user runs it, not a package",
    "tools": "the repository's tools/ scripts, not a package of the product",
    "data": "test data (worked examples, schemas, an old data directory): no tests",
}
"""Top-level folders of ``tests/`` that do not mirror a package, and why."""


def _folders(root: Path) -> list[Path]:
    """The folders under ``root``, not its caches or hidden folders."""
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")
    )


def _package(parent: Path, name: str) -> Path | None:
    """The package of ``parent`` a test folder ``name`` stands for (``core`` is ``_core``)."""
    for candidate in (parent / name, parent / f"_{name}"):
        if (candidate / "__init__.py").is_file():
            return candidate
    return None


def _mirror_problems(folder: Path, package: Path) -> list[str]:
    """What is wrong with ``folder``, the tests of ``package``, and with the folders below it."""
    problems = []
    where = folder.relative_to(REPO)
    if not (folder / "__init__.py").is_file():
        problems.append(f"{where}/ has no __init__.py")
    for sub in _folders(folder):
        below = _package(package, sub.name)
        if below is None:
            problems.append(
                f"{sub.relative_to(REPO)}/ is named after no package of "
                f"{package.relative_to(REPO)}/"
            )
        else:
            problems += _mirror_problems(sub, below)
    return problems


def layout_problems() -> list[str]:
    """Every test folder that does not mirror a package, with what is wrong with it."""
    problems: list[str] = []
    for folder in _folders(TESTS):
        name = folder.name
        if name in EXEMPT:
            continue
        if name == "orderer":
            if not (folder / "__init__.py").is_file():
                problems.append("tests/orderer/ has no __init__.py")
            problems += [
                f"{sub.relative_to(REPO)}/: tests/orderer/ holds the tests of orderer's "
                f"top-level modules; a sub-package's tests go in tests/{sub.name.lstrip('_')}/"
                for sub in _folders(folder)
            ]
            continue
        if name == "operator":
            problems += _mirror_problems(folder, OPERATOR)
            continue
        package = _package(ORDERER, name)
        if package is None:
            problems.append(
                f"tests/{name}/ is named after no package of orderer/ "
                f"(nor is it one of the cross-cutting folders: {', '.join(sorted(EXEMPT))})"
            )
        else:
            problems += _mirror_problems(folder, package)
    return problems


def test_every_test_folder_is_named_after_a_package() -> None:
    assert layout_problems() == []


def test_every_exempt_folder_exists() -> None:
    """An exemption for a folder that is gone would let a new folder of that name pass."""
    assert sorted(name for name in EXEMPT if not (TESTS / name).is_dir()) == []


def test_the_check_sees_a_misplaced_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: on a copy of the layout, a folder named after nothing, a
    sub-package's folder under tests/orderer/ and an operator folder that mirrors nothing are
    each named, and a mirror without its ``__init__.py`` is too."""
    layout = sys.modules[__name__]
    repo = tmp_path
    for package in ("orderer/client", "orderer/_core", "operator/evb_operator/crd"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").touch()
    (repo / "orderer" / "__init__.py").touch()
    for folder in ("client", "core", "orderer", "operator", "operator/crd", "e2e", "data"):
        (repo / "tests" / folder).mkdir(parents=True, exist_ok=True)
        (repo / "tests" / folder / "__init__.py").touch()
    monkeypatch.setattr(layout, "REPO", repo)
    monkeypatch.setattr(layout, "TESTS", repo / "tests")
    monkeypatch.setattr(layout, "ORDERER", repo / "orderer")
    monkeypatch.setattr(layout, "OPERATOR", repo / "operator" / "evb_operator")
    monkeypatch.setattr(layout, "EXEMPT", {"e2e": "", "data": ""})
    assert layout.layout_problems() == []

    (repo / "tests" / "misc").mkdir()
    (repo / "tests" / "orderer" / "_core").mkdir()
    (repo / "tests" / "operator" / "things").mkdir()
    (repo / "tests" / "client" / "__init__.py").unlink()
    problems = layout.layout_problems()
    assert len(problems) == 4, problems
    assert any(p.startswith("tests/misc/ is named after no package") for p in problems)
    assert any(p.startswith("tests/orderer/_core/:") and "tests/core/" in p for p in problems)
    assert any(p.startswith("tests/operator/things/ is named after no package") for p in problems)
    assert "tests/client/ has no __init__.py" in problems
