"""Every stage of the Spark tests in one ``--stages`` file (:mod:`tests.spark.stages_module`'s,
one of each class, and :mod:`tests.spark.aggregation_stages`' aggregations), for the test of a
killed job, which resumes all of them and the live page's totals from one checkpoint."""

from __future__ import annotations

from orderer.stages import Stage
from tests.spark import aggregation_stages, stages_module

STAGES: list[Stage] = [
    stages_module.fragments,
    stages_module.gaps,
    stages_module.running,
    stages_module.sizes,
    *aggregation_stages.STAGES,
]
