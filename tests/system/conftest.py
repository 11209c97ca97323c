"""Fixtures of the system tests (``make system``, after ``make images``): the built images and
containers started from them, each removed after its test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from tests.system.pods import podman

ORDERER_IMAGE = "evb:0.1.0"
SPARK_IMAGE = "evb-spark:0.1.0"
"""The tags ``make images`` gives (the operator's defaults)."""


@pytest.fixture(scope="session")
def built_images() -> None:
    """Both images, built by ``make images`` beforehand (``make system`` does): a missing image
    fails the tests that need it, with what to run."""
    for image in (ORDERER_IMAGE, SPARK_IMAGE):
        found = podman("image", "exists", image, check=False)
        assert found.returncode == 0, f"no image {image}: run make images"


_names = itertools.count()


@pytest.fixture
def start_container(built_images: None) -> Iterator[Callable[..., str]]:
    """``start_container(*run_args)`` starts ``podman run --detach`` and returns the container's
    name; every container is removed after the test (its log printed first, for a failure)."""
    started: list[str] = []

    def start(*args: str) -> str:
        name = f"evb-system-{os.getpid()}-{next(_names)}"
        podman("run", "--detach", "--name", name, *args)
        started.append(name)
        return name

    yield start
    for name in started:
        logs = podman("logs", name, check=False)
        print(f"--- {name}\n{logs.stdout}{logs.stderr}")
        podman("rm", "--force", "--time", "0", name, check=False)
