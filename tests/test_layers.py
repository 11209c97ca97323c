"""The layering of STYLE.md: the Cython core depends on numpy and orderer.errors only, and no
product module imports the test oracle (one implementation of each rule)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    if path.suffix == ".py":
        tree = ast.parse(path.read_text(), filename=str(path))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        return names
    # .pyx/.pxd: plain and Cython import statements
    pattern = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)
    return {a or b for a, b in pattern.findall(path.read_text())}


def test_core_imports_only_numpy_errors_and_the_c_library() -> None:
    allowed = {
        "numpy",
        "orderer.errors",
        "libc.math",
        "libc.stdint",
        "libc.string",
        "cpython.mem",
        "cpython.pycapsule",
    }
    for path in sorted((REPO / "orderer" / "_core").glob("*.p[yx]*")):
        if path.suffix == ".pyi":
            continue
        extra = {name for name in _imports(path) if name not in allowed}
        assert not extra, f"{path.name} imports {sorted(extra)}"


def test_product_code_never_imports_tests() -> None:
    for path in sorted((REPO / "orderer").rglob("*.py")):
        bad = {name for name in _imports(path) if name.split(".")[0] == "tests"}
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_operator_directory_is_not_an_importable_package() -> None:
    # `operator` would shadow the standard library module of the same name
    assert not (REPO / "operator" / "__init__.py").exists()
    import operator

    assert hasattr(operator, "itemgetter")


def test_grpc_stays_at_the_network_edge() -> None:
    """grpc is imported only by the service and the client side, never by the core, the API,
    replay or the storage."""
    allowed = {
        "orderer/service/server.py",
        "orderer/wire/convert.py",
        "orderer/wire/security.py",
        "orderer/service/metrics.py",
        "orderer/service/security.py",
        "orderer/client.py",
        "orderer/remote.py",
    }
    for path in sorted((REPO / "orderer").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if "_proto" in relative:
            continue
        uses_grpc = any(
            name.split(".")[0] == "grpc" or name.startswith(("grpc_", "orderer._proto"))
            for name in _imports(path)
        )
        if uses_grpc:
            assert relative in allowed, f"{relative} imports grpc or the stubs"


def test_kopf_stays_in_the_operator_and_the_operator_reaches_the_orderer_through_its_client() -> (
    None
):
    """kopf only in ``operator/``; there, only the glue (``handlers``, ``kube``) imports it, the
    builders stay pure; the operator talks to the orderer only through ``orderer.client`` (no
    grpc of its own)."""
    for path in sorted((REPO / "orderer").rglob("*.py")):
        assert "kopf" not in {n.split(".")[0] for n in _imports(path)}, path
    glue = {"handlers.py", "kube.py"}
    for path in sorted((REPO / "operator" / "evb_operator").glob("*.py")):
        names = _imports(path)
        roots = {name.split(".")[0] for name in names}
        if path.name not in glue:
            assert not roots & {"kopf", "aiohttp", "grpc"}, f"{path.name} imports {roots}"
        assert "grpc" not in roots, path.name
        assert not {n for n in names if n.startswith(("orderer._proto", "orderer.service"))}, path
