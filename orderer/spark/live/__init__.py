"""The live page of a run (``evb spark-job --ui [HOST:]PORT``): the run's spectra while it is
taken, not only once it ended.

How the counts travel: after each micro-batch the stages sink (:mod:`orderer.spark.stages`)
calls :class:`~orderer.spark.live.observer.LiveRun`, which counts the micro-batch on the
executors (:mod:`~orderer.spark.live.counts`: one aggregation, only counts reach the driver),
adds the counts to the run's totals (:mod:`~orderer.spark.live.totals`), keeps the totals in the
query's checkpoint (exactly once: a micro-batch run again replaces its own sum) and publishes them
to the :class:`~orderer.spark.live.board.Board`, which renders every document the page serves;
:mod:`~orderer.spark.live.page` serves them over HTTP with the page in ``static/`` (plotly.js,
shipped inside the package: the page needs no internet).

Why plotly.js (its cartesian bundle, MIT): one library draws both kinds of histogram a run has,
1D as steps and 2D as a colour map with its scale, with a linear/log axis, zoom and the count
under the pointer, which is what people used to ROOT's canvases reach for; uPlot is far smaller
but has no colour map (a hand-made one would be ours to keep), and Chart.js neither. Its 1.5 MB
are loaded once per browser and cached.

The totals equal, bin for bin, what the end of the run counts from the events as written (one
counting: :mod:`orderer.spark.coincidence`, :mod:`orderer.spark.stage_histograms`).
"""
