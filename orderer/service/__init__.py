"""The orderer as a network service: gRPC server, durable storage, metrics.

Modules: :mod:`~orderer.service.convert` (pb2 <-> API types, with every check of client input),
:mod:`~orderer.service.server` (the ``OrdererService`` domain class, the grpc.aio servicer and
``serve()``), :mod:`~orderer.service.storage` (arrival log and ordered log) and
:mod:`~orderer.service.metrics` (Prometheus). Nothing is imported here, so that the client
library can use :mod:`~orderer.service.convert` without pulling in the server and its storage.
"""
