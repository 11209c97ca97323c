"""The live totals' counts as they travel (:mod:`orderer.spark.live.partials`): made per
partition where the events are built, cut in pieces of text, gathered on the driver from the
observation (through the JVM's row, or through the public ``get``) and summed: the same as
counting all the events at once, for any cut of the events into partitions and batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import glom_batches
from orderer.spark.live import partials
from orderer.spark.output import event_counts
from orderer.spark.output.coincidence import rows_batch, spectrum_axis


def _events(n: int, seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10**8, n)).astype(np.int64)
    fragments = pa.RecordBatch.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(rng.integers(0, 6, n).astype(np.int64)),
            pa.array(ts),
            pa.array(np.where(rng.random(n) < 0.01, 2, 0).astype(np.int64)),
            pa.array(rng.random(n) < 0.05),
            pa.array([b"p"] * n, pa.binary()),
        ],
        names=["offset", "source", "timestamp", "barrier", "late", "payload"],
    )
    chunks = [fragments.slice(k, 997) for k in range(0, n, 997)]
    return list(glom_batches(iter(chunks), GlomConfig(dt=50_000, max_fragments=1000)))


class _Row:
    """What py4j gives of the JVM's row: ``getList(0)`` and its ``size``/``get``."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.calls = 0

    def getList(self, index: int) -> Any:
        assert index == 0
        return self

    def size(self) -> int:
        return len(self.pieces)

    def get(self, k: int) -> str:
        self.calls += 1
        return self.pieces[k]


class _Handle:
    def __init__(self, row: _Row) -> None:
        self.row = row

    def getRow(self) -> _Row:
        return self.row


class _Public:
    """An observation without the JVM handle: the public ``get`` alone."""

    def __init__(self, pieces: list[str]) -> None:
        self.get = {"counts": pieces}


def _pieces(batches: list[pa.RecordBatch], partitions: int, dt: int) -> list[str]:
    cut = np.array_split(np.arange(len(batches)), partitions)
    pieces: list[str] = []
    for part in cut:
        for batch in partials.with_counts(iter([batches[k] for k in part]), dt):
            column = batch.column(partials.COLUMN).to_pylist()
            assert all(value is None for value in column[:-1])
            if column[-1] is not None:
                pieces += column[-1]
    return pieces


@pytest.mark.parametrize("partitions", [1, 3, 7])
@pytest.mark.parametrize("public", [False, True])
def test_gathered_counts_equal_a_count_of_all_events(partitions: int, public: bool) -> None:
    events = _events(60_000, partitions)
    pieces = _pieces(events, partitions, 50_000)
    assert max(len(p) for p in pieces) <= partials.PIECE
    assert sum(p.startswith("#") for p in pieces) == partitions
    observation: Any = _Public(pieces) if public else type("O", (), {})()
    if not public:
        observation._jo = _Handle(_Row(pieces))
    got = partials.decoded(partials.gathered(observation))
    axis = spectrum_axis(50_000)
    parts = [row for batch in events for row in event_counts.batch_rows(batch, axis)]
    expected = event_counts.summed(pa.Table.from_batches([rows_batch(parts)]))
    keys = [(k, "ascending") for k in ("kind", "a", "b", "c")]
    got, expected = got.sort_by(keys), expected.sort_by(keys)
    for column in ("kind", "a", "b", "c"):
        assert got.column(column).equals(expected.column(column))
    time = got.column("kind").to_numpy() == event_counts.TIME
    sums = [t.column("sum").to_numpy()[~time] for t in (got, expected)]
    assert np.array_equal(*sums)  # counts: summed; the timestamps: their min and max
    for column in ("min", "max"):
        assert np.array_equal(*(t.column(column).to_numpy()[time] for t in (got, expected)))
    if not public:
        assert observation._jo.row.calls == len(pieces)  # one short py4j answer a piece


def test_totals_survive_their_checkpoint_file_and_read_the_older_rows_too() -> None:
    """A run's totals written to the checkpoint and read back are equal; a totals file of the
    earlier shape (the pairs as rows) is read the same."""
    import json

    from orderer.spark.live.counts import count_batch
    from orderer.spark.live.totals import RunTotals

    events = _events(30_000, 11)
    totals = RunTotals("r", 50_000)
    for batch_id, k in enumerate(range(0, len(events), 3)):
        blobs = partials.gathered(_Public(_pieces(events[k : k + 3], 2, 50_000)))
        totals.add(batch_id, count_batch(blobs, {}, None))
    back = RunTotals.from_json(totals.to_json())
    assert back == totals and back.pairs and back.fragment_count == totals.fragment_count
    older = json.loads(totals.to_json())
    older["pairs"] = [[*key, n] for key, n in sorted(totals.pairs.items())]
    assert RunTotals.from_json(json.dumps(older)) == totals


def test_the_live_counts_option_is_true_or_false_and_names_itself_otherwise() -> None:
    from orderer.errors import ConfigError
    from orderer.spark.source.options import Options

    base = {"target": "127.0.0.1:1", "output": "events", "dt": "100"}
    assert Options.parse({**base, "liveCounts": "true"}).schema.endswith(partials.SPARK_COLUMN)
    assert partials.COLUMN not in Options.parse({**base, "liveCounts": "false"}).schema
    assert partials.COLUMN not in Options.parse(base).schema
    with pytest.raises(ConfigError, match="liveCounts"):
        Options.parse({**base, "liveCounts": "yes please"})
