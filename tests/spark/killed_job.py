"""``evb spark-job`` killed mid-run, for the tests of what a restarted job resumes from: the job
as a process of its own (its driver and JVM in one process group), SIGKILLed once its stages sink
has marked ``batches`` micro-batches done in the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def manifests(checkpoint: Path) -> int:
    """Micro-batches the stages sink marked done in ``checkpoint``."""
    batches = checkpoint / "evb-stages" / "_batches"
    return len(list(batches.glob("*.json"))) if batches.is_dir() else 0


def kill_after(flags: Sequence[str], checkpoint: Path, log: Path, batches: int = 2) -> int:
    """Run ``evb spark-job *flags`` (one micro-batch a second, ``local[2]``) and SIGKILL it once
    ``batches`` micro-batches are marked done; returns how many were (its log in ``log``)."""
    argv = [sys.executable, "-m", "orderer.cli", "spark-job", *flags, "--trigger-seconds", "1",
            "--master", "local[2]"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 180
            while manifests(checkpoint) < batches and process.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return manifests(checkpoint)
