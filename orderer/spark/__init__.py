"""Spark: the ``evb`` PySpark data source and the evb Spark job (``evb spark-job``, the
SparkApplication the operator creates, and ``evb demo``): the ordered stream read as rows, events
built where they are read, written per run with the run's summary and report, the user's
analysis stages run over them once per micro-batch, and the live page while a run is taken.

Its sub-packages, from the top down (each imports only those below it: the ``spark-layers``
contract of ``.importlinter``):

- :mod:`~orderer.spark.driver`: the job's driver: ``evb spark-job``
  (:mod:`~orderer.spark.driver.job`, also the SparkApplication's main file
  ``orderer/spark/driver/job.py``), what it refuses before Spark starts, a run streamed
  (``--target``), read at once (``--path``), resumed, or followed from run to run
  (``--follow-runs``), and ``evb demo``;
- :mod:`~orderer.spark.source`: the ``evb`` data source (``format("evb")``): its options, the
  driver's plans of its reads, its readers of one orderer and of a run over several;
- :mod:`~orderer.spark.live`: the live page (``--ui``): each micro-batch's counts, the run's
  running totals, the documents the page serves and its HTTP server;
- :mod:`~orderer.spark.stages`: the user's analysis stages run by the job: the sink that writes
  each micro-batch's events and runs the stages over them exactly once, the stages run as Spark
  jobs (``run_plan``), the histograms they declare, ``--check-order``;
- :mod:`~orderer.spark.output`: what a run writes and where: the layout, the files (local or a
  Hadoop URI), the events' writers (Parquet, JSON, NSCLDAQ ring items), the run summary, the Δt
  spectrum and the coincidence matrix, the report.

Why this order: the driver runs all the others, and nothing imports it. The data source sits
above the live page because, with its option ``liveCounts``, a partition's ``read()`` counts its
events for the page (:mod:`orderer.spark.live.partials`), so the counts reach the driver inside
the micro-batch. The live page sits above the stages and the output because it counts with their
functions (the stages' histograms, the report's spectrum and coincidences: one counting, so the
live totals equal the end of run's). The stages sit above the output: the sink writes the events
with the output's writers, and the stages' histograms go into the run summary. The output imports
nothing else of this package.

Nothing outside this package imports pyspark (the ``pyspark-in-spark`` contract). Inside it,
only the data source's classes Spark loads import it at module level
(:mod:`~orderer.spark.source.datasource`, :mod:`~orderer.spark.source.planning`,
:mod:`~orderer.spark.source.readers`, :mod:`~orderer.spark.source.sliced_source`); the rest
imports it inside functions, so that the job refuses a mistake in its flags before pyspark is
loaded. The packages' ``__init__`` modules import nothing.
"""
