"""The README's hand-run walkthroughs, executed as written.

A newcomer's first contact after ``make demo`` is the README's "A run by hand" (and "A run over
three orderers, by hand"): if one of its commands drifts from the CLI (a renamed flag, a changed
default, an output that moved), the newcomer is the one who finds out. So this test takes the
shell blocks between the ``<!-- walkthrough: begin -->`` and ``<!-- walkthrough: end -->``
markers of README.md (``walkthrough-orderers`` for the second), joins them into one script and
runs it with bash in an empty directory, with the ``evb`` of this environment first on PATH,
exactly as a user with the virtualenv activated would. Then it checks what each step should have
left behind.
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
ORDERERS = "<!-- walkthrough-orderers: begin -->", "<!-- walkthrough-orderers: end -->"
TIMEOUT = 420.0
"""Seconds for the whole walkthrough: one synthetic run of a few seconds and one Spark job,
whose JVM start alone takes 10-30 s on a busy 2-core machine."""

pytestmark = pytest.mark.slow


def walkthrough_script(readme: str, begin: str = BEGIN, end: str = END) -> str:
    """The shell commands of the walkthrough, in order, as the README shows them."""
    if readme.count(begin) != 1 or readme.count(end) != 1:
        raise AssertionError(f"README.md must hold one {begin} ... {end} section")
    section = readme.split(begin, 1)[1].split(end, 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    if not blocks:
        raise AssertionError("the walkthrough section holds no ```sh block")
    return "".join(blocks)


def test_the_walkthrough_script_is_found() -> None:
    script = walkthrough_script((REPO / "README.md").read_text(encoding="utf-8"))
    commands = [line.split()[1] for line in script.splitlines() if line.startswith("evb ")]
    assert commands == ["serve", "send", "stats", "tail", "end-run", "spark-job"]


def _run(script: str, cwd: Path) -> str:
    """The script run by bash as a user would, its stdout once it exited 0."""
    env = environment()
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "evb").exists(), f"no evb script beside {sys.executable}: install evb first"
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
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
    return out


def test_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    out = _run(walkthrough_script((REPO / "README.md").read_text(encoding="utf-8")), tmp_path)

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


def test_the_three_orderers_walkthrough_is_found() -> None:
    script = walkthrough_script((REPO / "README.md").read_text(encoding="utf-8"), *ORDERERS)
    commands = [line.split()[1] for line in script.splitlines() if line.lstrip().startswith("evb ")]
    assert commands == ["serve", "send", "stats", "end-run", "spark-job", "replay"]


def test_the_three_orderers_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Three orderers fed by one ``evb send``, ended by one ``evb end-run`` given one address,
    built by the Spark job over the three: its events are the simulator's from the three
    arrival logs, row for row."""
    import pyarrow.parquet as pq

    out = _run(walkthrough_script((REPO / "README.md").read_text(encoding="utf-8"), *ORDERERS),
               tmp_path)  # fmt: skip
    sent = json.loads(next(line for line in out.splitlines() if line.startswith('{"fragments"')))
    assert set(sent["acked"]) == {"1", "2", "3", "4"}
    assert "a run over 3 orderers, slices of 1000000 ticks" in out
    ended = json.loads(next(line for line in out.splitlines() if line.startswith('{"orderers"')))
    assert [row["orderer"] for row in ended["orderers"]] == [0, 1, 2]
    assert all(row["next_offset"] > 0 for row in ended["orderers"])

    built = pq.read_table(sorted((tmp_path / "events3" / "events").rglob("*.parquet")))
    replayed = pq.read_table(tmp_path / "replayed.parquet")
    columns = replayed.schema.names  # the job's rows carry their run besides
    assert built.num_rows == replayed.num_rows > 0
    assert built.select(columns).sort_by("event").to_pylist() == replayed.sort_by(
        "event"
    ).to_pylist()
    fragments = sum(len(row["fragments"]) for row in replayed.to_pylist())
    assert fragments == sent["fragments"]
