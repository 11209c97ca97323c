"""The orderer as a network service: gRPC server, durable storage, metrics.

Modules, from the edge inwards: :mod:`~orderer.service.server` (start and serve: health
checking, reflection, ``serve()``), :mod:`~orderer.service.servicer` (the grpc.aio servicer:
messages in and out, errors to status codes), :mod:`~orderer.service.orderer_service` (the
``OrdererService`` domain class: input, deadlines, the run's lifetime),
:mod:`~orderer.service.opening` (what opening it on its data directory takes: the run
recovered, the slice index rebuilt, the restart's live changes), :mod:`~orderer.service.deadlines`
(its one timer, on the orderer's next deadline),
:mod:`~orderer.service.inspection` (what it shows of itself: ``GetStats``, the metrics snapshot),
:mod:`~orderer.service.submit_stream` (one ``Submit`` call's acks and flow signals),
:mod:`~orderer.service.intake` (input taken in one pass), :mod:`~orderer.service.group_commit`
(write rounds: the logs made durable), :mod:`~orderer.service.subscriptions` (readers of the
ordered output, retention), :mod:`~orderer.service.data_dir` (the run's directory, locked),
:mod:`~orderer.service.recovery` (the orderer rebuilt from the arrival log),
:mod:`~orderer.service.logs` (arrival log and ordered log), :mod:`~orderer.service.segments`
(the segment files they are written as), :mod:`~orderer.service.consumers` (consumer offsets),
:mod:`~orderer.service.durable` (files forced to disk), :mod:`~orderer.service.settings`
(``ServiceConfig``), :mod:`~orderer.service.binding` (address and port checks),
:mod:`~orderer.service.security` (what the server enforces) and
:mod:`~orderer.service.metrics` (Prometheus). What the client shares with the server (message
conversions, channel security) is :mod:`orderer.wire`, which never imports this package.
"""
