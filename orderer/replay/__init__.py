"""``evb replay``: the orderer run on a recorded or synthetic run, with time taken from the
records.

Modules: :mod:`~orderer.replay.simulate` (records in memory through an orderer on simulated
time), :mod:`~orderer.replay.stream` (any recorded input, streaming: JSON Lines, a data
directory's arrival log, Arrow or Parquet; the outputs), :mod:`~orderer.replay.sweep` (several
settings over one pass of a run, and their table), :mod:`~orderer.replay.run_walk` (the walk
over an arrival stream, which the service's recovery shares: live = replay) and
:mod:`~orderer.replay.synthetic` (synthetic DAQ runs, for ``evb demo``, ``evb send``, the tests
and the benchmarks), with :mod:`~orderer.replay.physics` (the physics a synthetic run can carry,
and the decoder of its payloads for the analysis stages), and :mod:`~orderer.replay.sliced`
with :mod:`~orderer.replay.slicing` and :mod:`~orderer.replay.sliced_merge` (``--orderers``: a
run ordered as N time-sliced orderers would, docs/scale-out.md), the rules of the merged stream
they share with the Spark job over N orderers (:mod:`~orderer.replay.merged_stream`,
:mod:`~orderer.replay.pieces`, :mod:`~orderer.replay.unit_plan`) and the replay of N orderers'
own arrival logs (:mod:`~orderer.replay.sliced_logs`, that job's oracle). Files are read and
written through :mod:`orderer.formats`. This package imports neither the network (service,
client, wire) nor an application; the service imports the walk and the piece cut.
"""
