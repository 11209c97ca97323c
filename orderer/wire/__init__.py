"""What both ends of the gRPC wire share: message conversions with every check of client input
(:mod:`~orderer.wire.convert`), the channel security rules (:mod:`~orderer.wire.security`),
the options every client takes (:mod:`~orderer.wire.options`) and the reason a refused ``Submit``
stream carries in its initial metadata (:mod:`~orderer.wire.refusal`).

The service, the client library, the Spark job and the command line import this package; it
imports none of them. Nothing is imported here, so that a client can take the security rules
without the conversions (and the Cython core they use).
"""
