"""The layers of evb hold: the import-linter contracts in ``.importlinter`` (run here, so that
``make test`` fails on a breach, and shown to fail on one), plus what import-linter cannot see:
every module falling in a layer (a module in none is in no contract), the imports of the Cython
core's ``.pyx``/``.pxd`` files, and ``operator/`` not being a package.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree at ``root`` (its ``orderer`` and ``evb_operator`` first on
    the path, before the editable install's)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "operator")]),
    }
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_client_importing_the_service_or_a_cycle_breaks_the_contracts(tmp_path: Path) -> None:
    """The contracts bite: a copy of the tree where the client reaches the server and the wire
    package imports the command line (a cycle) is refused, naming the contracts broken."""
    for package in ("orderer", "operator/evb_operator"):
        shutil.copytree(
            REPO / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__", "_proto"),
        )
    shutil.copytree(REPO / "orderer" / "_proto", tmp_path / "orderer" / "_proto",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    readers = tmp_path / "orderer" / "client" / "readers.py"
    readers.write_text(readers.read_text() + "\nimport orderer.service.server  # noqa\n")
    options = tmp_path / "orderer" / "wire" / "options.py"
    options.write_text(options.read_text() + "\nimport orderer.cli  # noqa\n")
    layout = tmp_path / "orderer" / "spark" / "output" / "layout.py"  # the bottom of Spark's
    layout.write_text(layout.read_text() + "\nimport orderer.spark.driver.runs  # noqa\n")

    result = _lint_imports(tmp_path)

    out = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0, out
    assert "the client, the Spark job and the operator never reach the service or the " \
        "command line BROKEN" in out
    assert "orderer is layered: each layer imports only the layers below it BROKEN" in out
    assert "no import cycle between the modules of a package BROKEN" in out
    assert "the Spark job is layered: driver, source, live page, stages, output BROKEN" in out
    assert "orderer.client.readers -> orderer.service.server" in out
    assert "orderer.spark.output.layout -> orderer.spark.driver.runs" in out


UNLAYERED = "orderer"
"""The one module no layer holds: the package itself, the public API's names taken from the
domain's modules (a layer cannot hold the package whose subpackages are layers)."""
GENERATED = "orderer._proto"
"""The generated gRPC stubs: in no layer, the protobuf-at-the-edge contract rules their use."""


def _contracts(root: Path) -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(root / ".importlinter")
    return config


def _names(value: str) -> list[str]:
    """The module names of an option: one a line, or several on a line separated by ``|``."""
    return [name.strip() for line in value.splitlines() for name in line.split("|") if name.strip()]


def _layers(root: Path) -> list[str]:
    return _names(_contracts(root)["importlinter:contract:layers"]["layers"])


def _product_modules(root: Path) -> list[str]:
    """Every module of ``orderer`` and ``evb_operator`` found on disk, as a dotted name (a
    package by its ``__init__``), compiled ``.pyx`` included."""
    modules = []
    for top in (root / "orderer", root / "operator" / "evb_operator"):
        for path in sorted([*top.rglob("*.py"), *top.rglob("*.pyx")]):
            if "__pycache__" in path.parts:
                continue
            parts = (top.name, *path.relative_to(top).with_suffix("").parts)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _outside_layers(root: Path) -> list[str]:
    layers = _layers(root)
    return [
        module
        for module in _product_modules(root)
        if module not in (UNLAYERED, GENERATED) and not module.startswith(GENERATED + ".")
        and not any(module == layer or module.startswith(layer + ".") for layer in layers)
    ]


def test_every_product_module_falls_in_a_layer() -> None:
    """A module in no layer is in no contract that names packages: ``orderer.replay_sweep``
    once fell out of all of them. So every module of ``orderer/`` and ``operator/evb_operator/``
    (found on disk, not by import-linter, which only sees what the contracts name) equals or
    sits under a layer of ``.importlinter``."""
    modules = _product_modules(REPO)
    assert {"orderer.api", "orderer.replay.sweep", "orderer._core.core", "evb_operator.specs",
            "orderer.cli.__main__"} <= set(modules), modules
    assert _outside_layers(REPO) == []


def test_every_spark_module_falls_in_a_layer_of_spark() -> None:
    """``orderer.spark``'s sub-packages are layered among themselves (the ``spark-layers``
    contract): a module straight under ``orderer/spark/``, or a sub-package the contract does
    not name, would be in none of its layers."""
    layers = _names(_contracts(REPO)["importlinter:contract:spark-layers"]["layers"])
    spark = [m for m in _product_modules(REPO) if m.startswith("orderer.spark.")]
    assert {"orderer.spark.driver.job", "orderer.spark.source.datasource"} <= set(spark), spark
    outside = [
        module for module in spark
        if not any(module == layer or module.startswith(layer + ".") for layer in layers)
    ]
    assert outside == []


def test_a_module_in_no_layer_is_caught(tmp_path: Path) -> None:
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    for module in ("orderer/__init__.py", "orderer/api.py", "orderer/newthing.py",
                   "orderer/replay/__init__.py", "orderer/replay/sweep.py",
                   "orderer/_proto/evb/v1/orderer_pb2.py", "orderer/newpackage/__init__.py",
                   "operator/evb_operator/handlers.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    assert _outside_layers(tmp_path) == ["orderer.newpackage", "orderer.newthing"]


EDGES = {
    "grpc-at-the-edge": {"orderer.wire", "orderer.service", "orderer.client"},
    "protobuf-at-the-edge": {"orderer.wire", "orderer.service", "orderer.client"},
    "pyspark-in-spark": {"orderer.spark"},
}
"""The layers each edge contract allows its import: the contract's sources are all the others."""


def test_the_edge_contracts_name_every_layer_but_the_edge() -> None:
    """A forbidden contract lists its sources, so a new layer left out of it would escape it:
    each edge contract's sources are exactly the layers that are not its edge."""
    config = _contracts(REPO)
    layers = set(_layers(REPO))
    for name, edge in EDGES.items():
        sources = set(_names(config[f"importlinter:contract:{name}"]["source_modules"]))
        assert edge <= layers, name
        assert sources == layers - edge, (
            f"{name}: missing {sorted(layers - edge - sources)}, extra {sorted(sources - layers)}"
        )


def _cython_imports(path: Path) -> set[str]:
    """Plain and Cython import statements of a .pyx/.pxd file."""
    pattern = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)
    return {a or b for a, b in pattern.findall(path.read_text())}


def test_the_cython_core_imports_only_numpy_errors_and_the_c_library() -> None:
    allowed = {
        "numpy",
        "orderer.errors",
        "libc.math",
        "libc.stdint",
        "libc.stdlib",
        "libc.string",
        "cpython.mem",
        "cpython.pycapsule",
    }
    parts = sorted((REPO / "orderer" / "_core").glob("*.p[yx][xd]"))
    assert len(parts) > 2, parts
    for path in parts:
        extra = {name for name in _cython_imports(path) if name not in allowed}
        assert not extra, f"{path.name} imports {sorted(extra)}"


def test_operator_directory_is_not_an_importable_package() -> None:
    # `operator` would shadow the standard library module of the same name
    assert not (REPO / "operator" / "__init__.py").exists()
    import operator

    assert hasattr(operator, "itemgetter")


MOST_LINES = 600
"""A product module's most lines: one job a module, readable in one sitting (issue 41)."""


def test_no_product_module_is_longer_than_a_module_with_one_job() -> None:
    sources = [
        path
        for top in (REPO / "orderer", REPO / "operator" / "evb_operator")
        for pattern in ("*.py", "*.pyx")
        for path in top.rglob(pattern)
        if "_proto" not in path.parts
    ]
    long = {
        str(path.relative_to(REPO)): n
        for path in sources
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert sources and not long, f"modules over {MOST_LINES} lines (split by concern): {long}"


def test_every_product_package_opens_with_its_map() -> None:
    """Each package's ``__init__.py`` says what the package holds (issue 41): a newcomer opens
    it first."""
    packages = [
        path
        for top in (REPO / "orderer", REPO / "operator" / "evb_operator")
        for path in top.rglob("__init__.py")
        if "_proto" not in path.parts
    ]
    unmapped = [
        str(path.relative_to(REPO))
        for path in packages
        if not (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").strip()
    ]
    assert packages and not unmapped, f"packages without a map in __init__.py: {unmapped}"
