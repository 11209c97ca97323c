"""The user's analysis stages (:mod:`orderer.stages`, ``evb spark-job --stages``) run by the
Spark job: their Spark side (the planner, the steps and ``--explain`` run without Spark, in
:mod:`orderer.stages`).

The modules:

- :mod:`~orderer.spark.stages.sink`: the sink of a run with stages
  (:class:`~orderer.spark.stages.sink.StagesSink`, ``foreachBatch``): each micro-batch's events
  written and the stages run over them, once across restarts (the states and the manifests in
  the query's checkpoint), and where a stage's results live;
- :mod:`~orderer.spark.stages.runner`: the stages of a plan run over one step's events as Spark
  jobs (:func:`~orderer.spark.stages.runner.run_plan`: ``mapInArrow``, the shuffle of an
  order-sensitive stage, an aggregation's accumulators), the stages' modules sent by value, a
  failed stage's line found in Spark's message;
- :mod:`~orderer.spark.stages.stage_histograms`: the histograms the stages declare, filled from
  their results once the run is built (the summary and the report) and from each micro-batch's
  results (the live page);
- :mod:`~orderer.spark.stages.order_check`: ``--check-order``: a stage declared
  order-insensitive that is not, found before it spoils a run.

Why the stages' histograms are here and not with the report (:mod:`orderer.spark.output`): they
are filled from the stages' results where the sink wrote them, and the summary only keeps them.
The package is above the output (the sink writes the events with its writers, the histograms go
into its summary) and below the live page, which counts each micro-batch's stage results with
:func:`~orderer.spark.stages.stage_histograms.fill_many` and is told of each batch through
:class:`~orderer.spark.stages.sink.BatchObserver` without being imported.
"""
