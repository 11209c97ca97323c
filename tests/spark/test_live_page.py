"""The live page's server (``evb spark-job --ui``) for real on loopback, without Spark: the page
and its files, the board's documents as JSON, 404 for anything else (never a traceback), GET and
HEAD only; and the flag's mistakes, one line and exit status 2 before Spark starts."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from orderer.building.glom import EVENT_SCHEMA
from orderer.errors import ConfigError
from orderer.spark.live.board import Board
from orderer.spark.live.counts import BatchCounts, StageCounts
from orderer.spark.live.page import LivePage, parse_address
from orderer.spark.live.totals import RunTotals
from orderer.stages.load import load_stages
from orderer.stages.plan import plan
from tests.e2e.conftest import environment

STAGES = Path(__file__).with_name("stages_module.py")


def _counts(scale: int) -> BatchCounts:
    gaps = np.zeros(130, np.int64)
    gaps[[0, 5, 129]] = [scale, 2 * scale, 1]
    return BatchCounts(
        shapes={(2, 0, False): 10 * scale, (3, 0, True): scale, (1, 7, False): 1},
        fragments={(1, False): 12 * scale, (2, False): 12 * scale, (2, True): scale},
        pairs={(0, 1, 2, 3): 4 * scale, (0, 2, 1, 0): scale, (1, 1, 1, 0): 11 * scale,
               (1, 1, 2, 0): 11 * scale, (1, 2, 1, 0): 11 * scale, (1, 2, 2, 0): 11 * scale},
        first_timestamp=100,
        last_timestamp=100 + 1000 * scale,
        stages={"gaps": StageCounts(int(gaps.sum()), {"gap": gaps})},
    )  # fmt: skip


@pytest.fixture
def page() -> Iterator[LivePage]:
    board = Board(plan(load_stages(STAGES), EVENT_SCHEMA))
    served = LivePage("127.0.0.1:0", board)
    served.start()
    try:
        yield served
    finally:
        served.close()


def _get(page: LivePage, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    host, port = page.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path)
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", reply.read()
    finally:
        connection.close()


def test_the_page_serves_its_files_and_the_boards_documents(page: LivePage) -> None:
    status, kind, body = _get(page, "/")
    assert status == 200 and kind.startswith("text/html") and b"static/app.js" in body
    assert b"http" not in body.replace(b"http://", b"").lower() or b"https://" not in body
    for name in ("app.js", "style.css", "plotly-cartesian.min.js"):
        status, _, body = _get(page, f"/static/{name}")
        assert status == 200 and body
    assert json.loads(_get(page, "/api/runs")[2]) == {"runs": []}
    assert _get(page, "/api/runs/r")[0] == 404  # nothing published yet

    totals = RunTotals("run 7", dt=3)
    totals.add(0, _counts(1))
    page.board.publish(totals)
    totals.add(1, _counts(2))
    page.board.publish(totals)
    runs = json.loads(_get(page, "/api/runs")[2])
    assert runs == {"runs": [{"run": "run 7", "state": "running"}]}
    index = json.loads(_get(page, "/api/runs/run%207")[2])
    assert index["batch"] == 1 and index["micro_batches"] == 2
    assert index["events"] == 33 and index["barrier_rows"] == 2 and index["events_with_late"] == 3
    assert index["fragments"] == 36 + 36 + 3 and index["late_fragments"] == 3
    assert index["sources"] == [{"source": 1, "fragments": 36, "late": 0},
                                {"source": 2, "fragments": 39, "late": 3}]  # fmt: skip
    assert index["stages"] == [{"name": "gaps", "rows": 3 + 6 + 2}]
    names = [h["name"] for h in index["histograms"]]
    assert names == [
        "multiplicity", "dt_spectrum", "coincidences", "stage_gaps_gap", "stage_gaps_source_gap"
    ]
    gap = json.loads(_get(page, "/api/runs/run%207/histograms/stage_gaps_gap")[2])
    assert (gap["underflow"], gap["counts"][4], gap["overflow"], gap["entries"]) == (3, 6, 2, 11)
    assert len(gap["counts"]) == 128 and len(gap["x"]["edges"]) == 129 and gap["batch"] == 1
    multiplicity = json.loads(_get(page, "/api/runs/run%207/histograms/multiplicity")[2])
    assert multiplicity["counts"] == [0, 0, 30, 3]  # barrier rows are not events
    spectrum = json.loads(_get(page, "/api/runs/run%207/histograms/dt_spectrum")[2])
    assert spectrum["x"]["edges"][0] == -3.5 and len(spectrum["counts"]) == 7
    assert spectrum["counts"][3] == 12 and spectrum["counts"][0] == 3 and spectrum["underflow"] == 0
    matrix = json.loads(_get(page, "/api/runs/run%207/histograms/coincidences")[2])
    assert matrix["dimensions"] == 2 and matrix["counts"] == [[33, 33], [33, 33]]
    assert matrix["x"]["categories"] == ["1", "2"]
    page.board.ended("run 7")
    assert json.loads(_get(page, "/api/runs/run%207")[2])["state"] == "ended"


def test_the_board_shows_the_totals_as_published_not_as_added_to_since() -> None:
    """A publication keeps the totals as they are: the job goes on adding the next micro-batch
    into the same object, and a page asking meanwhile still gets the published micro-batch,
    rendered once (the same bytes until the next publication)."""
    board = Board(plan(load_stages(STAGES), EVENT_SCHEMA))
    totals = RunTotals("r", dt=3)
    totals.add(0, _counts(1))
    board.publish(totals)
    totals.add(1, _counts(2))  # not published yet
    index = board.index("r")
    assert index is not None and board.index("r") is index  # rendered once
    assert json.loads(index)["batch"] == 0 and json.loads(index)["events"] == 11
    gap = json.loads(board.histogram("r", "stage_gaps_gap") or b"null")
    assert (gap["batch"], gap["underflow"], gap["counts"][4]) == (0, 1, 2)
    board.publish(totals)
    assert json.loads(board.index("r") or b"null")["events"] == 33


@pytest.mark.parametrize(
    "path",
    ["/nothing", "/static/../page.py", "/static/page.py", "/api/runs/x",
     "/api/runs/x/histograms/multiplicity", "/api/runs/run%207/histograms/nothing",
     "/api/runs/run%207/histograms", "/api/runs/%ff%fe/histograms/x", "/api"],
)  # fmt: skip
def test_what_does_not_exist_is_404_never_a_traceback(page: LivePage, path: str) -> None:
    totals = RunTotals("run 7", dt=3)
    totals.add(0, _counts(1))
    page.board.publish(totals)
    status, kind, body = _get(page, path)
    assert (status, body) == (404, b"not found\n") and kind.startswith("text/plain")


def test_the_page_is_read_only(page: LivePage) -> None:
    for method in ("POST", "PUT", "DELETE"):
        assert _get(page, "/api/runs", method)[0] == 501
    status, _, body = _get(page, "/api/runs", "HEAD")
    assert status == 200 and body == b""


def test_addresses() -> None:
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_address("[::1]:0") == ("::1", 0)
    for wrong in ("", "host:", "host:port", "70000", "localhost"):
        with pytest.raises(ConfigError, match="--ui"):
            parse_address(wrong)


def _spark_job(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orderer.cli", "spark-job", *flags],
        capture_output=True, text=True, env=environment(), timeout=120, check=False,
    )  # fmt: skip


def test_the_flags_mistakes_are_one_line_before_spark_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "ordered").mkdir(parents=True)
    (data / "ordered" / "ordered-000000000000.arrow").write_bytes(b"")
    base = ["--path", str(data), "--dt", "10", "--output", str(tmp_path / "out")]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _spark_job(*base, "--ui", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "evb spark-job: --ui: cannot serve the live page there: the port is in use (got "
        f"'127.0.0.1:{port}')"
    )
    done = _spark_job(*base, "--ui", "nowhere:")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "evb spark-job: --ui: must be [HOST:]PORT with a port from 0 to 65535 (got 'nowhere:')"
    )
    done = _spark_job(*base, "--ui")
    assert done.returncode == 2 and "--ui: expected one argument" in done.stderr
    unsafe = tmp_path / "unsafe_stages.py"
    unsafe.write_text(
        "import pyarrow as pa\n"
        "from orderer.stages import Histogram, order_insensitive\n"
        "@order_insensitive(schema=[('energy keV', pa.float64())],\n"
        "                   histograms=[Histogram('energy keV', 10, 0, 10)])\n"
        "def energies(events):\n"
        "    return events\n"
    )
    done = _spark_job(*base, "--stages", str(unsafe), "--ui", "0")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "evb spark-job: --ui: the live page names a histogram by its column, which may hold only"
        " letters, digits, _ . and -: rename the column (got \"stage energies: histogram of "
        "'energy keV'\")"
    )
