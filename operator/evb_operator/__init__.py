"""The evb Kubernetes operator: reconciles ``EventBuilder`` resources (``evb.io/v1alpha1``) into an
orderer (StatefulSet, Service, ConfigMap), a Spark job (SparkApplication) and a live status.

Run it with ``kopf run -m evb_operator.handlers``. Layout (STYLE "For evb" 8, 9):

- :mod:`evb_operator.crd`: the CustomResourceDefinition as Python data, the source of truth of the
  chart's ``crds/`` file, with the Python twins of its CEL rules;
- :mod:`evb_operator.validation`: a spec checked and completed with its defaults, or
  :class:`~evb_operator.validation.InvalidSpec`;
- :mod:`evb_operator.specs`: pure ``build_<kind>_spec`` functions, no API calls;
- :mod:`evb_operator.status`: the status and the Events a ``GetStats`` answer implies, pure;
- :mod:`evb_operator.kube`: the few Kubernetes API calls the operator makes;
- :mod:`evb_operator.handlers`: the kopf glue.

The directory ``operator/`` above this package is not a package: ``operator`` is a standard
library module.
"""

__version__ = "0.1.0"
