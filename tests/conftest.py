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

REPO = Path(__file__).resolve().parent.parent

settings.register_profile("evb", deadline=None)
settings.load_profile("evb")
"""No per-example deadline: ``make test`` runs two workers on two cores, where one example can
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
