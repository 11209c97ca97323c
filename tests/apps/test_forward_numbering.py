"""``evb forward``'s numbering into a run over several orderers (orderer.apps.forward_numbering)
and the commit metadata that carries it: each orderer's count of a source's share is the
source client's routing counted, a function of A's log that a restart from any checkpoint
continues exactly, and a commit's counts are taken back only for the same slicing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from orderer.apps.forward import _checkpoint_from, _metadata, _sliced_metadata
from orderer.apps.forward_numbering import Checkpoint, Numbering
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.client.routing import SourceRouting, shares
from orderer.replay.slicing import Slicing


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 5),
    t=st.integers(1, 50),
    rows=st.lists(st.tuples(st.integers(0, 400), st.sampled_from([0, 0, 0, 3])), max_size=60),
)
def test_shares_are_the_lengths_of_the_routes_parts(
    n: int, t: int, rows: list[tuple[int, int]]
) -> None:
    slicing = Slicing(n, t)
    batch = FragmentBatch.from_arrays(
        source=5, timestamp=[ts for ts, _ in rows], barrier=[b for _, b in rows]
    )
    routed = {r.orderer: r.part for r in SourceRouting(slicing).route(5, batch)}
    lengths = [len(p) if (p := routed.get(k)) is not None else 0 for k in range(n)]
    assert shares(slicing, batch).tolist() == lengths


def _log(steps: list[tuple[int, int, int]], cuts: list[int]) -> list[EmittedBatch]:
    """A's output: (source, timestamp step, barrier type) rows, cut into batches of ``cuts``;
    the rows of one batch share a flush time, so that barriers in a row form a group."""
    ts = np.cumsum([d for _, d, _ in steps]).astype(np.uint64)
    batches, start, c = [], 0, 0
    while start < len(steps):
        stop = min(len(steps), start + cuts[c % len(cuts)])
        rows = steps[start:stop]
        lengths = np.array([i % 3 for i in range(start, stop)], dtype=np.uint64)
        offsets = np.zeros(len(rows) + 1, dtype=np.uint64)
        np.cumsum(lengths, out=offsets[1:])
        batches.append(
            EmittedBatch(
                first_seq=start,
                t=np.full(len(rows), float(c)),
                source=np.array([s for s, _, _ in rows], dtype=np.uint32),
                timestamp=ts[start:stop],
                barrier=np.array([b for _, _, b in rows], dtype=np.uint32),
                late=np.zeros(len(rows), dtype=np.bool_),
                payload_offsets=offsets,
                payload=np.full(int(offsets[-1]), 7, dtype=np.uint8),
            )
        )
        start, c = stop, c + 1
    return batches


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 30), st.sampled_from([0, 0, 0, 0, 2])),
        min_size=1,
        max_size=120,
    ),
    cuts=st.lists(st.integers(1, 25), min_size=1, max_size=8),
    as_source=st.sampled_from([None, 100]),
    resume_at=st.integers(0, 50),
)
def test_a_restart_from_any_checkpoint_numbers_every_share_as_the_first_pass(
    n: int,
    steps: list[tuple[int, int, int]],
    cuts: list[int],
    as_source: int | None,
    resume_at: int,
) -> None:
    """Counting A's log through once, and counting it to a checkpoint, then from a fresh
    numbering restored there: every part and every count the same; each source's shares are
    its fragments routed by the client's rule (ordinary to the slice's owner, barriers to all)."""
    slicing = Slicing(n, 20)
    log = _log(steps, cuts)
    whole = Numbering(slicing, as_source)
    parts = [whole.parts(batch) for batch in log]
    checkpoints = []
    probe = Numbering(slicing, as_source)
    position = 0
    for batch in log:
        probe.parts(batch)
        position += len(batch)
        if not probe.open:
            checkpoints.append(probe.checkpoint(position))
    if not checkpoints:
        return
    checkpoint = checkpoints[resume_at % len(checkpoints)]
    resumed = Numbering(slicing, as_source)
    resumed.restore(checkpoint)
    done = 0
    for i, batch in enumerate(log):
        if done >= checkpoint.offset:
            again = resumed.parts(batch)
            assert [(p.source.tolist(), p.barrier.tolist()) for p in again] == [
                (p.source.tolist(), p.barrier.tolist()) for p in parts[i]
            ]
        done += len(batch)
    assert resumed.checkpoint(done) == whole.checkpoint(done)
    # the shares are the routing's, fragment by fragment
    for source, share in whole.shares.items():
        sent = [p for ps in parts for p in ps if int(p.source[0]) == source]
        ts = np.concatenate([p.timestamp for p in sent])
        barrier = np.concatenate([p.barrier for p in sent])
        owner = slicing.owner(ts)
        expected = [
            int(((owner == k) & (barrier == 0)).sum() + (barrier != 0).sum()) for k in range(n)
        ]
        assert share.tolist() == expected
        assert whole.fragments[source] == len(ts)


def test_sliced_commit_metadata_is_taken_back_only_for_the_same_run_and_when_it_adds_up() -> None:
    slicing = Slicing(3, 1000)
    # source 1: 10 fragments, 2 of them barriers (at all three); source 2: 4 ordinary
    checkpoint = Checkpoint(14, {1: 10, 2: 4}, {1: (5, 4, 5), 2: (1, 0, 3)})
    metadata = _sliced_metadata(checkpoint, None, slicing)
    assert _checkpoint_from(metadata, 14, None, slicing) == checkpoint
    assert _checkpoint_from(metadata, 15, None, slicing) is None  # not this offset's
    assert _checkpoint_from(metadata, 14, 100, slicing) is None  # another --as-source
    assert _checkpoint_from(metadata, 14, None, Slicing(3, 999)) is None  # another T
    assert _checkpoint_from(metadata, 14, None, Slicing(1, 1)) is None  # one orderer: v1 only
    assert _checkpoint_from(b"", 14, None, slicing) is None  # an older forwarder's commit
    assert _checkpoint_from(_metadata({1: 10, 2: 4}, None), 14, None, slicing) is None  # v1
    odd = Checkpoint(14, {1: 10, 2: 4}, {1: (5, 4, 4), 2: (1, 0, 3)})  # 13: not 10 + 2k
    assert _checkpoint_from(_sliced_metadata(odd, None, slicing), 14, None, slicing) is None
    short = Checkpoint(14, {1: 10, 2: 4}, {1: (5, 4), 2: (1, 0, 3)})
    assert _checkpoint_from(_sliced_metadata(short, None, slicing), 14, None, slicing) is None
    # into one orderer the counts are v1's, written and read as always
    one = _checkpoint_from(_metadata({1: 10, 2: 4}, None), 14, None, Slicing(1, 1))
    assert one == Checkpoint(14, {1: 10, 2: 4}, {1: (10,), 2: (4,)})
    assert _checkpoint_from(b"", 14, 7, Slicing(1, 1)) == Checkpoint(14, {7: 14}, {7: (14,)})
