"""The layers of evb hold: the import-linter contracts in ``.importlinter`` (run here, so that
``make test`` fails on a breach, and shown to fail on one), plus what import-linter cannot see:
the imports of the Cython core's ``.pyx``/``.pxd`` files, and ``operator/`` not being a package.
"""

from __future__ import annotations

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

    result = _lint_imports(tmp_path)

    out = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0, out
    assert "the client, the Spark job and the operator never reach the service or the " \
        "command line BROKEN" in out
    assert "orderer is layered: each layer imports only the layers below it BROKEN" in out
    assert "no import cycle between the modules of a package BROKEN" in out
    assert "orderer.client.readers -> orderer.service.server" in out


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
