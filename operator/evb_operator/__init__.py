"""The evb Kubernetes operator: reconciles ``EventBuilder`` resources (``evb.io/v1alpha1``) into an
orderer (StatefulSet, Service, ConfigMap), a Spark job (SparkApplication) and a live status.

Run it with ``kopf run -m evb_operator.handlers``. Layout, one concern a module:

- :mod:`evb_operator.constants`: names, ports, labels and environment variables, spelled once;
- :mod:`evb_operator.phases`: the phases of a run (``status.phase``), one enumeration;
- :mod:`evb_operator.crd`: the CustomResourceDefinition as Python data, the source of truth of the
  chart's ``crds/`` file, with the Python twins of its CEL rules;
- :mod:`evb_operator.validation`: a spec checked and completed with its defaults, or
  :class:`~evb_operator.validation.InvalidSpec`;
- :mod:`evb_operator.specs`: every child, from the pure ``build_<kind>_spec`` functions (labels
  merged, no API calls) of :mod:`~evb_operator.specs_orderer`, :mod:`~evb_operator.specs_network`,
  :mod:`~evb_operator.specs_forward` and :mod:`~evb_operator.specs_spark`, which share
  :mod:`~evb_operator.specs_common`;
- :mod:`evb_operator.status`: the status and the Events a ``GetStats`` answer implies, pure;
- :mod:`evb_operator.security`: how the operator reaches an orderer under TLS or a token, from
  the Secrets the spec names, pure;
- :mod:`evb_operator.kube`: the few Kubernetes API calls the operator makes;
- :mod:`evb_operator.handlers`: the kopf glue (validate -> build -> adopt -> create if absent
  -> patch the status), errors translated to ``kopf`` errors there, once.

The directory ``operator/`` above this package is not a package: ``operator`` is a standard
library module.
"""

__version__ = "0.1.0"
