"""Shared test fixtures: where the spec and its worked examples live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPEC = Path(os.environ.get("EVB_SPEC_DIR", REPO.parent / "shared" / "spec"))
EXAMPLES = SPEC / "examples"


def example_dirs() -> list[Path]:
    """The worked examples of ORDERING.md; the spec is part of every checkout of the project."""
    if not EXAMPLES.is_dir():
        raise RuntimeError(f"spec examples not found at {EXAMPLES}; set EVB_SPEC_DIR")
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.fixture
def repo() -> Path:
    return REPO
