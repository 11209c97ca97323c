# Hand-written types of the Cython core (core.pyx and the parts it includes); keep in step
# with its public functions and methods.
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

_U8 = npt.NDArray[np.uint8]
_U32 = npt.NDArray[np.uint32]
_U64 = npt.NDArray[np.uint64]
_F64 = npt.NDArray[np.float64]

def check_fragment_rules(timestamp: _U64, payload_offsets: _U64, max_payload: int) -> None: ...

ITEM_BATCH: int
ITEM_WATERMARK: int
ITEM_END_OF_SOURCE: int

class SubmitLimits:
    def __init__(self, max_payload: int, declared: Iterable[int] | None = None) -> None: ...
    @property
    def max_payload(self) -> int: ...

def decode_submit(
    data: bytes, limits: SubmitLimits, sequences: dict[int, int] | None = None
) -> tuple[int, tuple[Any, ...]]: ...

# arrival_rows.pyx: a group is a batch (t, first sequence or None, source, timestamp, barrier,
# payload_offsets, payload) or a marker (t, kind, source, value); the fields of ArrivalRecords
def arrival_rows(
    groups: list[tuple[Any, ...]],
) -> tuple[
    _U8, _F64, _U32, _U64, _U32, _U64, _U8, _U64 | None, npt.NDArray[np.bool_] | None
]: ...

# glom_starts.pyx: where glom's events start (orderer.building.glom.event_starts checks the input)
def event_starts_of(
    timestamp: _U64, is_barrier: _U8, dt: int, span: int
) -> npt.NDArray[np.int64]: ...

# payload_gather.pyx: payloads of rows of several large_binary columns, each (offsets, data)
def gather_payloads(
    parts: list[tuple[npt.NDArray[np.int64], _U8]],
    which: npt.NDArray[np.int64],
    row: npt.NDArray[np.int64],
    fill: bool = True,
) -> tuple[_U64, _U8 | None]: ...

def locate_rows(
    rows: npt.NDArray[np.int64], firsts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...

class OrdererCore:
    def __init__(
        self,
        build_window: float,
        startup_delay: float,
        barrier_timeout: float,
        source_timeout: float,
        drop_late: bool,
        global_xoff: int,
        global_xon: int,
        queue_xoff: int,
        queue_xon: int,
        reset_on_begin_run: bool = False,
    ) -> None: ...
    # the same parameters: set anew, taking effect at the next flush
    configure = __init__
    def declare_source(self, source_id: int) -> None: ...
    def submit(
        self, now: float, source: _U32, timestamp: _U64, barrier: _U32, payload_offsets: _U64,
        payload: _U8,
    ) -> None: ...
    def submit_batches(
        self, now: float, batches: list[tuple[_U32, _U64, _U32, _U64, _U8]]
    ) -> None: ...
    def watermark(self, now: float, source_id: int, watermark: int) -> None: ...
    def end_source(self, now: float, source_id: int) -> None: ...
    def set_source_state(self, now: float, source_id: int, dead: bool) -> bool: ...
    def run_deadlines(self, now: float) -> None: ...
    def flush(self, now: float) -> None: ...
    def end_of_run(self, now: float) -> None: ...
    def next_deadline(self) -> float: ...
    def replay(
        self, kind: _U8, t: _F64, source: _U32, value: _U64, barrier: _U32,
        payload_offsets: _U64, payload: _U8,
    ) -> None: ...
    def take_emitted(
        self,
    ) -> tuple[int, _F64, _U32, _U64, _U32, npt.NDArray[np.bool_], _U64, _U8, _F64 | None]: ...
    def set_track_arrival(self, on: bool) -> None: ...
    def take_flow_changes(self) -> list[tuple[int, bool]]: ...
    def take_barrier_log(
        self,
    ) -> list[tuple[int, float, bool, bool, dict[int, int], tuple[int, ...]]]: ...
    def counters(self) -> dict[str, Any]: ...
    def source_states(self, now: float) -> dict[int, dict[str, Any]]: ...
    def memory_bytes(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def high_water_mark(self) -> int | None: ...
    @property
    def last_flush(self) -> float: ...
    @property
    def emitted_seq(self) -> int: ...
    @property
    def global_paused(self) -> bool: ...
    @property
    def source_ids(self) -> list[int]: ...

# nscldaq.pyx: the walk of NSCLDAQ records (orderer.nscldaq.format makes the messages)
RING_WHOLE: int
RING_PARTIAL: int
RING_TYPE_UPPER_BITS: int
RING_SIZE_BELOW_MINIMUM: int
RING_BODY_HEADER_WORD: int
RING_NO_ROOM_FOR_BODY_HEADER: int

def index_ring_items(
    buf: _U8,
) -> tuple[
    npt.NDArray[np.int64], _U32, _U32, npt.NDArray[np.bool_], _U64, _U32, _U32, int, int
]: ...
def index_evb_fragments(
    buf: _U8,
) -> tuple[npt.NDArray[np.int64], _U64, _U32, _U32, _U32, int]: ...
