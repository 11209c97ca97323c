"""``orderer/apps/run_stats.py``: a run over several orderers as ``evb stats`` and ``evb top``
draw it, pure (hand-built answers, 80 columns, no server)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from orderer.apps.console import write
from orderer.apps.run_stats import (
    OrdererView,
    check_roles,
    orderer_targets,
    run_json,
    run_table,
    split_targets,
)
from orderer.errors import InterfaceError
from orderer.stats import SliceRole
from tests.operator.conftest import stats_answer

PEERS = tuple(f"run-orderer-{k}.run-orderer-headless.daq.svc:50051" for k in range(3))


def _views(unreachable: int | None = None) -> list[OrdererView]:
    views = []
    for k, target in enumerate(PEERS):
        stats = replace(stats_answer(), slicing=SliceRole(3, k, 1000, PEERS), queued=k)
        error = "UNAVAILABLE: connection refused" if k == unreachable else None
        views.append(OrdererView(k, target, stats, error, (1000.0 * (k + 1), 900.0)))
    return views


def test_the_targets_are_split_and_refused_in_one_line() -> None:
    assert split_targets("a:1") == ["a:1"]
    assert split_targets("a:1, b:1") == ["a:1", "b:1"]
    with pytest.raises(InterfaceError, match="names an orderer twice"):
        split_targets("a:1,a:1")
    with pytest.raises(InterfaceError, match="names no orderer address"):
        split_targets("a:1,")


def test_one_answer_names_the_run_only_with_every_peer() -> None:
    assert orderer_targets(_views()[1].stats) == list(PEERS)  # type: ignore[arg-type]
    assert orderer_targets(stats_answer()) is None  # one orderer: shown as before
    alone = replace(stats_answer(), slicing=SliceRole(3, 1, 1000))
    assert orderer_targets(alone) is None  # no --peers: shown alone


def test_orderers_out_of_order_are_refused_naming_the_first() -> None:
    views = _views()
    check_roles(views)
    swapped = [replace(views[1], index=0), replace(views[0], index=1), views[2]]
    with pytest.raises(InterfaceError, match=f"{PEERS[1]} is orderer 1 of 3, not orderer 0"):
        check_roles(swapped)


def test_the_run_line_sums_the_orderers_and_fits_80_columns() -> None:
    out = io.StringIO()
    write(out, lambda width, plain: run_table(_views(2), plain=plain, width=width, rates=True))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 and line.isascii() for line in lines), out.getvalue()
    assert lines[0] == "a run over 3 orderers, slices of 1000 ticks"
    run = next(line.split() for line in lines if line.startswith("    run  running"))
    assert run == ["run", "running", "1", "300", "270", "9", "0", "3", "270"]
    assert "UNREACHABLE" in next(line for line in lines if line.startswith("      2"))
    rates = [line.split() for line in lines if line.startswith("    run") and "," in line]
    assert rates == [["run", "6,000", "2,700"]]
    assert f"orderer 2: {PEERS[2]} (UNAVAILABLE: connection refused)" in " ".join(lines)


def test_the_json_has_the_run_and_each_orderer() -> None:
    answer = run_json(_views())
    assert answer["run"]["totals"]["received"] == 300 and answer["run"]["queued"] == 3
    assert answer["run"]["next_offset"] == 270 and answer["run"]["run_ended"] is False
    assert [o["target"] for o in answer["orderers"]] == list(PEERS)
    assert answer["orderers"][2]["slicing"]["index"] == 2
