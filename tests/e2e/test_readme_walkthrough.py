"""The README's hand-run walkthrough, executed as written.

A newcomer's first contact after ``make demo`` is the README's "A run by hand": if one of its
commands drifts from the CLI (a renamed flag, a changed default, an output that moved), the
newcomer is the one who finds out. So this test takes the shell blocks between the
``<!-- walkthrough: begin -->`` and ``<!-- walkthrough: end -->`` markers of README.md, joins them
into one script and runs it with bash in an empty directory, with the ``evb`` of this
environment first on PATH, exactly as a user with the virtualenv activated would. Then it checks
what each step should have left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, environment

BEGIN, END = "<!-- walkthrough: begin -->", "<!-- walkthrough: end -->"
TIMEOUT = 420.0
"""Seconds for the whole walkthrough: one synthetic run of a few seconds and one Spark job,
whose JVM start alone takes 10-30 s on a busy 2-core machine."""

pytestmark = pytest.mark.slow


def walkthrough_script(readme: str) -> str:
    """The shell commands of the walkthrough, in order, as the README shows them."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise AssertionError(f"README.md must hold one {BEGIN} ... {END} section")
    section = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    if not blocks:
        raise AssertionError("the walkthrough section holds no ```sh block")
    return "".join(blocks)


def test_the_walkthrough_script_is_found() -> None:
    script = walkthrough_script((REPO / "README.md").read_text(encoding="utf-8"))
    commands = [line.split()[1] for line in script.splitlines() if line.startswith("evb ")]
    assert commands == ["serve", "send", "stats", "tail", "end-run", "spark-job"]


def test_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script = walkthrough_script((REPO / "README.md").read_text(encoding="utf-8"))
    env = environment()
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "evb").exists(), f"no evb script beside {sys.executable}: install evb first"
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the background `evb serve` is in it too: killed on failure
    )
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the walkthrough took over {TIMEOUT} s\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, f"exit {process.returncode}\n{out[-4000:]}\n{err[-4000:]}"

    # evb send: a JSON summary, every fragment of sources 1-4 acknowledged
    sent = json.loads(next(line for line in out.splitlines() if line.startswith('{"fragments"')))
    assert set(sent["acked"]) == {"1", "2", "3", "4"}
    # evb stats: the table names the four sources
    assert re.search(r"^\s*4\s", out, flags=re.MULTILINE), out
    # evb tail --until 5: five output lines, offsets 0-4
    tailed = [json.loads(line) for line in out.splitlines() if line.startswith('{"seq"')]
    assert [record["seq"] for record in tailed] == [0, 1, 2, 3, 4]
    # evb end-run: the offset after the run's last fragment
    ended = json.loads(next(line for line in out.splitlines() if "next_offset" in line))
    assert ended["next_offset"] >= sum(sent["acked"].values())
    # evb spark-job: events of run1 and its summary
    events = list((tmp_path / "events").rglob("*.parquet"))
    assert events and all("run=run1" in str(path) for path in events), events
    summaries = list((tmp_path / "events").rglob("summary*.json"))
    assert summaries, sorted(str(p) for p in (tmp_path / "events").rglob("*"))
    summary = json.loads(summaries[0].read_text())
    assert summary["fragments"] == ended["next_offset"]
