"""The Cython core: one extension module, :mod:`orderer._core.core`, called by :mod:`orderer.api`
(the orderer) and by the modules whose sequential step lives here (below); it imports nothing of
evb's but :mod:`orderer.errors` (``tests/test_layers.py`` checks it).

``core.pyx`` includes its parts, one job each; ``core.pxd`` declares the state and every step's
signature, ``core.pyi`` types the Python side for callers and mypy:

- the orderer (docs/ordering.md): ``calls.pyx`` (``OrdererCore``, its coarse calls),
  ``sources.pyx`` and ``queue.pyx`` (what arrives, each source's queue), ``deadlines.pyx``,
  ``flush.pyx``, ``merge.pyx`` with ``merge.h`` (the loser tree), ``barriers.pyx``, ``flow.pyx``,
  ``emitted.pyx`` (the output buffer), ``rules.pyx`` (a batch's rules);
- the service's hot calls: ``batch_fields.pyx`` and ``submit_wire.pyx`` (a Submit message's bytes
  into checked columns), ``arrival_rows.pyx`` (arrival-log rows), ``payload_gather.pyx`` (payloads
  by row for the ordered stream's readers);
- the sequential steps of other packages: ``glom_starts.pyx`` (where glom's events start) and
  ``nscldaq.pyx`` (the walk over NSCLDAQ records).
"""
