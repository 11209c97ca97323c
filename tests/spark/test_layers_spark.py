"""The layering of STYLE.md for the Spark consumer: pyspark only in ``orderer/spark``; that
subtree reaches the orderer through the client library, never grpc, the stubs or the service."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import _imports

REPO = Path(__file__).resolve().parents[2]


def test_pyspark_stays_in_orderer_spark() -> None:
    for path in sorted([*(REPO / "orderer").rglob("*.py"), *(REPO / "operator").rglob("*.py")]):
        relative = path.relative_to(REPO)
        if "pyspark" in {name.split(".")[0] for name in _imports(path)}:
            assert relative.parts[:2] == ("orderer", "spark"), relative


def test_the_spark_consumer_uses_the_client_library_only() -> None:
    for path in sorted((REPO / "orderer" / "spark").glob("*.py")):
        names = _imports(path)
        assert not {n for n in names if n.split(".")[0] == "grpc"}, path.name
        assert not {n for n in names if n.startswith(("orderer._proto", "orderer.service"))}, (
            path.name
        )
