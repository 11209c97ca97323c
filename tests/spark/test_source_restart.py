"""The one-orderer ``evb`` source's driver (``latestOffset``: the orderer's ``GetStats``) while
its orderer is killed (kill -9) and restarted on its data directory: a call in flight at the
kill, or made while the orderer dies or starts, fails at once whatever its connect timeout; the
query must wait for the orderer, as the reads over several orderers do
(``tests/spark/test_sliced_crash.py``), not end."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from orderer.batch import FragmentBatch
from orderer.client import SourceClient, get_stats
from orderer.spark.source.options import Options
from orderer.spark.source.planning import target_end
from tests.e2e.conftest import ServerProcess


def test_latest_offset_waits_for_a_killed_orderer(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    server = ServerProcess(tmp_path / "data", logs, "--sources", "1", "--startup-delay", "0")
    server.start()
    try:
        with SourceClient(server.target, linger=None) as client:
            ts = np.arange(1, 2001, dtype=np.uint64)
            client.send_fragments(FragmentBatch.from_arrays(1, ts))
            client.wait_acked(30)
        options = Options.parse({"target": server.target, "reconnectTimeout": "60"})
        failures: list[BaseException] = []
        answers = [0]
        stop = threading.Event()

        def ask() -> None:
            try:
                while not stop.is_set():
                    target_end(options)
                    answers[0] += 1
            except BaseException as error:  # for the test to see
                failures.append(error)

        askers = [threading.Thread(target=ask) for _ in range(2)]
        for asker in askers:
            asker.start()
        try:
            for _ in range(3):
                seen = answers[0]
                deadline = time.monotonic() + 60
                while answers[0] <= seen and not failures:
                    assert time.monotonic() < deadline, "no answer within 60 s"
                    time.sleep(0.02)
                server.kill()
                server.start()
        finally:
            stop.set()
            for asker in askers:
                asker.join(120)
        assert not failures, failures
        assert target_end(options) == (get_stats(server.target).next_offset, False)
    finally:
        if server.alive():
            server.stop()
