"""Files made durable: a new name synced into its directory, a small file replaced atomically.

Why a module of its own: the segmented logs (:mod:`orderer.service.segments`), the consumer
offsets (:mod:`orderer.service.consumers`) and the run's recorded parameters
(:mod:`orderer.service.data_dir`) all rely on one rule, that a file is on the disk only once
both it and its directory were forced there; written once here, no writer forgets the
directory.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_directory", "replace_file"]


def fsync_directory(directory: Path) -> None:
    """A new file's name is durable only once its directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, content: bytes) -> None:
    """Replace ``path`` atomically (write a temporary file, fsync, rename, fsync the directory):
    a crash leaves the old content or the new one, never a torn file."""
    temporary = path.with_suffix(".tmp")
    with temporary.open("wb") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)
