"""The evb Kubernetes operator: reconciles ``EventBuilder`` resources (``evb.io/v1alpha1``) into an
orderer (StatefulSet, Service, ConfigMap), a Spark job (SparkApplication) and a live status.

Run it with ``kopf run -m evb_operator.handlers``. Layout, one concern a package or module:

- :mod:`evb_operator.crd`: the CustomResourceDefinition as Python data, the source of truth of the
  chart's ``crds/`` file, with the Python twins of its CEL rules;
- :mod:`evb_operator.validation`: a spec checked and completed with its defaults, typed
  (:class:`~evb_operator.typed_spec.ValidSpec`), or :class:`~evb_operator.validation.InvalidSpec`;
- :mod:`evb_operator.typed_spec`: a valid spec and its parts as frozen dataclasses, whose fields'
  docstrings describe the spec's fields (the CRD's descriptions, the README's tables);
- :mod:`evb_operator.specs`: every child, built from a valid spec by pure functions (labels
  merged, no API calls);
- :mod:`evb_operator.status`: the status and the Events of what the operator did and observed,
  pure;
- :mod:`evb_operator.handlers`: the kopf glue (validate -> build -> adopt -> create if absent
  -> patch the status), the calls to the orderers, the status timer; errors translated to
  ``kopf`` errors there, once;
- :mod:`evb_operator.constants`: names, ports, labels and environment variables, spelled once;
- :mod:`evb_operator.phases`: the phases of a run (``status.phase``) and the condition types,
  one enumeration each (the CRD, the status and the handlers take them from there);
- :mod:`evb_operator.security`: how the operator reaches an orderer under TLS or a token, from
  the Secrets the spec names, pure;
- :mod:`evb_operator.kube`: the few Kubernetes API calls the operator makes.

Each package's ``__init__`` maps its modules. The directory ``operator/`` above this package is
not a package: ``operator`` is a standard library module.
"""

__version__ = "0.1.0"
