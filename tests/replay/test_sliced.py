"""``evb replay --orderers N --slice-ticks T``: the routing rule, one orderer (N = 1) equal to the
plain replay, identical output where docs/scale-out.md says so, and each documented difference
counted exactly on a small hand-made run whose counts are derived in the test's text."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orderer.batch import ArrivalKind, ArrivalRecords
from orderer.cli import main
from orderer.config import OrdererConfig
from orderer.formats.json_lines import read_records
from orderer.replay.simulate import replay
from orderer.replay.sliced import Router, numbered, replay_sliced
from orderer.replay.sliced_merge import BarrierDifferences, LateDifferences
from orderer.replay.slicing import Slicing

_SETTINGS = settings(
    max_examples=100, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
U = 1 / 8
"""A time step that sums exactly in binary (the window rule compares sums of times)."""


def records_of(rows: Iterable[dict]) -> ArrivalRecords:
    return read_records(json.dumps(row) for row in rows)


def sliced(rows: list[dict], config: dict, slicings: list[Slicing], dt: int | None = None):
    """One orderer's summary and each setting's result (differences, routing, counters)."""
    records = records_of(rows)
    run = replay_sliced(lambda: [records], OrdererConfig.from_mapping(config), slicings, dt)
    return run, list(run.settings)


# ------------------------------------------------------------------------------- routing


def _routed(records: ArrivalRecords, router: Router, cut: list[int]) -> list[list[tuple]]:
    """Each orderer's records as tuples, the input routed in chunks cut at ``cut``."""
    out: list[list[tuple]] = [[] for _ in range(router.slicing.orderers)]
    bounds = [0, *cut, len(records)]
    for a, b in itertools.pairwise(bounds):
        if b > a:
            for o, part in enumerate(router.route(records.slice(a, b))):
                out[o] += [
                    (float(t), int(k), int(s), int(v), int(bt), part.payload_of(i))
                    for i, (t, k, s, v, bt) in enumerate(zip(
                        part.times(), part.kind, part.source, part.value, part.barrier,
                        strict=True,
                    ))
                ]
    return out


@st.composite
def runs(draw: st.DrawFn) -> list[dict]:
    """Small runs: fragments (some barriers) from three sources, in or out of order, with
    watermarks, ends and operators' marks, at non-decreasing times with long silences."""
    rows, t = [], 0.0
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0.0, U, 1.0, 3.0, 7.0]))
        source = draw(st.integers(1, 3))
        kind = draw(st.sampled_from(["ts"] * 6 + ["barrier", "watermark", "end", "dead"]))
        if kind in ("ts", "barrier"):
            row = {"t": t, "source": source, "ts": draw(st.integers(0, 5000))}
            if kind == "barrier":
                row["barrier"] = draw(st.integers(1, 3))
        elif kind == "watermark":
            row = {"t": t, "source": source, "watermark": draw(st.integers(0, 5000))}
        elif kind == "end":
            row = {"t": t, "source": source, "end": True}
        else:
            row = {"t": t, "source": source, "dead": draw(st.booleans())}
        rows.append(row)
    return rows


@_SETTINGS
@given(
    rows=runs(), n=st.integers(1, 4), ticks=st.sampled_from([1, 7, 100, 1000, 10**6]),
    timeout=st.sampled_from([None, 2.0, 5.0]), cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_routing_rule(rows: list[dict], n: int, ticks: int, timeout: float | None,
                      cuts: list[int]) -> None:
    """Every ordinary fragment reaches exactly the owner of its slice, every other record every
    orderer, each at its own time; a watermark at the start of each slice a source enters, right
    after the fragment, at every other orderer; the release of a silent source (an end at every
    orderer, at last arrival + timeout) exactly where the rule says; and chunk boundaries change
    nothing (the router carries its state)."""
    records = numbered(records_of(rows), 0)
    slicing = Slicing(n, ticks)
    whole = _routed(records, Router(slicing, timeout), [])
    cut = sorted({c for c in cuts if 0 < c < len(records)})
    assert _routed(records, Router(slicing, timeout), cut) == whole
    expected: list[list[tuple]] = [[] for _ in range(n)]
    top: dict[int, int] = {}
    last: dict[int, float] = {}
    ended: dict[int, bool] = {}

    def release_before(t: float) -> None:
        """The releases due strictly before ``t``, by due time, then source."""
        if n == 1 or timeout is None:
            return
        for source in sorted(last, key=lambda s: (last[s], s)):
            if not ended.get(source) and last[source] + timeout < t:
                for o in range(n):
                    expected[o].append(
                        (last[source] + timeout, int(ArrivalKind.END_OF_SOURCE), source, 0, 0, b"")
                    )
                ended[source] = True

    for i in range(len(records)):
        t, kind, source = float(records.times()[i]), int(records.kind[i]), int(records.source[i])
        value, barrier = int(records.value[i]), int(records.barrier[i])
        release_before(t)
        row = (t, kind, source, value, barrier, records.payload_of(i))
        if kind == ArrivalKind.FRAGMENT and barrier == 0:
            expected[(value // ticks) % n].append(row)
            if source not in top or value // ticks > top[source]:
                for o in range(n):
                    if o != (value // ticks) % n:
                        expected[o].append(
                            (t, int(ArrivalKind.WATERMARK), source, value // ticks * ticks, 0, b"")
                        )
                top[source] = max(top.get(source, -1), value // ticks)
        else:
            for o in range(n):
                expected[o].append(row)
        if kind != ArrivalKind.SOURCE_STATE:
            last[source] = t
            if kind != ArrivalKind.WATERMARK:
                ended[source] = kind == ArrivalKind.END_OF_SOURCE
    assert whole == expected


def test_release_of_a_dead_source() -> None:
    """Source 2 silent for 5 s with a 2 s timeout: an end at both orderers at 2 + 2 = 4 s, before
    the record of t = 5; a source that ended itself, or one silent exactly the timeout, none."""
    rows = [
        {"t": 1.0, "source": 1, "ts": 100}, {"t": 2.0, "source": 2, "ts": 200},
        {"t": 3.0, "source": 1, "ts": 1100}, {"t": 3.5, "source": 3, "ts": 1150},
        {"t": 3.5, "source": 3, "end": True}, {"t": 5.0, "source": 1, "ts": 2100},
        {"t": 5.5, "source": 3, "watermark": 5000}, {"t": 7.0, "source": 1, "ts": 3100},
        {"t": 9.0, "source": 1, "ts": 4100},
    ]
    router = Router(Slicing(2, 1000), 2.0)
    (first, second) = router.route(records_of(rows))
    ends = [(float(t), int(s)) for t, s, k in zip(first.times(), first.source, first.kind,
                                                   strict=True) if k == ArrivalKind.END_OF_SOURCE]
    assert ends == [(3.5, 3), (4.0, 2)]  # 1 is never silent 2 s before a record; 3 ended itself
    assert [float(t) for t in first.times()] == sorted(float(t) for t in first.times())
    assert router.counts.releases == 2
    assert ArrivalKind.END_OF_SOURCE in second.kind.tolist()


def test_numbered_keeps_a_configuration_change() -> None:
    changes = ArrivalRecords.configure({"build_window": 3}).at(1.0)
    records = ArrivalRecords.concat([records_of([{"t": 1.0, "source": 1, "ts": 5}]), changes])
    out = numbered(records, 41)
    assert out.payload_of(0) == (41).to_bytes(8, "little")
    assert json.loads(out.payload_of(1)) == {"build_window": 3}


# ---------------------------------------------------------- one orderer equals the replay


@_SETTINGS
@given(rows=runs(), window=st.sampled_from([0.5, 2.0, 20.0]),
       timeout=st.sampled_from([None, 3.0]), drop=st.booleans())
def test_one_orderer_is_the_plain_replay(rows: list[dict], window: float,
                                         timeout: float | None, drop: bool) -> None:
    config = {"build_window": window, "startup_delay": 0.5,
              "source_timeout": "off" if timeout is None else timeout,
              "late_policy": "drop" if drop else "emit"}
    emitted, counters = replay(records_of(rows), OrdererConfig.from_mapping(config))
    run, (result,) = sliced(rows, config, [Slicing(1, 100)], dt=10)
    single, diff = run.single, result.differences
    assert run.counters == counters == result.orderers[0]
    assert single.fragments == len(emitted) and single.late == int(emitted.late.sum())
    assert diff.events is not None
    assert diff.moved == diff.late.differ == diff.events.differ == 0
    assert diff.fragments.only_single == diff.fragments.only_sliced == 0
    assert diff.barriers.differ == 0 and result.routing.watermarks == 0
    assert diff.events.equal_to_glom_of_merged


@_SETTINGS
@given(rows=runs(), n=st.integers(2, 4), ticks=st.sampled_from([7, 100, 1000]))
def test_every_fragment_once_and_events_as_glom_of_the_merged_stream(
    rows: list[dict], n: int, ticks: int
) -> None:
    """Whatever the run: each fragment is in the merged stream once, and the slices' builders
    give exactly glom's events over the merged stream (sure starts)."""
    _, (result,) = sliced(rows, {"startup_delay": 0.5, "build_window": 2.0}, [Slicing(n, ticks)],
                          15)
    diff = result.differences
    assert diff.fragments.only_single == diff.fragments.only_sliced == 0
    assert diff.events is not None and diff.events.equal_to_glom_of_merged


@st.composite
def orderly_runs(draw: st.DrawFn) -> list[dict]:
    """Every source in timestamp order, sending every barrier (at one timestamp a barrier)."""
    rows, t, ts = [], 0.0, dict.fromkeys((1, 2, 3), 0)
    for _ in range(draw(st.integers(1, 50))):
        t += draw(st.sampled_from([0.0, U, 1.0, 4.0]))
        if draw(st.integers(0, 9)) == 0:
            barrier_ts = max(ts.values()) + draw(st.integers(0, 300))
            for source in (1, 2, 3):
                rows.append({"t": t, "source": source, "ts": barrier_ts, "barrier": 3})
                ts[source] = barrier_ts
            continue
        source = draw(st.integers(1, 3))
        ts[source] += draw(st.integers(0, 400))
        rows.append({"t": t, "source": source, "ts": ts[source]})
    return rows


@_SETTINGS
@given(rows=orderly_runs(), n=st.integers(2, 4), ticks=st.sampled_from([7, 100, 1000]))
def test_late_flags_are_the_contracts_on_the_merged_stream(
    rows: list[dict], n: int, ticks: int
) -> None:
    """With sources in order, declared, never dead, and every barrier from every source (so
    every barrier resolves as one group), each orderer's late flag is already the contract's
    rule over the merged stream: the merge changes none (docs/scale-out.md, Late fragments and
    the high-water mark). A dead source lets a barrier resolve without it, ahead of data
    (``test_a_barrier_ahead_of_its_orderers_data_makes_the_merge_flag_late``)."""
    config = {"startup_delay": 0.5, "build_window": 1.0, "source_timeout": "off",
              "sources": [1, 2, 3]}
    _, (result,) = sliced(rows, config, [Slicing(n, ticks)])
    late = result.differences.late
    assert late.raised_by_merge == late.lowered_by_merge == 0


# ----------------------------------------------------------------- identical, and why


def _clean_run() -> list[dict]:
    """Three sources in step, timestamps 1000 k + 10 s (all distinct), a cluster of three
    (one event with dt 25) every 1000 ticks; a begin-run, a synchronisation and an end-run
    barrier from every source, each at one timestamp."""
    rows = [{"t": 0.0, "source": s, "ts": 0, "barrier": 1} for s in (1, 2, 3)]
    for k in range(1, 120):
        for s in (1, 2, 3):
            rows.append({"t": k * U + s * U / 8, "source": s, "ts": 1000 * k + 10 * s})
        if k == 60:
            rows += [{"t": k * U + U / 2, "source": s, "ts": 60_500, "barrier": 3}
                     for s in (1, 2, 3)]
    rows += [{"t": 16.0, "source": s, "ts": 200_000, "barrier": 2} for s in (1, 2, 3)]
    return rows


@pytest.mark.parametrize("n", [2, 3, 4])
def test_identical_when_nothing_is_late(n: int) -> None:
    """Nothing late, no ties, barriers in one slice: the merged stream is one orderer's, item
    for item, and so are its events, whether slice boundaries fall between the clusters
    (T = 1000) or cut them (T = 1015). Built slice by slice from sure starts, a straddling
    cluster is one event; built from each piece's first fragment it would be two: exactly one
    more event differs per straddling event."""
    run, results = sliced(_clean_run(), {"startup_delay": 0.5}, [Slicing(n, 1000),
                                                                 Slicing(n, 1015)], dt=25)
    assert run.single.late == 0 and run.single.events == 119 + 9
    diffs = [result.differences for result in results]
    events = []
    for diff in diffs:
        assert diff.events is not None
        events.append(diff.events)
        assert diff.moved == diff.late.differ == diff.late.sliced == 0
        assert diff.events.differ == 0 and diff.events.sliced == 128
        assert diff.barriers == BarrierDifferences(differ=0, split=0, copies_disagree=0)
    between, cutting = events
    assert between.straddling == between.differ_if_built_alone == 0
    # cluster k spans [1000 k + 10, 1000 k + 30]: boundary 1015 j cuts it when it leaves
    # fragments on both sides, 1000 k + 10 < 1015 j <= 1000 k + 30
    straddling = sum(
        1 for j in range(1, 200) for k in range(1, 120) if 1000 * k + 10 < 1015 * j <= 1000 * k + 30
    )
    assert straddling > 0
    assert cutting.straddling == straddling
    assert cutting.differ_if_built_alone == straddling


# ------------------------------------------------------------ documented differences


def _backlog_run() -> list[dict]:
    """Source 1: ts 100 k at t = k/8 (k = 1..80). Source 2: ts 100 k + 10 at k/8 + 1/16, but
    k = 21..44 held and delivered together at 5.5625 (a backlog). Window 1 s, no timeout."""
    rows = [{"t": k * U, "source": 1, "ts": 100 * k} for k in range(1, 81)]
    for k in range(1, 81):
        t = 44 * U + U / 2 if 21 <= k <= 44 else k * U + U / 2
        rows.append({"t": t, "source": 2, "ts": 100 * k + 10})
    return sorted(rows, key=lambda r: r["t"])


def test_a_backlog_is_late_for_one_orderer_and_waited_for_by_sliced_ones() -> None:
    """One orderer: source 2's queue empties at t = 2.625 (its 2010 popped), its frontier is
    none and source 1's fragments go out by the window rule, each 1 s after it came: at 5.5625
    those of k <= 36 are out (high-water mark 3600), so the backlog's 2110 ... 3510 (15) is late
    and goes out after source 1's 2100 ... 3600 (16): 15 fragments moved. Glom (dt 20) pairs
    (100 k, 100 k + 10): one orderer breaks the pairs of k = 21..36 into 16 + 15 + 1 single
    events (3610 alone, after 3510), 32 events that sliced orderers do not have.

    Sliced (N = 2, T = 1000): source 2 entered slice 2 with a watermark 2000 at orderer 1 and
    slice 1 with 1000 at orderer 0, so its frontier is never none: both orderers wait for the
    backlog and emit in timestamp order, nothing late, the pairs whole."""
    config = {"build_window": 1, "startup_delay": 0, "source_timeout": "off"}
    run, (result,) = sliced(_backlog_run(), config, [Slicing(2, 1000)], dt=20)
    diff = result.differences
    assert run.single.late == 15 and run.single.events == 20 + 32 + 44
    assert diff.late == LateDifferences(
        single=15, sliced=0, differ=15, raised_by_merge=0, lowered_by_merge=0
    )
    assert diff.moved == 15
    assert diff.events is not None
    assert diff.events.sliced == 80 and diff.events.differ == 32
    assert diff.events.straddling == 0 and result.routing.releases == 0


def test_the_release_of_a_dead_source() -> None:
    """The same run with source_timeout 2 s: source 2 last sent at 2.5625, so the sliced router
    ends it at both orderers at 4.5625 (two releases), and from then source 1's fragments go out
    as they come. Its backlog at 5.5625 is late at each orderer below source 1's newest there:
    orderer 0 (slices 2 and 4, out to 4400) 2110 ... 2910 and 4010 ... 4310 (13), orderer 1
    (slice 3, out to 3900) 3010 ... 3810 (9): 22. 3910 and 4410 are not, in the merged stream
    either (3910 follows 3900 in slice 3's piece). One orderer (dead only matters to barriers)
    still flags 15."""
    config = {"build_window": 1, "startup_delay": 0, "source_timeout": 2}
    run, (result,) = sliced(_backlog_run(), config, [Slicing(2, 1000)], dt=20)
    assert run.single.late == 15
    assert result.routing.releases == 2
    assert result.differences.late.sliced == 22
    assert result.differences.late.raised_by_merge == 0


def test_a_barrier_group_across_a_boundary_is_split() -> None:
    """Source 1's barrier at 990 (slice 0, orderer 0), source 2's at 1010 (slice 1, orderer 1):
    every orderer resolves both, complete, but keeps only its own. One orderer emits
    990b 1010b then source 1's 995 (behind its barrier); sliced, 995 stays in slice 0's piece,
    before 1010b: one fragment moved, one group split, the resolutions alike, no event differs
    (dt 10: every fragment alone)."""
    rows = [
        {"t": 0.1, "source": 1, "ts": 500}, {"t": 0.2, "source": 2, "ts": 600},
        {"t": 0.3, "source": 1, "ts": 990, "barrier": 3}, {"t": 0.4, "source": 1, "ts": 995},
        {"t": 0.5, "source": 2, "ts": 1010, "barrier": 3}, {"t": 0.6, "source": 1, "ts": 1500},
        {"t": 0.7, "source": 2, "ts": 1600},
    ]
    _, (result,) = sliced(rows, {"startup_delay": 0}, [Slicing(2, 1000)], dt=10)
    diff = result.differences
    assert diff.moved == 1
    assert diff.barriers == BarrierDifferences(differ=0, split=1, copies_disagree=0)
    assert diff.events is not None and diff.events.differ == 0


def test_a_barrier_ahead_of_its_orderers_data_makes_the_merge_flag_late() -> None:
    """Sources 2 and 3 are not known when source 1's barriers come (no startup delay left, not
    declared): source 1's barrier at 294 goes out alone at orderer 0, complete, then its 400
    (slice 4) too, which opens orderer 0's piece 4 before the data of slice 2 it emits next
    (source 2's 294, not late at orderer 0). In the merged stream that 294 comes after orderer
    1's piece 3 (source 1's 300): the merge flags it late, as one orderer does."""
    rows = [{"t": 0.0, "source": 1, "ts": 0},
            *({"t": 1.0, "source": s, "ts": 294, "barrier": 3} for s in (1, 2, 3)),
            {"t": 1.0, "source": 2, "ts": 294}, {"t": 1.0, "source": 1, "ts": 300},
            *({"t": 1.0, "source": s, "ts": 400, "barrier": 3} for s in (1, 2, 3))]
    run, (result,) = sliced(rows, {"startup_delay": 0.5}, [Slicing(2, 100)])
    assert run.single.late == 1
    assert result.differences.late == LateDifferences(
        single=1, sliced=1, differ=0, raised_by_merge=1, lowered_by_merge=0
    )
    _, (dropped,) = sliced(rows, {"startup_delay": 0.5, "late_policy": "drop"}, [Slicing(2, 100)])
    fragments = dropped.differences.fragments
    assert fragments.dropped_by_merge == 1
    assert fragments.only_single == fragments.only_sliced == 0


# ------------------------------------------------------------------------ the command


def test_command_prints_a_table_and_writes_stats(tmp_path: Path, capsys: pytest.CaptureFixture
                                                 ) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in _backlog_run()))
    flags = ["--build-window", "1", "--startup-delay", "0", "--source-timeout", "off"]
    assert main(["replay", str(run), "--orderers", "1,2", "--slice-ticks", "1000", "--dt", "20",
                 *flags]) == 0
    table = capsys.readouterr().out
    assert "one orderer: 160 fragments, 15 late" in table and "orderers=2" in table
    stats = tmp_path / "stats.json"
    assert main(["replay", str(run), "--orderers", "2", "--slice-ticks", "1000", "--stats",
                 str(stats), *flags]) == 0
    assert capsys.readouterr().out == ""
    written = json.loads(stats.read_text())
    assert written["single"]["late"] == 15
    assert written["settings"][0]["setting"] == {"orderers": 2, "slice_ticks": 1000}
    assert written["settings"][0]["differences"]["moved"] == 15
    assert main(["replay", str(run), "--orderers", "2", "--slice-ticks", "1000", "--stats",
                 str(stats)]) == 2  # exists: refused without --overwrite


@pytest.mark.parametrize("dt", [None, 20])
def test_stats_keep_the_documented_layout(tmp_path: Path, dt: int | None) -> None:
    """``--stats`` is the layout docs/scale-out.md ("The simulation and its sweeps") documents,
    key for key and in order, written from the typed results; ``events`` only with ``--dt``."""
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in _backlog_run()))
    stats = tmp_path / "stats.json"
    flags = ["--build-window", "1", "--startup-delay", "0", "--source-timeout", "off"]
    assert main(["replay", str(run), "--orderers", "2", "--slice-ticks", "1000", "--stats",
                 str(stats), *flags, *([] if dt is None else ["--dt", str(dt)])]) == 0
    written = json.loads(stats.read_text())
    events = [] if dt is None else ["events"]
    assert list(written) == ["single", "settings"]
    single = written["single"]
    assert list(single) == ["counters", "fragments", "late", "barrier_resolutions", *events]
    assert list(single["barrier_resolutions"]) == ["complete", "incomplete"]
    (setting,) = written["settings"]
    assert setting["setting"] == {"orderers": 2, "slice_ticks": 1000}
    differences = setting["differences"]
    assert list(differences) == ["fragments", "moved", "late", "barriers", *events, "routing",
                                 "orderers"]
    assert list(differences["fragments"]) == ["single", "sliced", "only_single", "only_sliced",
                                              "dropped_by_merge"]
    assert list(differences["late"]) == ["single", "sliced", "differ", "raised_by_merge",
                                         "lowered_by_merge"]
    assert list(differences["barriers"]) == ["differ", "split", "copies_disagree"]
    routing = differences["routing"]
    assert list(routing) == ["watermarks", "releases", "routed", "fragments"]
    assert routing["releases"] == 0 and sum(routing["fragments"]) == 160
    assert len(differences["orderers"]) == 2 and "totals" in differences["orderers"][0]
    if dt is not None:  # the counts of test_a_backlog_is_late_for_one_orderer_and_waited_for_...
        assert single["events"] == 96
        assert differences["events"] == {
            "single": 96, "sliced": 80, "differ": 32, "straddling": 0,
            "differ_if_built_alone": 0, "pieces_without_sure_start": 0,
            "equal_to_glom_of_merged": True,
        }


@pytest.mark.parametrize(("flags", "message"), [
    (["--orderers", "0", "--slice-ticks", "10"], "--orderers: must be an integer from 1 to"),
    (["--orderers", "2", "--slice-ticks", "0"], "--slice-ticks: must be a whole number"),
    (["--orderers", "two", "--slice-ticks", "10"], "--orderers: must be a comma list"),
    (["--orderers", "2"], "--slice-ticks: is needed with --orderers"),
    (["--dt", "5"], "--dt: counts events only with --orderers"),
    (["--orderers", "2", "--slice-ticks", "9", "--output", "o.arrow"], "--output: --orderers"),
])
def test_command_refuses_bad_flags_in_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"t": 0, "source": 1, "ts": 1}) + "\n")
    assert main(["replay", str(run), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_command_names_a_missing_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(tmp_path / "none.jsonl"), "--orderers", "2",
                 "--slice-ticks", "9"]) == 2
    assert capsys.readouterr().err == f"evb replay: {tmp_path / 'none.jsonl'}: no such file\n"


def test_a_data_directory_replays_sliced(tmp_path: Path) -> None:
    """The arrival log as input: the same comparison as its JSON Lines export."""
    from orderer.replay.synthetic import SyntheticRun, generate_records

    records = generate_records(SyntheticRun(n_sources=3, fragments_per_source=300, seed=5))
    via_memory = replay_sliced(lambda: [records], OrdererConfig(), [Slicing(3, 10**6)])
    arrow = tmp_path / "run.arrow"
    import pyarrow as pa

    from orderer.formats.log_format import arrivals_to_arrow
    with pa.ipc.new_stream(str(arrow), arrivals_to_arrow(records).schema) as out:
        out.write_batch(arrivals_to_arrow(records))
    stats = tmp_path / "s.json"
    assert main(["replay", str(arrow), "--orderers", "3", "--slice-ticks", str(10**6),
                 "--stats", str(stats)]) == 0
    differences = json.loads(stats.read_text())["settings"][0]["differences"]
    assert differences["moved"] == via_memory.settings[0].differences.moved
    assert np.array_equal(differences["routing"]["fragments"],
                          via_memory.settings[0].routing.fragments)
