"""The four examples at once: implant-decay, dead time, scalers and calibration in one job.

``evb spark-job --stages`` takes one file; this one loads its siblings as ``--stages`` loads
them (:func:`orderer.stages.load.load_stages`) and lists all their stages in ``STAGES``. Their
stage names differ, so they plan together: each example's order-sensitive stages keep the
order they declare, the calibration runs at full parallelism. It is what ``evb demo`` runs.

Run it::

    evb spark-job --stages examples/physics.py --dt 2000 ...

and read each example's results as its own docstring says (``OUTPUT/stages/STAGE/run=RUN/``).
The sibling modules are then loaded under their own names (``sys.modules["implant_decay"]``
and so on), with their fits (``half_life``, ``live_time``, ``totals``, ``histogram``).
"""

from __future__ import annotations

from pathlib import Path

from orderer.stages import Stage
from orderer.stages.load import load_stages

EXAMPLES = ("implant_decay", "dead_time", "scalers", "calibration")
"""The sibling files whose stages run, in this order."""

STAGES: list[Stage] = [
    stage for name in EXAMPLES for stage in load_stages(Path(__file__).with_name(f"{name}.py"))
]
