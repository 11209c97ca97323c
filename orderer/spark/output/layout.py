"""Where a run's results live under the job's output (:class:`Layout`; the tree is in
:mod:`orderer.spark.driver.job`'s docstring), and the run's name (:func:`run_name`).

Why a run owns whole directories: a run never deletes or overwrites another's results, and doing
the same run again replaces exactly that run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orderer.job_config import JobConfig

__all__ = ["RUN_NAME", "Layout", "run_name"]

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
"""A run name: a directory name and a partition value that need no quoting (a Kubernetes
resource name is one)."""


@dataclass(frozen=True)
class Layout:
    """Where one run's results live under the output (:mod:`orderer.spark.driver.job`'s docstring
    has the tree)."""

    output: str
    run: str
    events: str = field(init=False)
    """The run's events: a partition of ``OUTPUT/events``."""
    run_dir: str = field(init=False)
    """The run's own directory (``OUTPUT/runs/RUN``), which holds the rest."""
    summary: str = field(init=False)
    report: str = field(init=False)
    building: str = field(init=False)
    """How a streamed run builds its events, recorded at its start."""
    checkpoint: str = field(init=False)
    """The streaming query's checkpoint unless ``--checkpoint`` says otherwise."""

    def __post_init__(self) -> None:
        run_dir = f"{self.output}/runs/{self.run}"
        for name, path in (
            ("events", f"{self.output}/events/run={self.run}"),
            ("run_dir", run_dir),
            ("summary", f"{run_dir}/summary.json"),
            ("report", f"{run_dir}/report"),
            ("building", f"{run_dir}/building.json"),
            ("checkpoint", f"{run_dir}/checkpoint"),
        ):
            object.__setattr__(self, name, path)  # frozen

    @classmethod
    def of(cls, config: JobConfig, run: str | None = None) -> Layout:
        """The layout of ``run`` (default: the configuration's :func:`run_name`) under the
        configuration's output."""
        return cls(config.output.rstrip("/"), run_name(config) if run is None else run)


def run_name(config: JobConfig) -> str:
    """``--run``; else the EventBuilder's name from ``--target`` (its first orderer's, for a
    run over several); else ``run``."""
    if config.run:
        return config.run
    if config.target:  # <name>-orderer.<namespace>.svc:50051, as the operator names it
        first, several = config.target.split(",")[0], "," in config.target
        host = first.rsplit(":", 1)[0].split(".")[0]
        if several:  # orderer k of a run over several: <name>-orderer-<k>.<name>-orderer...
            host = re.sub(r"-\d+$", "", host)
        name = host.removesuffix("-orderer")
        if name and not re.fullmatch(r"[\d\[\]:]+|localhost", name):
            return name
    return "run"
