"""``evb_operator/phases.py``: one enumeration of the phases, and the CRD's schema built from it."""

from __future__ import annotations

import json

from evb_operator import crd
from evb_operator.phases import FINAL_PHASES, RunPhase


def test_the_crd_lists_every_phase_and_only_those() -> None:
    phase = crd.STATUS_SCHEMA["properties"]["phase"]
    assert phase["enum"] == [p.value for p in RunPhase]
    assert all(p.value in phase["description"] for p in RunPhase)
    state = crd.SPEC_SCHEMA["properties"]["state"]
    assert state["enum"] == ["Running", "Ended"] and state["default"] == "Running"


def test_a_phase_goes_into_a_patch_as_its_name() -> None:
    assert json.dumps({"phase": RunPhase.PENDING}) == '{"phase": "Pending"}'
    assert RunPhase("Ended") is RunPhase.ENDED and "Ended" in FINAL_PHASES
