"""``evb forward``: building in two levels with real ``evb serve`` processes. Two lower orderers
with disjoint sources (1, 2 and 3, 4), a forwarder each, one top orderer.

What the contract says the two-level build must share with the one-level build of the same
sources (``evb replay`` of the same run, as one orderer would build it):

- always: the same multiset of fragments (source, timestamp, barrier type, payload), each once,
  also across a kill -9 of a lower orderer, of a forwarder or of the top orderer;
- when nothing is late at either level (windows large enough for the run's jitter), the same
  sequence of segments: each resolution of barriers is the same group (source, type) at the
  same place, and between two of them the same multiset of data. Within a segment the order
  may differ only among fragments with equal timestamps (a merge round at each level orders
  those by source id, but the rounds are cut at different places).
"""

from __future__ import annotations

import collections
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orderer.apps.forward import _counts_from, _metadata
from orderer.batch import EmittedBatch
from orderer.client import OrderedStreamReader, commit, end_run, get_committed, get_stats
from orderer.config import OrdererConfig
from orderer.replay.simulate import replay
from orderer.replay.synthetic import SyntheticRun, generate_records, iter_batches
from tests.e2e.conftest import ServerProcess, environment, evb_command

SPEC = SyntheticRun(
    n_sources=4,
    fragments_per_source=2500,
    rate=1000.0,
    batch_size=10,
    sync_barriers=2,
    payload_size=8,
    seed=17,
)
SEND_FLAGS = [
    "--n-sources", "4", "--fragments", "2500", "--rate", "1000", "--batch-size", "10",
    "--sync-barriers", "2", "--payload-size", "8", "--seed", "17", "--client-batch", "100",
    "--linger", "0.02", "--no-progress",
]  # fmt: skip
WINDOW = {"build_window": 0.5, "startup_delay": 0.2}
SERVE_FLAGS = ["--build-window", "0.5", "--startup-delay", "0.2"]
LOWER = {"low-1": "1,2", "low-2": "3,4"}

Fragment = tuple[int, int, int, bytes]


def _fragments(batches: list[EmittedBatch]) -> list[tuple[Fragment, bool]]:
    return [
        (
            (int(b.source[i]), int(b.timestamp[i]), int(b.barrier[i]), b.payload_of(i)),
            bool(b.late[i]),
        )
        for b in batches
        for i in range(len(b))
    ]


def _expected() -> collections.Counter[Fragment]:
    return collections.Counter(
        (int(s), int(ts), int(kind), batch.slice(i, i + 1).payload.tobytes())
        for _, batch in iter_batches(SPEC)
        for i, (s, ts, kind) in enumerate(
            zip(batch.source, batch.timestamp, batch.barrier, strict=True)
        )
    )


def _segments(items: list[Fragment]) -> list[Any]:
    """The output cut at its barriers: data multisets and barrier groups, alternating."""
    segments: list[Any] = []
    for item in items:
        barrier = item[2] != 0
        kind = "barriers" if barrier else "data"
        if (
            not segments
            or segments[-1][0] != kind
            or (barrier and item[0] in {s for s, _ in segments[-1][1]})
        ):
            segments.append((kind, collections.Counter()))
        segments[-1][1][(item[0], item[2]) if barrier else item] += 1
    return segments


class _Forwarder:
    def __init__(self, log_dir: Path, *args: str) -> None:
        self.args, self.log_dir, self.starts = args, log_dir, 0
        self.process = self.start()

    def start(self) -> subprocess.Popen[str]:
        self.starts += 1
        log = (self.log_dir / f"forward-{self.args[1]}-{self.starts}.log").open("w")
        self.process = subprocess.Popen(
            evb_command("forward", *self.args),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environment(),
        )
        log.close()
        return self.process

    def finish(self) -> dict[str, Any]:
        """The JSON summary the forwarder prints once the lower run ended."""
        out, _ = self.process.communicate(timeout=120)
        assert self.process.returncode == 0, f"see {self.log_dir}"
        return dict(json.loads(out.strip().splitlines()[-1]))


def _committed(kill: str, lower: dict[str, ServerProcess], top: ServerProcess) -> bool:
    """A forwarder to be killed has committed something at its lower orderer (the other
    forwarder alone can bring the top orderer's count up to where the kill happens; killed
    before its first commit, the restart would rightly begin at offset 0)."""
    if not kill.startswith("forward-"):
        return True
    name = kill.removeprefix("forward-")
    return get_committed(lower[name].target, f"forward-to-{top.target}").offset > 0


def _received(target: str) -> int:
    try:
        return get_stats(target, timeout=5, connect_timeout=1).totals.received
    except ConnectionError:
        return 0


def _build(
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
    *,
    top_sources: str = "1,2,3,4",
    as_source: dict[str, str] | None = None,
    kill: str | None = None,
    lower_flags: dict[str, list[str]] | None = None,
    before_restart: Callable[[], None] | None = None,
    register: bool = False,
) -> tuple[list[EmittedBatch], list[dict[str, Any]]]:
    """The two-level build of SPEC; ``kill``: which process gets a kill -9 mid-run (``low-1``,
    ``forward-low-1`` or ``top``), restarted once ``before_restart`` returned (at once by
    default). ``lower_flags``: more ``evb serve`` flags of a lower orderer; ``register``: the
    forwarders' consumers are registered at the lower orderers before the run (as with retention
    on, which would otherwise delete what no known consumer holds). Returns the top's output."""
    top = server_factory(tmp_path / "top", *SERVE_FLAGS, "--sources", top_sources)
    lower = {
        name: server_factory(
            tmp_path / name, *SERVE_FLAGS, "--sources", sources, *(lower_flags or {}).get(name, [])
        )
        for name, sources in LOWER.items()
    }
    for server in lower.values() if register else ():
        commit(server.target, f"forward-to-{top.target}", 0)
    senders = [
        subprocess.Popen(
            evb_command(
                "send", "--target", lower[name].target, "--only-sources", sources, *SEND_FLAGS
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for name, sources in LOWER.items()
    ]
    forwarders = {
        name: _Forwarder(
            tmp_path,
            "--from",
            lower[name].target,
            "--to",
            top.target,
            *(["--as-source", (as_source or {})[name]] if name in (as_source or {}) else []),
        )
        for name in LOWER
    }
    if kill is not None:
        total = sum(_expected().values())
        deadline = time.monotonic() + 60
        while _received(top.target) < total // 3 or not _committed(kill, lower, top):
            assert time.monotonic() < deadline, "the top orderer did not get going"
            time.sleep(0.05)
        assert all(s.poll() is None for s in senders), "the run ended before the kill"
        if kill == "top":
            top.kill()
            top.start()
        elif kill.startswith("forward-"):
            victim = forwarders[kill.removeprefix("forward-")]
            victim.process.kill()
            victim.process.wait(30)
            time.sleep(0.5)  # the run goes on at the lower level meanwhile
            if before_restart is not None:
                before_restart()
            victim.start()
        else:
            lower[kill].kill()
            lower[kill].start()
    for sender in senders:
        _, err = sender.communicate(timeout=120)
        assert sender.returncode == 0, err
    for server in lower.values():
        end_run(server.target)
    summaries = [forwarder.finish() for forwarder in forwarders.values()]
    end = end_run(top.target)
    return list(OrderedStreamReader(top.target, 0, until=end)), summaries


def test_two_level_build_equals_the_one_level_build(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    output, summaries = _build(tmp_path, server_factory)
    items = _fragments(output)
    one_level, counters = replay(generate_records(SPEC), OrdererConfig.from_mapping(WINDOW))
    assert counters["totals"]["late"] == 0
    assert not any(late for _, late in items)
    got = [item for item, _ in items]
    assert collections.Counter(got) == _expected()
    assert _segments(got) == _segments([item for item, _ in _fragments([one_level])])
    assert [s["sources"] for s in summaries] == [[1, 2], [3, 4]]
    assert [s["from_offset"] for s in summaries] == [0, 0]


def test_as_source_makes_each_barrier_group_one_barrier(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    output, _ = _build(tmp_path, server_factory, top_sources="3,4,100", as_source={"low-1": "100"})
    got = [item for item, _ in _fragments(output)]
    # every fragment once; those of sources 1 and 2 as source 100, the barrier of source 2 in
    # each of its groups as ordinary data right after source 1's, which keeps its type
    expected: collections.Counter[Fragment] = collections.Counter()
    for (source, ts, kind, payload), n in _expected().items():
        if source == 1:
            expected[100, ts, kind, payload] += n
        elif source == 2:
            expected[100, ts, 0, payload] += n
        else:
            expected[source, ts, kind, payload] += n
    assert collections.Counter(got) == expected
    groups = [sorted(segment) for kind, segment in _segments(got) if kind == "barriers"]
    assert groups == [[(3, k), (4, k), (100, k)] for k in (1, 3, 3, 2)]  # all complete


@pytest.mark.parametrize("kill", ["low-1", "forward-low-1", "top"])
def test_kill_9_mid_run_every_fragment_once_at_the_top(
    tmp_path: Path, server_factory: Callable[..., ServerProcess], kill: str
) -> None:
    output, summaries = _build(tmp_path, server_factory, kill=kill)
    got = collections.Counter(item for item, _ in _fragments(output))
    assert got == _expected()
    if kill == "forward-low-1":  # the restarted forwarder resumed at its committed offset
        assert summaries[0]["from_offset"] > 0
    if kill == "top":
        assert all(s["reconnects"] >= 1 for s in summaries)


def test_forwarder_restarts_from_its_commit_metadata_when_retention_took_the_log_start(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    """A lower orderer with small segments and retention on: while its forwarder is down
    (kill -9), retention deletes the start of its log (everything the forwarder committed is
    fair game). The restarted forwarder resumes from the per-source counts it committed as the
    commit's metadata, reading nothing below its offset: every fragment once at the top."""
    config = tmp_path / "low-1.yaml"
    config.write_text("segmentBytes: 4096\nretentionBytes: 16384\n")
    ordered = tmp_path / "low-1" / "ordered"

    def first_offset() -> int:
        return min(int(p.stem.rsplit("-", 1)[1]) for p in ordered.glob("*.arrow"))

    def log_start_deleted() -> None:
        deadline = time.monotonic() + 30
        while first_offset() == 0:
            assert time.monotonic() < deadline, "retention deleted nothing"
            time.sleep(0.05)

    output, summaries = _build(
        tmp_path,
        server_factory,
        kill="forward-low-1",
        lower_flags={"low-1": ["--config", str(config)]},
        before_restart=log_start_deleted,
        register=True,
    )
    got = collections.Counter(item for item, _ in _fragments(output))
    assert got == _expected()
    assert summaries[0]["from_offset"] > 0 and not summaries[0]["recounted"]
    assert first_offset() > summaries[0]["from_offset"] // 2  # the early segments are gone


def test_commit_metadata_is_used_only_when_it_fits_the_offset() -> None:
    """A restart resumes from the counts a commit carried only when they are a forwarder's, of
    the same ``--as-source``, and add up to the committed offset; otherwise (a commit of an older
    forwarder, without metadata) it counts A's log again."""
    counts = {1: 30, 2: 12}
    assert _counts_from(_metadata(counts, None), 42, None) == counts
    assert _counts_from(b"", 42, None) is None  # an older forwarder's commit
    assert _counts_from(_metadata(counts, None), 43, None) is None
    assert _counts_from(_metadata(counts, 100), 42, None) is None
    assert _counts_from(b'{"counts": {"1": 42}}', 42, None) is None
    assert _counts_from(b"\xff not json", 42, None) is None


def test_an_orderer_is_not_forwarded_into_itself() -> None:
    """``--to`` equal to ``--from`` would feed the orderer's output back as its input for ever:
    refused before connecting, exit 2, naming the address."""
    done = subprocess.run(
        evb_command("forward", "--from", "127.0.0.1:1", "--to", "127.0.0.1:1"),
        capture_output=True, text=True, env=environment(), timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "downstream: 127.0.0.1:1 is the upstream itself" in done.stderr
