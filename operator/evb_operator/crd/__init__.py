"""The ``EventBuilder`` CustomResourceDefinition as Python data, the one source of truth of the
chart's ``crds/`` file (``tools/generate_manifests.py``), with the Python twins of its CEL rules
(:mod:`evb_operator.validation` checks a spec with them).

The modules:

- :mod:`~evb_operator.crd.definition`: the CRD itself (:func:`build_crd`), its names
  (:data:`GROUP`, :data:`VERSION`, :data:`PLURAL`...), the spec's schema (:data:`SPEC_SCHEMA`)
  with the sections of the orderer's pod, storage, TLS, auth, NetworkPolicy and alerts, and every
  CEL rule (:data:`RULES`);
- :mod:`~evb_operator.crd.schema`: the typed property builders and :class:`Rule` (a CEL rule
  with its Python twin), which every other module builds with;
- :mod:`~evb_operator.crd.texts`: every field's description, its text written once beside the
  field (a command's setting, or the typed spec's field), which every builder takes;
- :mod:`~evb_operator.crd.parameters`: the orderer's parameters, generated from the fields of
  :class:`orderer.config.OrdererConfig`;
- :mod:`~evb_operator.crd.runs`: ``resetOnBeginRun``'s, ``run``'s and ``upstreams``' rules and
  properties;
- :mod:`~evb_operator.crd.slicing`: ``orderers`` and ``sliceTicks`` (one run over N orderers);
- :mod:`~evb_operator.crd.spark`: the Spark job's section (``spec.spark``);
- :mod:`~evb_operator.crd.output`: its output (``spec.spark.output``), where a local one goes;
- :mod:`~evb_operator.crd.live`: its live page's port (``spec.spark.ui``);
- :mod:`~evb_operator.crd.status`: the status schema and the printer columns;
- :mod:`~evb_operator.crd.tables`: the README's tables of the spec's fields, from the CRD and
  the same texts.

The names of :mod:`~evb_operator.crd.definition` are this package's too (``crd.GROUP``,
``crd.build_crd()``). Pure data: it imports only the phases (:mod:`evb_operator.phases`), the
typed spec whose fields describe it (:mod:`evb_operator.typed_spec`) and the orderer's
configuration and flags it is generated from.
"""

from evb_operator.crd.definition import (
    BUILDING_FIELDS,
    BUILDING_PRESENCE,
    GROUP,
    KIND,
    PLURAL,
    RULES,
    SHORT_NAME,
    SINGULAR,
    SPEC_SCHEMA,
    STATUS_SCHEMA,
    VERSION,
    Rule,
    build_crd,
)

__all__ = [
    "BUILDING_FIELDS",
    "BUILDING_PRESENCE",
    "GROUP",
    "KIND",
    "PLURAL",
    "RULES",
    "SHORT_NAME",
    "SINGULAR",
    "SPEC_SCHEMA",
    "STATUS_SCHEMA",
    "VERSION",
    "Rule",
    "build_crd",
]
