"""The Spark job's driver: ``evb spark-job`` (the SparkApplication the operator creates runs
it too) and ``evb demo``.

The modules:

- :mod:`~orderer.spark.driver.job`: the job (:func:`~orderer.spark.driver.job.main`): one run
  or run after run, then each run's summary and report; also the SparkApplication's main file
  (``local:///opt/evb/orderer/spark/driver/job.py``, the operator's ``SPARK_JOB_FILE``). Its
  docstring has the output's tree;
- :mod:`~orderer.spark.driver.checks`: what the job refuses before it starts Spark (its flags, a
  missing or old Java);
- :mod:`~orderer.spark.driver.streaming`: a run read from a live orderer as a stream
  (``--target``), exactly once;
- :mod:`~orderer.spark.driver.batch`: a finished run read at once (``--path``);
- :mod:`~orderer.spark.driver.resume`: a run resumed from its checkpoint builds its events as it
  began;
- :mod:`~orderer.spark.driver.runs`: following an orderer from run to run (``--follow-runs``);
- :mod:`~orderer.spark.driver.demo`: ``evb demo``: a local orderer, synthetic sources and the job
  in local mode;
- :mod:`~orderer.spark.driver.demo_physics`: what ``evb demo`` found in its run's physics.

The top of :mod:`orderer.spark`: it takes the data source, the live page, the stages and the
output, and nothing of them imports it. The command line (:mod:`orderer.cli`) imports
:mod:`~orderer.spark.driver.job` and :mod:`~orderer.spark.driver.demo` when their command runs.
"""
