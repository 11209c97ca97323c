"""A small readable oracle of event building (glom): one fragment at a time, as NSCLDAQ does it.
The Spark consumer must produce exactly these events, whatever its partitions and micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Fragment:
    offset: int
    source: int
    timestamp: int
    barrier: int
    late: bool
    payload: bytes


@dataclass(frozen=True)
class Event:
    event: int  # offset of the first fragment
    timestamp: int
    multiplicity: int
    barrier: int
    late: int
    offsets: tuple[int, ...]
    sources: tuple[int, ...]
    payloads: tuple[bytes, ...]


def _close(frags: list[Fragment], policy: str) -> Event:
    """The event of ``frags``; its timestamp as NSCLDAQ's glom sets it (GLOM_TIMESTAMP_FIRST,
    _LAST, _AVERAGE): the first or last fragment's in stream order, or the integer mean."""
    stamps = [f.timestamp for f in frags]
    if policy == "earliest":
        stamp = stamps[0]
    elif policy == "latest":
        stamp = stamps[-1]
    else:
        stamp = sum(stamps) // len(stamps)
    return Event(
        event=frags[0].offset,
        timestamp=stamp,
        multiplicity=len(frags),
        barrier=frags[0].barrier,
        late=sum(f.late for f in frags),
        offsets=tuple(f.offset for f in frags),
        sources=tuple(f.source for f in frags),
        payloads=tuple(f.payload for f in frags),
    )


def glom(
    fragments: list[Fragment],
    dt: int | None,
    max_fragments: int = 1000,
    policy: str = "earliest",
) -> list[Event]:
    """Sequential glom: an event is the run of consecutive ordinary fragments within dt of its
    first one, at most max_fragments + 1 of them; a barrier closes the open event and is a row of
    its own; dt None builds one event per fragment; the event still open at the end closes there.

    max_fragments is glom's --maxfragments, checked as glom checks it: *before* a fragment is
    added, the open event closes once it holds more than max_fragments (NSCLDAQ 12.0-maint,
    main/daq/evbtools/glom/glomMain.cpp, accumulateEvent: ``fragmentCount > maxFragments``), so
    1 builds pairs and 0 one event per fragment. :func:`glom_main` is that function transcribed;
    the tests hold this oracle to it."""
    events: list[Event] = []
    open_event: list[Fragment] = []
    for fragment in fragments:
        if fragment.barrier:
            if open_event:
                events.append(_close(open_event, policy))
                open_event = []
            events.append(_close([fragment], policy))
            continue
        if open_event and (
            dt is None
            or abs(fragment.timestamp - open_event[0].timestamp) > dt
            or len(open_event) > max_fragments
        ):
            events.append(_close(open_event, policy))
            open_event = []
        open_event.append(fragment)
    if open_event:
        events.append(_close(open_event, policy))
    return events


def glom_main(
    timestamps: list[int],
    barriers: list[int],
    dt: int,
    maxfragments: int = 1000,
    *,
    nobuild: bool = False,
) -> list[list[int]]:
    """NSCLDAQ's glom (12.0-maint, main/daq/evbtools/glom/glomMain.cpp) transcribed statement by
    statement, for physics fragments and barriers: the events it writes, as lists of indices.

    ``main``: a barrier flushes the open event and goes out on its own (``flushEvent();
    outputBarrier(p);``); any other fragment goes to ``accumulateEvent(dt, p)``::

        uint64_t tsdiff1 = timestamp-firstTimestamp;
        uint64_t tsdiff2 = firstTimestamp - timestamp;
        uint64_t tsdiff  = (tsdiff1 < tsdiff2) ? tsdiff1 : tsdiff2;
        if (nobuild || (!firstEvent && ((tsdiff) > dt)) || (fragmentCount > maxFragments)) {
          flushEvent();
        }
        if (firstEvent) { firstTimestamp = timestamp; firstEvent = false; fragmentCount = 0; ... }
        fragmentCount++;  ... addDataToAccumulatedEvent(...)

    ``flushEvent`` writes the accumulated event only if it holds something
    (``if (totalEventSize)``) and sets ``firstEvent = true``. ``maxFragments`` is a ``static
    unsigned`` set from ``--maxfragments`` (``int``, default 1000 in glom.ggo); the timestamp
    arithmetic is unsigned 64-bit, so the window wraps at 2**64."""
    wrap = 2**64
    max_fragments = maxfragments % 2**32  # static unsigned maxFragments = args.maxfragments_arg
    events: list[list[int]] = []
    accumulated: list[int] = []
    first_event = True
    first_timestamp = 0
    fragment_count = 0  # static uint64_t: not reset by flushEvent, only by the next first event

    def flush_event() -> None:
        nonlocal first_event
        if accumulated:
            events.append(list(accumulated))
            accumulated.clear()
            first_event = True

    for index, (timestamp, barrier) in enumerate(zip(timestamps, barriers, strict=True)):
        if barrier:
            flush_event()
            events.append([index])
            continue
        tsdiff1 = (timestamp - first_timestamp) % wrap
        tsdiff2 = (first_timestamp - timestamp) % wrap
        tsdiff = tsdiff1 if tsdiff1 < tsdiff2 else tsdiff2
        if nobuild or (not first_event and tsdiff > dt) or fragment_count > max_fragments:
            flush_event()
        if first_event:
            first_timestamp = timestamp
            first_event = False
            fragment_count = 0
        fragment_count += 1
        accumulated.append(index)
    flush_event()  # EOF: flushEvent()
    return events


def fragments_of(table: pa.Table) -> list[Fragment]:
    """Rows of the evb data source (or the ordered log) as fragments, in offset order."""
    columns = table.sort_by("offset").to_pydict()
    return [
        Fragment(int(o), int(s), int(t), int(b), bool(late), bytes(p or b""))
        for o, s, t, b, late, p in zip(
            columns["offset"], columns["source"], columns["timestamp"], columns["barrier"],
            columns["late"], columns["payload"], strict=True,
        )
    ]


def events_of(table: pa.Table) -> list[Event]:
    """Built events (EVENT_SCHEMA rows, e.g. read back from Parquet), in event order."""
    rows = table.sort_by("event").to_pylist()
    return [
        Event(
            event=row["event"],
            timestamp=row["timestamp"],
            multiplicity=row["multiplicity"],
            barrier=row["barrier"],
            late=row["late"],
            offsets=tuple(f["offset"] for f in row["fragments"]),
            sources=tuple(f["source"] for f in row["fragments"]),
            payloads=tuple(bytes(f["payload"] or b"") for f in row["fragments"]),
        )
        for row in rows
    ]


def random_stream(seed: int, n: int, *, late_share: float = 0.05, barrier_share: float = 0.01,
                  spread: int = 40) -> pa.Table:
    """An ordered stream as the orderer emits it: non-decreasing timestamps with a few late
    fragments below the high-water mark, a few barriers, small payloads."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, spread, size=n)
    ts = 1000 + np.cumsum(steps)
    late = rng.random(n) < late_share
    ts = np.where(late, np.maximum(ts - rng.integers(1, 4 * spread, size=n), 0), ts)
    late &= ts < np.maximum.accumulate(np.where(late, 0, ts))
    barrier = np.where(rng.random(n) < barrier_share, rng.integers(1, 5, size=n), 0)
    late &= barrier == 0
    payloads = [bytes([i % 251]) * int(rng.integers(0, 5)) for i in range(n)]
    return pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "source": pa.array(rng.integers(1, 7, size=n), pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "barrier": pa.array(barrier, pa.int64()),
            "late": pa.array(late),
            "payload": pa.array(payloads, pa.binary()),
        }
    )
