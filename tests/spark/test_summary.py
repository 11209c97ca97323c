"""The run summary (orderer/spark/output/summary.py) in PySpark local mode: computed by Spark
aggregations, it equals a plain computation over every fragment (what the job did on the driver
before), for a run with late fragments, barriers and several files; and the job's driver collects
nothing that grows with the run (Spark's ``spark.driver.maxResultSize`` set to 1 MiB, a run whose
fragment columns alone are several MiB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orderer.building.config import GlomConfig
from orderer.building.glom import glom_batches
from orderer.job_config import JobConfig
from orderer.spark.driver import job
from orderer.spark.output.summary import RATE_BINS, SUMMARY_SCHEMA, summarize
from tests.spark.logdata import write_ordered_log
from tests.spark.oracle import random_stream

TICK_RATE = 1e3


def _reference(events: pa.Table, tick_rate: float) -> dict[str, Any]:
    """The summary computed fragment by fragment, in offset order."""
    rows = sorted(events.to_pylist(), key=lambda row: row["event"])
    fragments = sorted((f for row in rows for f in row["fragments"]), key=lambda f: f["offset"])
    ordinary = [row for row in rows if row["barrier"] == 0]
    histogram: dict[int, int] = {}
    for row in ordinary:
        histogram[row["multiplicity"]] = histogram.get(row["multiplicity"], 0) + 1
    high_water, lateness = None, []
    for f in fragments:
        if f["late"]:
            lateness.append((high_water - f["timestamp"]) / tick_rate)
        else:
            high_water = f["timestamp"] if high_water is None else max(high_water, f["timestamp"])
    stamps = [f["timestamp"] for f in fragments]
    duration = (max(stamps) - min(stamps)) / tick_rate
    edges = np.linspace(0.0, max(duration, 1.0 / tick_rate), RATE_BINS + 1)
    sources = sorted({f["source"] for f in fragments})
    rates = {}
    for source in sources:
        seconds = [(f["timestamp"] - min(stamps)) / tick_rate for f in fragments
                   if f["source"] == source]
        rates[source] = np.histogram(seconds, bins=edges)[0] / (edges[1] - edges[0])
    lateness_array = np.array(lateness)
    return {
        "events": len(ordinary),
        "barrier_rows": len(rows) - len(ordinary),
        "fragments": len(fragments),
        "first_offset": fragments[0]["offset"],
        "next_offset": fragments[-1]["offset"] + 1,
        "duration_seconds": round(duration, 6),
        "multiplicity": {
            "histogram": {str(m): histogram[m] for m in sorted(histogram)},
            "mean": round(float(np.mean([row["multiplicity"] for row in ordinary])), 4),
            "max": max(row["multiplicity"] for row in ordinary),
        },
        "sources": {
            str(source): {
                "fragments": sum(f["source"] == source for f in fragments),
                "late": sum(f["source"] == source and f["late"] for f in fragments),
                "rate_hz": round(sum(f["source"] == source for f in fragments) / duration, 3),
            }
            for source in sources
        },
        "late": {
            "fragments": len(lateness),
            "events_with_late": sum(row["late"] > 0 for row in rows),
            "max_lateness_seconds": float(lateness_array.max()),
            "mean_lateness_seconds": float(lateness_array.mean()),
        },
        "barriers": [
            {"offset": row["event"], "source": row["fragments"][0]["source"],
             "type": row["barrier"], "timestamp": row["fragments"][0]["timestamp"]}
            for row in rows if row["barrier"]
        ],
        "_edges": edges,
        "_rates": rates,
        "_lateness": lateness_array,
    }


@pytest.mark.parametrize(("seed", "late_share"), [(2, 0.05), (3, 0.3)])
def test_the_summary_by_spark_equals_the_fragment_by_fragment_one(
    spark: Any, tmp_path: Path, seed: int, late_share: float
) -> None:
    stream = random_stream(seed, 6000, late_share=late_share, barrier_share=0.005)
    events = pa.Table.from_batches(
        list(glom_batches(stream.to_batches(max_chunksize=500), GlomConfig(dt=50)))
    )
    for k, part in enumerate(events.to_batches(max_chunksize=700)):  # several files, in any order
        pq.write_table(pa.Table.from_batches([part]), tmp_path / f"part-{(k * 7) % 9}-{k}.parquet")
    frame = spark.read.schema(SUMMARY_SCHEMA).parquet(str(tmp_path))
    assert frame.rdd.getNumPartitions() > 1 or len(list(tmp_path.iterdir())) > 1
    summary = summarize(frame, run="r", tick_rate=TICK_RATE, glom={"dt": 50})
    expected = _reference(events, TICK_RATE)
    got = summary.as_dict()
    assert {k: got[k] for k in expected if not k.startswith("_")} == {
        k: v for k, v in expected.items() if not k.startswith("_")
    }
    assert (got["run"], got["glom"], got["tick_rate"]) == ("r", {"dt": 50}, TICK_RATE)
    assert got["late"]["fragments"] > 0 and got["barriers"]
    assert np.array_equal(summary.rate_edges, expected["_edges"])
    assert summary.rates.keys() == expected["_rates"].keys()
    for source, rates in expected["_rates"].items():
        assert np.array_equal(summary.rates[source], rates), source
    assert np.array_equal(summary.lateness, expected["_lateness"])


def test_the_summary_of_a_run_without_fragments(spark: Any, tmp_path: Path) -> None:
    frame = spark.read.schema(SUMMARY_SCHEMA).parquet(str(tmp_path))
    data = summarize(frame, run="empty", tick_rate=TICK_RATE, glom={}).as_dict()
    assert (data["events"], data["fragments"], data["first_offset"]) == (0, 0, None)
    assert data["multiplicity"] == {"histogram": {}, "mean": None, "max": None}
    assert data["late"]["fragments"] == 0 and data["barriers"] == [] and data["sources"] == {}


def test_the_job_collects_nothing_that_grows_with_the_run(spark: Any, tmp_path: Path) -> None:
    """120,000 fragments: their summary columns alone are about 3 MiB, three times what the
    driver accepts here; the per-fragment data stays on the executors."""
    data = write_ordered_log(tmp_path / "data", random_stream(1, 120_000, late_share=0.005))
    conf = spark.sparkContext._jsc.sc().conf()  # the live SparkConf the scheduler reads
    before = conf.get("spark.driver.maxResultSize", "1g")
    conf.set("spark.driver.maxResultSize", "1m")
    try:
        result = job.run(spark, JobConfig.from_argv(
            ["--path", str(data), "--dt", "60", "--output", str(tmp_path / "out"), "--quiet"]
        ))
    finally:
        conf.set("spark.driver.maxResultSize", before)
    assert result.summary["fragments"] == 120_000
    assert 0 < result.summary["late"]["fragments"] < 1200
