"""``make soak`` (``EVB_SOAK=1``): the property and fuzz tests run twenty times as many inputs,
not derandomized; ``make test`` runs the same inputs every time. One place for that rule."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["SOAK", "fuzz_settings"]

SOAK = bool(os.environ.get("EVB_SOAK"))


def fuzz_settings(examples: int, *also: HealthCheck) -> settings:
    """Hypothesis settings for ``examples`` inputs (twenty times as many under soak), with no
    deadline and the slow-input health check off (and the health checks ``also`` named)."""
    return settings(
        max_examples=examples * 20 if SOAK else examples,
        derandomize=not SOAK,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, *also],
    )
