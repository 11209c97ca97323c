# Hand-written types of the Cython core (core.pyx); keep in step with its public methods.
from typing import Any

import numpy as np
import numpy.typing as npt

RULE_RESERVED_TIMESTAMP: int
RULE_OFFSETS_BACKWARDS: int
RULE_PAYLOAD_TOO_LARGE: int

def first_violation(
    timestamp: npt.NDArray[np.uint64],
    payload_offsets: npt.NDArray[np.uint64],
    max_payload: int,
) -> tuple[int, int]: ...

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
    ) -> None: ...
    def configure(
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
    ) -> None: ...
    def declare_source(self, source_id: int) -> None: ...
    def submit(
        self,
        now: float,
        source: npt.NDArray[np.uint32],
        timestamp: npt.NDArray[np.uint64],
        barrier: npt.NDArray[np.uint32],
        payload_offsets: npt.NDArray[np.uint64],
        payload: npt.NDArray[np.uint8],
    ) -> None: ...
    def watermark(self, now: float, source_id: int, watermark: int) -> None: ...
    def end_source(self, now: float, source_id: int) -> None: ...
    def run_deadlines(self, now: float) -> None: ...
    def flush(self, now: float) -> None: ...
    def end_of_run(self, now: float) -> None: ...
    def next_deadline(self) -> float: ...
    def replay(
        self,
        kind: npt.NDArray[np.uint8],
        t: npt.NDArray[np.float64],
        source: npt.NDArray[np.uint32],
        value: npt.NDArray[np.uint64],
        barrier: npt.NDArray[np.uint32],
        payload_offsets: npt.NDArray[np.uint64],
        payload: npt.NDArray[np.uint8],
    ) -> None: ...
    def take_emitted(
        self,
    ) -> tuple[
        int,
        npt.NDArray[np.float64],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint32],
        npt.NDArray[np.bool_],
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint8],
    ]: ...
    def take_flow_changes(self) -> list[tuple[int, bool]]: ...
    def take_barrier_log(self) -> list[tuple[float, bool, bool, tuple[int, ...]]]: ...
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
