"""Shared test fixtures: the repository's root and the worked examples of the ordering contract.

The examples are test data inside the repository (``tests/data/ordering-examples/``, described in
``docs/ordering.md``), so a clone needs nothing beside it to run the tests.
"""

from __future__ import annotations

import os

# As ``evb`` sets it (orderer/cli/__init__.py), before anything here imports gRPC: the tests'
# process asks servers over gRPC and then starts the shared SparkSession's JVM (a fork with a
# preexec_fn), which gRPC's fork support can kill before its exec or hang (grpc/grpc#43055); the
# processes the tests start inherit it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from pathlib import Path

import pytest
from hypothesis import settings

from tests.jvm_classes import CACHE, JVM_OPTIONS, QUIET, archive

# Every JVM the tests start (the shared SparkSession's, each ``evb spark-job``'s and demo's: the
# spark-submit launcher adds SPARK_SUBMIT_OPTS to the driver's command line) compiles with C1
# alone and collects with one thread: the tests' jobs are seconds long on small inputs, where
# C2's compilations and G1's threads cost more CPU on two cores than they ever win back (the
# suite is CPU-bound). Nothing the JVM computes changes; a user's jobs keep the JVM's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM_OPTIONS)

REPO = Path(__file__).resolve().parent.parent

settings.register_profile("evb", deadline=None)
settings.load_profile("evb")
"""No per-example deadline: ``make test`` runs three workers on two cores, where one example can
wait for the CPU far longer than Hypothesis' 200 ms (a deadline failed once there on an example
that takes 11 ms alone). A property that must be fast says so with its own ``@settings``."""
EXAMPLES = REPO / "tests" / "data" / "ordering-examples"


def example_dirs() -> list[Path]:
    """The worked examples of ``docs/ordering.md``, one directory each."""
    if not EXAMPLES.is_dir():
        raise RuntimeError(f"the worked examples are missing from {EXAMPLES}")
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.fixture
def repo() -> Path:
    return REPO


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the tests start maps Spark's classes from one archive
    (:mod:`tests.jvm_classes`: why, and how it can never change a result), made here once per
    PySpark and JDK into pytest's cache (where ``make class-archive`` makes it too). By the main
    process alone, before pytest-xdist starts its workers: they inherit the environment."""
    if hasattr(config, "workerinput") or getattr(config, "cache", None) is None:
        return
    made = archive(CACHE, os.environ["SPARK_SUBMIT_OPTS"])
    if made is not None:
        os.environ["SPARK_SUBMIT_OPTS"] += f" -XX:SharedArchiveFile={made} {QUIET}"


_LONG = ("spark", "bench")
"""Test directories whose files start JVMs or whole pipelines: tens of seconds to minutes a file."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long files first (those of :data:`_LONG` and those holding a ``slow`` test), each
    file's tests in their order: ``make test``'s three workers take a file at a time, and with
    the long ones handed out first the many short files even out the end, instead of one worker
    running the last long file alone while the others wait."""
    root = REPO / "tests"
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def late(item: pytest.Item) -> bool:
        path = item.path
        return path not in slow and path.relative_to(root).parts[0] not in _LONG

    items.sort(key=late)  # stable: the order inside each group is kept
