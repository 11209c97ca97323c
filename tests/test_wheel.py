"""The wheel holds the whole product: every module of ``orderer/`` and of
``operator/evb_operator/`` (installed as ``evb_operator``), the live view's static files and the
Cython core with its sources, and nothing else.

Why: pyproject.toml once listed the packages by hand, and ``orderer.stages`` was missing from the
wheel: an install from it failed on import where the tests, run from the source tree, passed.
The packages are found at build time now (``[tool.setuptools.packages.find]``); this test builds
the wheel as a release does, from a copy of the source tree as it is when the test runs (a
build writes into its tree: ``build/``, the egg-info, the gRPC stubs; and the copy is what the
wheel is compared with, should the tree change meanwhile), so that a new module or sub-package
that the discovery leaves out fails here. The expected files are read from the tree, never
listed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a wheel built, the Cython core compiled: about 30 s

REPO = Path(__file__).resolve().parent.parent

PRODUCT = (("orderer", "orderer"), ("operator/evb_operator", "evb_operator"))
"""Each product package: its directory in the source tree, its name in the wheel."""
STATIC = "orderer/spark/live/static"
"""The live view's files (package data of ``orderer.spark.live``)."""
CORE_SOURCES = ("*.pyx", "*.pxd", "*.pyi", "*.h")
"""What the wheel carries of ``orderer/_core`` beside the compiled extension."""
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "proto", "orderer", "operator")
"""What a build reads: the metadata, setup.py's steps (the Cython core, the stubs from proto/)
and the packages."""
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
"""Caches and the core compiled in place (the build compiles its own)."""


@dataclass(frozen=True)
class Built:
    tree: Path
    """The copy of the source tree the wheel was built from."""
    names: set[str]
    """The files in the wheel."""


def _product_files(tree: Path) -> dict[str, Path]:
    """Every file the wheel must hold, by its name in the wheel: each module of the product in
    ``tree`` (the gRPC stubs the build generated included) and each static file of the live
    view."""
    expected: dict[str, Path] = {}
    for source, name in PRODUCT:
        top = tree / source
        for path in sorted(top.rglob("*.py")):
            if "__pycache__" not in path.parts:
                expected[f"{name}/{path.relative_to(top).as_posix()}"] = path
    for path in sorted((tree / STATIC).rglob("*")):
        if path.is_file():
            expected[path.relative_to(tree).as_posix()] = path
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel built from a copy of the source tree (the build's own requirements, installed
    with the tests, are used: no network)."""
    tree = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(source, tree / name)
    # a checkout built before holds its stubs' bytecode caches, which are not text: the build
    # leaves them alone (it once read every file named *_pb2*.py*)
    stale = tree / "orderer" / "_proto" / "evb" / "v1" / "__pycache__"
    stale.mkdir(parents=True)
    (stale / "orderer_pb2.cpython-311.pyc").write_bytes(bytes([0xA7, 0x0D, 0x0D, 0x0A, 0xFF]))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--no-index", "--disable-pip-version-check", "--quiet", "--wheel-dir", str(out),
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, f"the wheel did not build:\n{done.stdout}\n{done.stderr}"
    (built,) = out.glob("evb-*.whl")
    with zipfile.ZipFile(built) as archive:
        return Built(tree, set(archive.namelist()))


def test_every_product_module_and_static_file_is_in_the_wheel(wheel: Built) -> None:
    expected = _product_files(wheel.tree)
    # the tree is read: the package once missing, a generated stub, a static file
    for name in (
        "orderer/stages/__init__.py",
        "orderer/_proto/evb/v1/orderer_pb2.py",
        f"{STATIC}/index.html",
        "evb_operator/__init__.py",
    ):
        assert name in expected
    missing = sorted(set(expected) - wheel.names)
    why = []
    for name in missing:
        directory = expected[name].parent
        if expected[name].suffix == ".py" and not (directory / "__init__.py").is_file():
            why.append(
                f"{name}: {directory.relative_to(wheel.tree)} has no __init__.py, so it "
                "is no package to find"
            )
        else:
            why.append(name)
    assert not missing, "not in the wheel:\n" + "\n".join(why)


def test_the_cython_core_is_in_the_wheel_with_its_sources(wheel: Built) -> None:
    core = wheel.tree / "orderer" / "_core"
    sources = {
        f"orderer/_core/{path.name}" for pattern in CORE_SOURCES for path in core.glob(pattern)
    }
    assert "orderer/_core/core.pyx" in sources
    assert sources <= wheel.names, sorted(sources - wheel.names)
    assert any(
        name.startswith("orderer/_core/core.") and name.endswith(".so") for name in wheel.names
    ), "the compiled core is not in the wheel"


def test_the_wheel_holds_the_product_only(wheel: Built) -> None:
    """No tests, tools or build leftovers: only the two packages and the wheel's metadata."""
    tops = {name.split("/", 1)[0] for name in wheel.names}
    others = {top for top in tops if top not in ("orderer", "evb_operator")}
    assert len(others) == 1 and others.pop().endswith(".dist-info"), sorted(tops)
