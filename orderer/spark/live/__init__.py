"""The live page of a run (``evb spark-job --ui [HOST:]PORT``): the run's spectra while it is
taken, not only once it ended.

How the counts travel: the data source counts each partition's events where it builds them
(its option ``liveCounts``: :mod:`~orderer.spark.live.partials`, one more column, filled in each
partition's last row); after each micro-batch the stages sink
(:mod:`orderer.spark.stages.sink`) calls :class:`~orderer.spark.live.observer.LiveRun`, which
takes those counts out of the events as they are written, sums them on the driver
(:mod:`~orderer.spark.live.counts`: only counts reach the driver), adds them to the run's totals
(:mod:`~orderer.spark.live.totals`), keeps the totals in the query's checkpoint (exactly once: a
micro-batch run again replaces its own sum) and publishes them to the
:class:`~orderer.spark.live.board.Board`, which renders every document the page serves;
:mod:`~orderer.spark.live.page` serves them over HTTP with the page in ``static/`` (plotly.js,
shipped inside the package: the page needs no internet).

Why plotly.js (its cartesian bundle, MIT): one library draws both kinds of histogram a run has,
1D as steps and 2D as a colour map with its scale, with a linear/log axis, zoom and the count
under the pointer, which is what people used to ROOT's canvases reach for; uPlot is far smaller
but has no colour map (a hand-made one would be ours to keep), and Chart.js neither. Its 1.5 MB
are loaded once per browser and cached.

The totals equal, bin for bin, what the end of the run counts from the events as written (one
counting: :mod:`orderer.spark.output.coincidence`, :mod:`orderer.spark.stages.stage_histograms`).
Hence its place in :mod:`orderer.spark`'s layers: above the stages and the output, whose
counting it takes; below the data source, whose ``read()`` runs
:func:`~orderer.spark.live.partials.with_counts`, and the job's driver.
"""
