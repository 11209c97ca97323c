"""evb's event orderer: the ordering contract of ``docs/ordering.md`` with a Cython core.

Public API::

    from orderer import Orderer, OrdererConfig, FragmentBatch
"""

from orderer.api import FlowSignal, Orderer
from orderer.batch import EmittedBatch, FragmentBatch
from orderer.clock import Clock, MonotonicClock, SimulatedClock
from orderer.config import FlowControl, OrdererConfig
from orderer.errors import ConfigError, EvbError, InterfaceError, InternalOrdererError, RecordError

__all__ = [
    "Clock",
    "ConfigError",
    "EmittedBatch",
    "EvbError",
    "FlowControl",
    "FlowSignal",
    "FragmentBatch",
    "InterfaceError",
    "InternalOrdererError",
    "MonotonicClock",
    "Orderer",
    "OrdererConfig",
    "RecordError",
    "SimulatedClock",
]
