"""Files of the Spark job's output, local or at a Hadoop URI (``s3a://``, ``hdfs://``), through
Hadoop's file system as Spark itself writes them: the job (:mod:`orderer.spark.driver.job`) creates,
reads, copies and removes its runs' directories with these, and the NSCLDAQ sink writes its
files through a :class:`Directory`. Which locations are local is :func:`local`'s to say, for
both."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "Directory",
    "drop_uncommitted",
    "exists",
    "filesystem",
    "local",
    "make_directory",
    "publish",
    "read_text",
    "remove",
    "write_text",
]


def local(uri: str) -> Path | None:
    """The local path of an output location (a plain path or a ``file://`` URI); None for a
    Hadoop URI (``s3a://``, ``hdfs://``), which only Hadoop's file system reaches."""
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    return None if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", uri) else Path(uri)


def publish(spark: Any, local: Path, uri: str) -> None:
    """Copy a local file or directory to a Hadoop URI (s3a://, hdfs://)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    destination = jvm.org.apache.hadoop.fs.Path(uri)
    system = destination.getFileSystem(conf)
    source = jvm.org.apache.hadoop.fs.Path(str(local))
    system.copyFromLocalFile(False, True, source, destination)


def exists(spark: Any, uri: str) -> bool:
    where = local(uri)
    if where is not None:
        return where.exists()
    system, path = filesystem(spark, uri)
    return bool(system.exists(path))


def remove(spark: Any, uri: str) -> None:
    """Remove a directory (or file) with everything in it, local or at a Hadoop URI (a local
    one without the JVM: the stages sink removes one on every micro-batch, and four py4j calls
    cost more than the removal)."""
    where = local(uri)
    if where is None:
        system, path = filesystem(spark, uri)
        system.delete(path, True)
    elif where.is_dir() and not where.is_symlink():
        shutil.rmtree(where)
    else:
        where.unlink(missing_ok=True)


def make_directory(spark: Any, uri: str) -> None:
    system, path = filesystem(spark, uri)
    system.mkdirs(path)


def filesystem(spark: Any, uri: str) -> tuple[Any, Any]:
    """Hadoop's file system of ``uri`` and the path in it (local paths too)."""
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def drop_uncommitted(spark: Any, directory: str, schema: str, fmt: str) -> list[str]:
    """Remove the data files of a streamed run's directory that its sink log does not list;
    returns their names.

    Why: Spark reads the run's own directory through the log (exactly once), but a reader of
    ``OUTPUT/events`` as a whole lists the files, and a driver that died in the middle of a
    micro-batch can have left a partial one, which the restarted query wrote again."""
    system, path = filesystem(spark, directory)
    log = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path, "_spark_metadata")
    if not system.exists(log):
        return []
    committed = {
        uri.rsplit("/", 1)[-1]
        for uri in spark.read.format(fmt).schema(schema).load(directory).inputFiles()
    }
    dropped = []
    for status in system.listStatus(path):
        name = status.getPath().getName()
        if status.isFile() and not name.startswith(("_", ".")) and name not in committed:
            system.delete(status.getPath(), False)
            dropped.append(name)
    return dropped


def write_text(spark: Any, uri: str, text: str) -> None:
    system, path = filesystem(spark, uri)
    stream = system.create(path, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()


def read_text(spark: Any, uri: str) -> str:
    system, path = filesystem(spark, uri)
    stream = system.open(path)
    try:
        return str(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


class Directory:
    """Files by name in one directory, local (plain files: no Hadoop checksum files beside
    them) or at a Hadoop URI (through the driver's JVM); the NSCLDAQ sink writes its ring items
    and manifests with these (:mod:`orderer.spark.output.nscldaq`)."""

    def __init__(self, spark: Any, directory: str) -> None:
        self.spark = spark
        self.directory = directory.rstrip("/")
        self.local = local(directory)

    def _hadoop(self, name: str) -> tuple[Any, Any]:
        jvm = self.spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(f"{self.directory}/{name}" if name else self.directory)
        return path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()), path

    def exists(self, name: str) -> bool:
        if self.local is not None:
            return (self.local / name).exists()
        filesystem, path = self._hadoop(name)
        return bool(filesystem.exists(path))

    def names(self, sub: str = "") -> list[str]:
        if self.local is not None:
            where = self.local / sub
            return sorted(p.name for p in where.iterdir()) if where.is_dir() else []
        filesystem, path = self._hadoop(sub)
        if not filesystem.exists(path):
            return []
        return sorted(str(s.getPath().getName()) for s in filesystem.listStatus(path))

    def remove(self, name: str) -> None:
        if self.local is not None:
            (self.local / name).unlink(missing_ok=True)
            return
        filesystem, path = self._hadoop(name)
        filesystem.delete(path, True)

    def write(self, name: str, chunks: Iterable[bytes]) -> int:
        """Write under a temporary name, then rename: a file of this name is always whole."""
        temporary = f"{name.rsplit('/', 1)[0] + '/' if '/' in name else ''}.tmp-" + (
            name.rsplit("/", 1)[-1]
        )
        size = 0
        if self.local is not None:
            target = self.local / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(self.local / temporary, "wb") as stream:
                for chunk in chunks:
                    stream.write(chunk)
                    size += len(chunk)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(self.local / temporary, target)
            return size
        filesystem, path = self._hadoop(temporary)
        stream = filesystem.create(path, True)
        try:
            for chunk in chunks:
                stream.write(bytearray(chunk))
                size += len(chunk)
        finally:
            stream.close()
        _, final = self._hadoop(name)
        filesystem.delete(final, False)
        if not filesystem.rename(path, final):
            raise OSError(f"could not rename {self.directory}/{temporary} to {name}")
        return size

    def rename(self, name: str, new: str) -> None:
        """Move ``name`` to ``new`` (both in this directory), replacing a file of that name."""
        if self.local is not None:
            os.replace(self.local / name, self.local / new)
            return
        filesystem, path = self._hadoop(name)
        _, target = self._hadoop(new)
        filesystem.delete(target, False)
        if not filesystem.rename(path, target):
            raise OSError(f"could not rename {self.directory}/{name} to {new}")

    def read_text(self, name: str) -> str:
        if self.local is not None:
            return (self.local / name).read_text(encoding="utf-8")
        filesystem, path = self._hadoop(name)
        stream = filesystem.open(path)
        try:
            jvm = self.spark.sparkContext._jvm
            return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
