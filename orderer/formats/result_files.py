"""The files a command writes its results to: never over its own input, never over an earlier
result unless asked, and in place only once whole.

Why: a replay's input is a recorded run, often the only copy, and its output may be a night's
tuning. ``evb replay run.jsonl --output run.jsonl`` used to empty the run before reading it, and
a typo in INPUT emptied the previous OUT before the "no such file" message. So the results are
checked before anything is opened (:func:`check_results`), then written under a temporary name
beside their final one and renamed over it only when the command succeeded (:func:`staged`):
a failed or interrupted command leaves what was there as it was. A result that is a stream
rather than a file (``--output /dev/stdout`` into a pipe, a FIFO) holds no earlier result to
keep and cannot be renamed over: it is written in place (:func:`is_stream`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from orderer.errors import ConfigError

__all__ = ["check_results", "is_stream", "staged"]


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file (also through links, ``..`` or a second name)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def is_stream(path: Path) -> bool:
    """``path`` exists and is neither a regular file nor a directory: ``/dev/stdout``, a pipe,
    a terminal, a device. Renaming a staged file over it would replace the device node (as root,
    ``/dev/stdout`` itself) instead of writing to it."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


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
        if path.exists() and not overwrite and not is_stream(path):
            raise ConfigError(
                flag, str(path), "exists already (an earlier result?); give --overwrite to "
                "replace it, or another name",
            )
        if not path.parent.is_dir():
            raise ConfigError(flag, str(path), f"its directory {path.parent} does not exist")


@contextlib.contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A temporary name beside ``path`` (with its suffix, which says the format) to write the
    result to; renamed to ``path`` if the block succeeds, removed if it fails. A stream
    (:func:`is_stream`) is written in place."""
    if is_stream(path):
        yield path
        return
    temporary = path.with_name(f".{path.name}.partial-{os.getpid()}{path.suffix}")
    try:
        yield temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
