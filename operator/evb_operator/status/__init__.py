"""An EventBuilder's status and the Events worth posting, computed from what the operator did
and observed. Pure: the previous status comes in, the new fields and the Events go out; the
handlers (:mod:`evb_operator.handlers`) patch and post them.

The modules:

- :mod:`~evb_operator.status.report`: the status of a run, from the handlers' calls
  (:func:`accepted`, :func:`invalid`, :func:`begun`, :func:`ended`) and from the status
  timer's observations (:func:`observe`, :func:`observe_orderers`), with the ``Ready``
  condition (:func:`ready`);
- :mod:`~evb_operator.status.orderers`: a run over several orderers: their answers summed, an
  entry per orderer (:class:`OrdererAnswer`);
- :mod:`~evb_operator.status.barriers`: the Events of the orderer's barrier log, a few per
  update, then a summary;
- :mod:`~evb_operator.status.conditions`: the pieces the status is written with: a condition's
  value (:class:`Verdict`), the conditions list (:func:`set_condition`), an Event
  (:class:`Notice`).

The names of :mod:`~evb_operator.status.report` are this package's too (``status.observe``).
The CRD's status schema, which must allow every field written here, is
:mod:`evb_operator.crd.status`.
"""

from evb_operator.status.report import (
    BARRIER_EVENTS_PER_UPDATE,
    Notice,
    OrdererAnswer,
    Verdict,
    accepted,
    begun,
    ended,
    invalid,
    observe,
    observe_orderers,
    ready,
    set_condition,
)

__all__ = [
    "BARRIER_EVENTS_PER_UPDATE",
    "Notice",
    "OrdererAnswer",
    "Verdict",
    "accepted",
    "begun",
    "ended",
    "invalid",
    "observe",
    "observe_orderers",
    "ready",
    "set_condition",
]
