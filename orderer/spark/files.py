"""Files of the Spark job's output, local or at a Hadoop URI (``s3a://``, ``hdfs://``), through
Hadoop's file system as Spark itself writes them: the job (:mod:`orderer.spark.job`) creates,
reads, copies and removes its runs' directories with these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "drop_uncommitted",
    "exists",
    "filesystem",
    "make_directory",
    "publish",
    "read_text",
    "remove",
    "write_text",
]


def publish(spark: Any, local: Path, uri: str) -> None:
    """Copy a local file or directory to a Hadoop URI (s3a://, hdfs://)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    destination = jvm.org.apache.hadoop.fs.Path(uri)
    system = destination.getFileSystem(conf)
    source = jvm.org.apache.hadoop.fs.Path(str(local))
    system.copyFromLocalFile(False, True, source, destination)


def exists(spark: Any, uri: str) -> bool:
    system, path = filesystem(spark, uri)
    return bool(system.exists(path))


def remove(spark: Any, uri: str) -> None:
    """Remove a directory (or file) with everything in it, local or at a Hadoop URI."""
    system, path = filesystem(spark, uri)
    system.delete(path, True)


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
