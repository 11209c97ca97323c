"""``evb_operator/handlers/control.py`` and the handlers over three orderers, against stand-in
orderers (the real ones: ``tests/e2e/test_operator_scale_out.py``): an orderer that fails stops
nothing at the others, the handler raises ``kopf.TemporaryError`` naming it, and its retry ends or
begins the run only where it has not happened (the calls each orderer got are counted)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
import pytest

from evb_operator import handlers
from evb_operator.handlers import children, control
from orderer.client import each
from orderer.errors import ServiceUnavailable
from orderer.stats import RunSpan, Stats
from tests.operator.conftest import stats_answer

pytestmark = pytest.mark.asyncio

ENDPOINTS = ("a:1", "b:1", "c:1")


@dataclass
class _Orderers:
    """Three stand-in orderers: their run state, the calls each got, which are down."""

    stats: dict[str, Stats] = field(
        default_factory=lambda: {e: stats_answer(next_offset=10) for e in ENDPOINTS}
    )
    calls: list[tuple[str, str]] = field(default_factory=list)
    down: set[str] = field(default_factory=set)

    def _reach(self, endpoint: str, call: str) -> None:
        if endpoint in self.down:
            raise ServiceUnavailable(f"{endpoint}: connection refused")
        self.calls.append((call, endpoint))

    async def get_stats(self, endpoint: str, **_: Any) -> Stats:
        self._reach(endpoint, "GetStats")
        return self.stats[endpoint]

    async def end_run(self, endpoint: str, **_: Any) -> int:
        self._reach(endpoint, "EndRun")
        self.stats[endpoint] = replace(self.stats[endpoint], run_ended=True)
        return self.stats[endpoint].next_offset

    async def begin_run(self, endpoint: str, run: int, **_: Any) -> RunSpan:
        self._reach(endpoint, "BeginRun")
        assert self.stats[endpoint].run_ended and run > self.stats[endpoint].run
        self.stats[endpoint] = replace(
            self.stats[endpoint], run=run, run_ended=False, run_start_offset=10
        )
        return RunSpan(run, 10)

    def of(self, call: str) -> list[str]:
        return [endpoint for name, endpoint in self.calls if name == call]


@pytest.fixture
def orderers(monkeypatch: pytest.MonkeyPatch) -> _Orderers:
    fake = _Orderers()
    monkeypatch.setattr(control.orderer_client, "get_stats_async", fake.get_stats)
    # the calls at every orderer the operator shares with evb end-run / begin-run
    monkeypatch.setattr(each, "get_stats_async", fake.get_stats)
    monkeypatch.setattr(each, "end_run_async", fake.end_run)
    monkeypatch.setattr(each, "begin_run_async", fake.begin_run)
    monkeypatch.setenv("EVB_ALLOW_ENDPOINT_OVERRIDE", "1")

    async def scaled(child: Any, path: str, **_: Any) -> None:  # the release's Deployment
        fake.calls.append(("patch", f"{child.kind} {path}"))

    monkeypatch.setattr(children, "reapply", scaled)
    return fake


def _kwargs(**more: Any) -> dict[str, Any]:
    return {
        "spec": {"orderers": 3, "sliceTicks": 1000},
        "name": "wide",
        "namespace": "daq",
        "annotations": {"evb.io/endpoint-override": ",".join(ENDPOINTS)},
        "body": {"metadata": {"generation": 2}},
        "status": {"observedGeneration": 1},
        "patch": kopf.Patch(),
        "logger": logging.getLogger("test"),
        **more,
    }


async def test_end_run_reaches_every_orderer_and_a_retry_ends_only_the_rest(
    orderers: _Orderers,
) -> None:
    orderers.down.add("b:1")
    first = _kwargs(new="Ended")
    with pytest.raises(kopf.TemporaryError, match=r"at 2 of 3 orderers; not at orderer 1 \(b:1\)"):
        await handlers.end_run(**first)
    assert orderers.of("EndRun") == ["a:1", "c:1"]
    orderers.down.clear()
    orderers.calls.clear()
    retry = _kwargs(new="Ended")
    await handlers.end_run(**retry)
    assert orderers.of("EndRun") == ["b:1"]  # a and c ended already: not twice
    assert retry["patch"]["status"]["runEnded"] is True
    assert retry["patch"]["status"]["nextOffset"] == 30  # the three ordered logs together
    assert orderers.of("patch") == ["Deployment /spec/replicas"]  # the release, once all ended


async def test_begin_run_begins_once_at_each_and_a_retry_only_where_it_failed(
    orderers: _Orderers,
) -> None:
    orderers.down.add("c:1")
    with pytest.raises(kopf.TemporaryError, match=r"run 2 begun at 2 of 3 orderers"):
        await handlers.begin_run(old=1, new=2, reason="update", **_kwargs())
    assert orderers.of("BeginRun") == ["a:1", "b:1"]
    assert orderers.of("EndRun") == ["a:1", "b:1"]  # each ended its run first
    orderers.down.clear()
    orderers.calls.clear()
    retry = _kwargs()
    await handlers.begin_run(old=1, new=2, reason="update", **retry)
    assert orderers.of("BeginRun") == ["c:1"] and orderers.of("EndRun") == ["c:1"]
    assert {s.run for s in orderers.stats.values()} == {2}
    assert retry["patch"]["status"]["run"] == 2
    assert retry["patch"]["status"]["runStartOffset"] == 30


async def test_the_override_must_name_every_orderer(orderers: _Orderers) -> None:
    one = _kwargs(annotations={"evb.io/endpoint-override": "a:1"}, new="Ended")
    with pytest.raises(kopf.PermanentError, match=r"names 1 address\(es\) for 3 orderers"):
        await handlers.end_run(**one)
    assert orderers.calls == []


async def test_stats_each_answers_for_every_orderer_in_order(orderers: _Orderers) -> None:
    orderers.down.add("a:1")
    answers = await control.stats_each(ENDPOINTS, security=None, timeout=1.0)
    assert [(a.index, a.endpoint, a.stats is None) for a in answers] == [
        (0, "a:1", True),
        (1, "b:1", False),
        (2, "c:1", False),
    ]
    assert "connection refused" in (answers[0].error or "")
