"""Event building: NSCLDAQ's glom over an ordered stream, written once for everyone who builds.

:mod:`~orderer.building.config` says how events are built (:class:`GlomConfig
<orderer.building.config.GlomConfig>`: the window ``dt``, ``--maxfragments``, the timestamp
policy; no numpy), :mod:`~orderer.building.glom` is the rule (where events start, and the events
built as Arrow rows).

Why a package of its own, below the replay and NSCLDAQ's formats: the rule holds no Spark, and
the Spark job (its data source plans partitions with it and its executors build with it), the
NSCLDAQ output of built events and the sliced replay (which counts the events N orderers' merged
output makes against one orderer's, docs/scale-out.md) all need it. A second copy anywhere would
be a second definition of an event, so each imports this one; the replay used to be handed it at
run time by the command line, since the rule sat in the Spark job's layer above it. It imports
only the compiled core, the batches it takes rows from, the errors, numpy and pyarrow.
"""
