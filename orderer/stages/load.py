"""A user's module of stages (``evb spark-job --stages FILE.py``).

The module is a plain Python file: its :class:`~orderer.stages.api.Stage` objects at module
level are its stages, in the order they are defined (or, when it has one, the ``STAGES`` list
alone). Why a file and not an importable package: the operator mounts it from a ConfigMap into
the driver, where nothing installs it; the executors get the stages' functions pickled by value
(:mod:`orderer.spark.stages.runner` registers the module with cloudpickle), so they need no
copy.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from orderer.errors import ConfigError
from orderer.stages.api import Stage

__all__ = ["load_stages", "module_name"]


def module_name(path: Path) -> str:
    """The name the module is imported under: its file's stem (its functions' pickles carry
    it; the executors get the functions by value and need no copy of the file)."""
    return path.stem


def load_stages(path: Path | str) -> tuple[Stage, ...]:
    """The stages of the module at ``path``; a missing file, an error while importing it, or a
    module without stages raise ``ConfigError`` naming the file (and the line that failed)."""
    path = Path(path)
    if path.suffix != ".py":
        raise ConfigError("--stages", str(path), "must be a Python file (FILE.py)")
    if not path.is_file():
        raise ConfigError("--stages", str(path), "no such file")
    name = module_name(path)
    if not name.isidentifier():
        raise ConfigError("--stages", str(path), "the file's name must be a Python identifier")
    taken = sys.modules.get(name)
    if taken is not None and not _same_file(getattr(taken, "__file__", None), path):
        raise ConfigError(
            "--stages",
            str(path),
            f"its name {name!r} is the name of a module in use ({getattr(taken, '__file__', '')})"
            ": rename the file",
        )
    module = _import(path, name)
    listed = getattr(module, "STAGES", None)
    if listed is not None:
        stages = tuple(listed)
        wrong = [s for s in stages if not isinstance(s, Stage)]
        if wrong:
            raise ConfigError("--stages", str(path), f"STAGES holds non-stages: {wrong!r}")
    else:
        found = [value for value in vars(module).values() if isinstance(value, Stage)]
        stages = tuple({id(stage): stage for stage in found}.values())  # one stage, two names
    if not stages:
        raise ConfigError(
            "--stages",
            str(path),
            "defines no stage (decorate a function with order_insensitive, order_sensitive or"
            " sequencer from orderer.stages)",
        )
    return stages


def _same_file(loaded: str | None, path: Path) -> bool:
    """The module in use was loaded from ``path`` (a second load of the same stages)."""
    return loaded is not None and Path(loaded).resolve() == path.resolve()


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module  # its functions' globals resolve, and pickle, through it
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's code: anything
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == str(path)]
        where = f" (line {frames[-1].lineno})" if frames else ""
        raise ConfigError(
            "--stages", str(path), f"importing it failed{where}: {type(error).__name__}: {error}"
        ) from error
    return module
