"""What a run of the Spark job writes, and where: its events, its summary and its report, under
``--output`` (local, or a Hadoop URI: ``s3a://``, ``hdfs://``).

The modules:

- :mod:`~orderer.spark.output.layout`: where a run's results live under the output
  (:class:`~orderer.spark.output.layout.Layout`) and the run's name;
- :mod:`~orderer.spark.output.files`: the output's files, local or at a Hadoop URI, through
  Hadoop's file system as Spark writes them (:class:`~orderer.spark.output.files.Directory`);
- :mod:`~orderer.spark.output.writer`: the events written as Parquet or JSON rows, batch or
  streaming alike;
- :mod:`~orderer.spark.output.nscldaq`: the events written as NSCLDAQ's glom writes them
  (``--format nscldaq``: ring items, a sink of its own);
- :mod:`~orderer.spark.output.summary`: the run summary (counts, multiplicity, rates, lateness,
  barriers), aggregated on the executors from the events as written;
- :mod:`~orderer.spark.output.coincidence`: the Δt spectrum and the coincidence matrix
  (boost-histogram), counted on the executors; the live page counts with the same functions;
- :mod:`~orderer.spark.output.report`: the run report: the plots (PNG), the histograms as data
  (pickled) and the HTML page.

The bottom of :mod:`orderer.spark`: it imports nothing else of it. What the user's stages write
(their results, the histograms they declare) is :mod:`orderer.spark.stages`'s, above: the
summary keeps those histograms and the report draws them, without importing the stages.
"""
