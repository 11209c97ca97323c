"""Analysis stages on built events that declare their order sensitivity (Hazelcast Jet's design
015, "Avoiding event reordering effects", applied to evb's Spark job).

A parallel engine reorders events between stages; a stateful step run on reordered events gives
wrong answers (an implant matched to the wrong decay, a dead time summed out of order). Every
stage therefore says what it needs (:mod:`~orderer.stages.api`): order-insensitive (maps,
filters), order-sensitive (stateful, in stream order, globally or per key), a sequencer (it gives
its output an order of its own), or an aggregation (a histogram, a sum: it declares how partial
results combine, as Jet's aggregate operations do, and its results are one finished table of
the run so far, whatever the split). The planner (:mod:`~orderer.stages.plan`) walks the
stages in reverse topological order and preserves order only from each order-sensitive stage
back to the nearest sequencer; every other stage runs at the job's full parallelism. No stage
may read an aggregation (the planner refuses it). :mod:`~orderer.stages.steps` runs one step of
a stage over Arrow data (what a Spark task does, without Spark; an aggregation's accumulate,
combine and finish), :mod:`~orderer.stages.load` reads a user's module of stages, and
:mod:`~orderer.stages.histograms` holds the histograms a stage declares of its results (1D and
2D).

Nothing here imports pyspark: the planner and ``--explain`` run without Spark, and the Spark
side is :mod:`orderer.spark.stages`.
"""

from orderer.stages.api import (
    EVENTS,
    Histogram,
    Histogram2D,
    Order,
    Stage,
    aggregation,
    order_insensitive,
    order_sensitive,
    sequencer,
)

__all__ = [
    "EVENTS",
    "Histogram",
    "Histogram2D",
    "Order",
    "Stage",
    "aggregation",
    "order_insensitive",
    "order_sensitive",
    "sequencer",
]
