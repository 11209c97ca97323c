"""The work behind the ``evb`` commands that are not the server or the Spark job:
:mod:`~orderer.apps.send` (``evb send``), :mod:`~orderer.apps.tail` (``evb tail``),
:mod:`~orderer.apps.stats` (``evb stats``), :mod:`~orderer.apps.top` (``evb top``),
:mod:`~orderer.apps.console` (the statistics drawn for both), :mod:`~orderer.apps.forward`
(``evb forward``), :mod:`~orderer.apps.demo` (``evb demo --replay-only``),
:mod:`~orderer.apps.replay` (``evb replay``: the simulation its flags choose, their checks, its
results written and printed; the simulations themselves are :mod:`orderer.replay`'s) and
:mod:`~orderer.apps.sliced_table` (the table of ``evb replay --orderers``; the replay computes
its results, typed).

:mod:`orderer.cli` only parses arguments and maps errors to exit statuses; these modules do the
work, and the tests call them without a shell. They reach a live server only through the client
library (:mod:`orderer.client`), never the service, which never imports them.
"""
