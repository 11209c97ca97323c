"""Persistence has one owner per rule: the orderer a service runs with is built only by recovery
(so that it is always the arrival log replayed, the guarantee ``evb replay`` checks), and the
service forces files to the disk only through the segmented stream and the durable-file helpers
(so that no writer forgets to sync a new file's directory)."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "orderer" / "service"


def _calls(name: str) -> set[str]:
    """The service's modules that call ``name`` (a plain name or an attribute, ``os.fsync``)."""
    found = set()
    for path in SERVICE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
                found.add(path.stem)
    return found


def test_only_recovery_builds_the_orderer() -> None:
    assert _calls("Orderer") == {"recovery"}


def test_only_the_segments_and_the_durable_files_force_data_to_disk() -> None:
    assert _calls("os.fsync") == {"segments", "durable"}
    assert _calls("os.replace") == {"durable"}
