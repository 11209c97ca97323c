"""The files a command writes its results to: never over its own input, never over an earlier
result unless asked, and in place only once whole.

Why: a replay's input is a recorded run, often the only copy, and its output may be a night's
tuning. ``evb replay run.jsonl --output run.jsonl`` used to empty the run before reading it, and
a typo in INPUT emptied the previous OUT before the "no such file" message. So the results are
checked before anything is opened (:func:`check_results`), then written under a temporary name
beside their final one and renamed over it only when the command succeeded (:func:`staged`):
a failed or interrupted command leaves what was there as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from orderer.errors import ConfigError

__all__ = ["check_results", "staged"]


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file (also through links, ``..`` or a second name)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def check_results(
    results: Sequence[tuple[str, Path]], inputs: Sequence[Path], *, overwrite: bool
) -> None:
    """Refuse, before anything is written, results (``(flag, path)``) that are one of the
    ``inputs``, the same file as another result, or exist already without ``overwrite``; the
    message names the flag and the path."""
    for i, (flag, path) in enumerate(results):
        for source in inputs:
            if _same_file(path, source):
                raise ConfigError(
                    flag, str(path), f"is the input {source}: writing it would destroy the "
                    "recorded run being read; choose another name",
                )
        for other_flag, other in results[:i]:
            if _same_file(path, other):
                raise ConfigError(flag, str(path), f"is also {other_flag}; give each its own file")
        if path.is_dir():
            raise ConfigError(flag, str(path), "is a directory; give a file name")
        if path.exists() and not overwrite:
            raise ConfigError(
                flag, str(path), "exists already (an earlier result?); give --overwrite to "
                "replace it, or another name",
            )
        if not path.parent.is_dir():
            raise ConfigError(flag, str(path), f"its directory {path.parent} does not exist")


@contextlib.contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A temporary name beside ``path`` (with its suffix, which says the format) to write the
    result to; renamed to ``path`` if the block succeeds, removed if it fails."""
    temporary = path.with_name(f".{path.name}.partial-{os.getpid()}{path.suffix}")
    try:
        yield temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
