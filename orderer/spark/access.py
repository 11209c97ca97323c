"""How the ``evb`` data source reaches what it reads: an orderer's channel security from the
source's options (:func:`channel_security`), a data directory's ordered log
(:func:`segment_files`).

Why a module of its own: the one-orderer source (:mod:`orderer.spark.source`) and the reads of a
run over several orderers (:mod:`orderer.spark.sliced_reads`, :mod:`orderer.spark.sliced_source`)
both need them, and the one-orderer source hands a comma list of targets or paths to the other:
here, neither imports the other's module to reach an orderer. Nothing here imports pyspark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orderer.errors import ConfigError
from orderer.formats import log_format
from orderer.formats.log_format import ordered_segments

__all__ = ["channel_security", "segment_files"]


def channel_security(options: tuple[tuple[str, str], ...]) -> Any:
    """The client's ChannelSecurity from the source's security options; None for plaintext."""
    if not options:
        return None
    from orderer.client import ChannelSecurity

    given = dict(options)
    return ChannelSecurity.from_files(
        ca=given.get("tlsCa"),
        cert=given.get("tlsCert"),
        key=given.get("tlsKey"),
        token_file=given.get("tokenFile"),
        tls=given.get("tls", "").lower() in ("1", "true", "yes"),
    )


def segment_files(path: Path) -> list[Path]:
    """The ordered log's segments: ``path`` is the data directory or its ``ordered/``."""
    segments = ordered_segments(path)
    if not segments:
        raise ConfigError("path", str(path), "holds no ordered log (ordered-*.arrow)")
    data_dir = segments[0].parent.parent
    written = log_format.ordered_format_of(segments[0].parent)
    if written is log_format.ORDERED_SCHEMA and not log_format.log_segments(
        data_dir / log_format.ARRIVALS, log_format.ARRIVALS
    ):
        raise ConfigError(
            "path",
            str(path),
            f"has an ordered log but no arrival log ({data_dir / log_format.ARRIVALS} holds no "
            "arrivals-*.arrow): the payloads are there; give the whole data directory",
        )
    return segments
