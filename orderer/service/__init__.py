"""The orderer as a network service: gRPC server, durable storage, metrics.

Modules: :mod:`~orderer.service.server` (the ``OrdererService`` domain class, the grpc.aio
servicer and ``serve()``), :mod:`~orderer.service.storage` (arrival log and ordered log),
:mod:`~orderer.service.security` (what the server enforces) and
:mod:`~orderer.service.metrics` (Prometheus). What the client shares with the server (message
conversions, channel security) is :mod:`orderer.wire`, which never imports this package.
"""
