"""The offsets consumers have committed, durable in the data directory's ``consumers.json``.

A module of its own because the offsets are not a log: one small file replaced whole, read by
retention (:mod:`orderer.service.subscriptions`) as the floor below which output may go; why
they are kept, and the file's layout, are :class:`ConsumerOffsets`'s.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from orderer.errors import InterfaceError, InternalOrdererError
from orderer.service.durable import replace_file
from orderer.wire.limits import MAX_COMMIT_METADATA

__all__ = ["ConsumerOffsets"]


class ConsumerOffsets:
    """The offsets consumers have committed (``Commit``), durable in one small JSON file, with
    the Unix time of each consumer's last commit.

    Why: the ordered log's retention must never delete output a known consumer (the Spark job)
    has not processed yet, or a restarted consumer could not replay it (exactly-once). Each
    consumer's offset only moves forward; the file is replaced atomically (write, fsync,
    rename), so a crash leaves the old or the new content, never a torn one. The file maps each
    name to ``{"offset", "last_commit"}`` and, when the commit carried some, ``"metadata"``
    (base64: the consumer's opaque state at that offset, so that it can resume there without
    reading the log before it, which retention may have deleted); a file of a server before last
    commit times were kept maps names to offsets alone, and reads with no last commit time.
    """

    MAX_NAME = 253
    MAX_METADATA = MAX_COMMIT_METADATA

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offsets: dict[str, int] = {}
        self._last_commit: dict[str, float] = {}
        self._metadata: dict[str, bytes] = {}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                for name, entry in loaded.items():
                    if isinstance(entry, dict):
                        self._offsets[str(name)] = int(entry["offset"])
                        if entry.get("last_commit") is not None:
                            self._last_commit[str(name)] = float(entry["last_commit"])
                        if entry.get("metadata"):
                            self._metadata[str(name)] = base64.b64decode(
                                entry["metadata"], validate=True
                            )
                    else:  # offsets only
                        self._offsets[str(name)] = int(entry)
            except (ValueError, AttributeError, TypeError, KeyError) as error:
                raise InternalOrdererError(
                    f"{self.path}: not a consumer offset file: {error!r}"
                ) from None

    def __getitem__(self, consumer: str) -> int:
        return self._offsets[consumer]

    def as_dict(self) -> dict[str, int]:
        return dict(self._offsets)

    def last_commit(self, consumer: str) -> float | None:
        """Unix time of the consumer's last commit; None if the file did not keep it."""
        return self._last_commit.get(consumer)

    def metadata(self, consumer: str) -> bytes:
        """The metadata committed with the consumer's offset (empty when none)."""
        return self._metadata.get(consumer, b"")

    def lowest(self) -> int | None:
        """The lowest committed offset over every known consumer; None when there is none."""
        return min(self._offsets.values(), default=None)

    def commit(
        self,
        consumer: str,
        offset: int,
        *,
        metadata: bytes | None = None,
        now: float | None = None,
    ) -> int:
        """Record that ``consumer`` processed everything below ``offset`` at Unix time ``now``
        (the wall clock when omitted); returns its offset now (a lower offset than the recorded
        one changes nothing but the last commit time, which then is not written down: a commit
        that moves nothing costs no fsync). ``metadata`` always describes the recorded offset: a
        commit that moves the offset stores it (none when None), one at exactly the recorded
        offset replaces it unless None, one below it is ignored with the offset."""
        if not consumer or len(consumer) > self.MAX_NAME or not consumer.isprintable():
            raise InterfaceError(
                f"consumer: {consumer!r} must be 1 to {self.MAX_NAME} printable characters"
            )
        if metadata is not None and len(metadata) > self.MAX_METADATA:
            raise InterfaceError(
                f"metadata: {len(metadata)} bytes is above the limit of {self.MAX_METADATA}"
            )
        self._last_commit[consumer] = time.time() if now is None else now
        current = self._offsets.get(consumer)
        if current is not None and offset <= current:
            if offset == current and metadata is not None and metadata != self.metadata(consumer):
                self._set_metadata(consumer, metadata)
                self._save()
            return current
        self._offsets[consumer] = offset
        self._set_metadata(consumer, metadata or b"")
        self._save()
        return offset

    def _set_metadata(self, consumer: str, metadata: bytes) -> None:
        if metadata:
            self._metadata[consumer] = bytes(metadata)
        else:
            self._metadata.pop(consumer, None)

    def delete(self, consumer: str) -> bool:
        """Forget ``consumer`` (durably): its offset no longer holds retention back. Returns
        whether it was known; forgetting an unknown consumer writes nothing."""
        self._last_commit.pop(consumer, None)
        self._metadata.pop(consumer, None)
        if self._offsets.pop(consumer, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        """Replace the file atomically (:func:`replace_file`)."""
        entries: dict[str, dict[str, Any]] = {
            name: {"offset": offset, "last_commit": self._last_commit.get(name)}
            for name, offset in self._offsets.items()
        }
        for name, metadata in self._metadata.items():
            entries[name]["metadata"] = base64.b64encode(metadata).decode("ascii")
        replace_file(self.path, json.dumps(entries, sort_keys=True).encode())
