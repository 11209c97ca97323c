"""The children of an EventBuilder, built from its valid spec
(:class:`~evb_operator.validation.ValidSpec`) by pure functions: labels merged, no API call, no
clock, no environment.

The modules:

- :mod:`~evb_operator.specs.children`: every child in creation order (:func:`build_children`,
  this package's own name too), and what each is for;
- :mod:`~evb_operator.specs.common`: what the children share: their kinds and names, labels,
  metadata, the restricted security contexts, how a client pod reaches the orderers;
- :mod:`~evb_operator.specs.orderer`: the orderer's ConfigMap (``evb serve --config``), its
  StatefulSet and its Services (the run's, and the headless one of a run over several);
- :mod:`~evb_operator.specs.network`: the orderer's NetworkPolicy;
- :mod:`~evb_operator.specs.forward`: the forwarders of ``spec.upstreams`` (``evb forward``);
- :mod:`~evb_operator.specs.release`: the release of dead sources of a run over several
  orderers (``evb release``);
- :mod:`~evb_operator.specs.spark`: the Spark job's configuration and its SparkApplication;
- :mod:`~evb_operator.specs.live`: the Spark job's live page: its address and its Service.

:mod:`evb_operator.handlers` creates and patches what these build; the tests validate every
object against the Kubernetes and SparkApplication schemas without an API server.
"""

from evb_operator.specs.children import build_children

__all__ = ["build_children"]
