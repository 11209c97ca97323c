"""The ``evb`` PySpark data source (``spark.read.format("evb")``, ``spark.readStream``): the
orderer's ordered output as rows, fragments or the events built of them, split only where events
start; from a live orderer over gRPC or a finished run's data directory, one orderer or a run
spread over several (a comma list).

The modules:

- :mod:`~orderer.spark.source.datasource`: the data source itself
  (:class:`~orderer.spark.source.datasource.EvbDataSource`, ``format("evb")``) and
  :func:`~orderer.spark.source.datasource.register`; its docstring lists the options and says
  why the source knows the glom window. Spark pickles the class to the executors by its module's
  path, so that path is the data source's address;
- :mod:`~orderer.spark.source.options`: its options parsed once on the driver
  (:class:`~orderer.spark.source.options.Options`), and what a partition's rows are once read;
- :mod:`~orderer.spark.source.planning`: the driver's plans of one orderer's reads: where a read
  ends (at an event start) and how it splits into partitions;
- :mod:`~orderer.spark.source.readers`: the stream and batch readers of one orderer, and what each
  partition reads on its executor (an orderer's stream, or the log's segments);
- :mod:`~orderer.spark.source.sliced_source`: the readers of a run over N orderers, in slice order;
- :mod:`~orderer.spark.source.sliced_reads`: where those read (live orderers or their data
  directories) and the checks that the orderers given are one run's, in their order;
- :mod:`~orderer.spark.source.access`: what both reach an orderer with (channel security, a
  call that waits for a restarting orderer, a data directory's ordered log, a run's end in the
  run table);
- :mod:`~orderer.spark.source.glom`: the rows in Spark's DDL, and the event building as the
  source's options (the job writes its options with it).

Why one package: everything the data source is, its readers of one orderer and of several
included, and nothing of the job; the job's driver (:mod:`orderer.spark.driver`, above) gives it
options. It is above the live page (:mod:`orderer.spark.live`) for one reason: with the option
``liveCounts``, a partition's ``read()`` counts its events for the page
(:mod:`orderer.spark.live.partials`, through :mod:`~orderer.spark.source.options`).
:mod:`~orderer.spark.source.access`, :mod:`~orderer.spark.source.sliced_reads` and
:mod:`~orderer.spark.source.glom` import no pyspark: the job takes them before Spark starts.
"""
