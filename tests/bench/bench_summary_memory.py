"""Benchmark of the Spark job's driver memory against the size of the run: ``evb spark-job --path``
on runs of 1 M to 20 M fragments, with a fixed driver JVM heap (``--driver-memory``, 512 MiB by
default, half the EventBuilder's default driver), measuring

- the Python driver's peak RSS (``getrusage`` of the process that runs the job),
- the driver JVM's heap, from its own GC log (``-Xlog:gc``): the largest live heap (occupancy
  after a collection: what the driver holds) and the largest occupancy before one (what it
  allocated between two collections, up to the heap's size), and its peak RSS (``VmHWM``), and
- whether the job finished at all (a driver that collects every fragment runs out of heap, or
  over ``spark.driver.maxResultSize``, somewhere in this range; Spark then hangs, its result
  getter thread dead, and the benchmark kills the job 30 s after the ``OutOfMemoryError``).

The master is ``local-cluster[2,1,1024]`` by default: two executor JVMs of 1 GiB apart from the
driver's, as in a SparkApplication, so the driver's heap is the driver's alone. With ``--master
local[2]`` the executors are threads of the driver's JVM and its heap is both together.

Not a pytest test: ``python tests/bench/bench_summary_memory.py --fragments 1e6,5e6,20e6``
(``--code DIR`` runs the job from another checkout, e.g. an older commit, for comparison). The
data: six sources at a 1 kHz trigger, each fragment within 5 µs of its trigger, 0.5 % of them
late by up to 5 ms, two barriers, 8-byte payloads, written straight as an ordered log by the
orderer's own log writer (seconds for 20 M fragments, no server).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orderer.batch import EmittedBatch  # noqa: E402
from tests.spark.logdata import run_writer  # noqa: E402

SOURCES = 6
TRIGGER_TICKS = 100_000  # 1 ms at 100 MHz
DT = 1_000  # 10 µs: a trigger's fragments, not the next trigger's
LATE_SHARE = 0.005
CHUNK = 1 << 20

_LAUNCHER = """
import json, resource, sys
from orderer.spark.driver.job import main
status = 1
try:
    status = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump({"status": status, "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF)
                   .ru_maxrss}, out)
sys.exit(status)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fragments",
        default="1e6,5e6,20e6",
        help="run sizes, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--driver-memory", default="512m", help="JVM heap (default: %(default)s)")
    parser.add_argument(
        "--master",
        default="local-cluster[2,1,1024]",
        help="Spark master (default: %(default)s: executors in JVMs of their own)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds a job may take; a driver out of heap hangs (default: %(default)s)",
    )
    parser.add_argument("--code", type=Path, help="run the job from this checkout (PYTHONPATH)")
    parser.add_argument("--workdir", type=Path, help="keep data and output here (default: temp)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    return parser


def write_run(data_dir: Path, n: int, seed: int = 1) -> int:
    """An ordered log of ``n`` fragments (see the module docstring); returns the late count."""
    rng = np.random.default_rng(seed)
    high_water = 0
    late_total = 0
    with run_writer(data_dir) as log:
        for first in range(0, n, CHUNK):
            size = min(CHUNK, n - first)
            index = np.arange(first, first + size, dtype=np.int64)
            ts = 1_000_000 + (index // SOURCES) * TRIGGER_TICKS + rng.integers(0, 500, size)
            ts = np.sort(ts)  # in timestamp order, as the orderer emits the on-time ones
            late = rng.random(size) < LATE_SHARE
            ts = np.where(late, ts - rng.integers(1, 5 * TRIGGER_TICKS, size), ts)
            running = np.maximum.accumulate(np.where(late, 0, ts))
            late &= ts < np.maximum(running, high_water)
            high_water = max(high_water, int(running[-1]))
            barrier = np.zeros(size, np.uint32)
            if first == 0:
                barrier[0], late[0] = 1, False
            if first + size == n:
                barrier[-1], late[-1] = 2, False
            late_total += int(late.sum())
            log.append(
                EmittedBatch(
                    first_seq=first,
                    t=np.zeros(size),
                    source=(index % SOURCES + 1).astype(np.uint32),
                    timestamp=ts.astype(np.uint64),
                    barrier=barrier,
                    late=late,
                    payload_offsets=np.arange(0, 8 * (size + 1), 8, dtype=np.uint64),
                    payload=np.zeros(8 * size, np.uint8),
                )
            )
    return late_total


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _hwm_kib(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) if match else None


def _heap_mib(gc_log: Path) -> tuple[float | None, float | None]:
    """The largest heap occupancy after a collection and before one (``123M->45M(512M)``),
    in MiB, from a ``-Xlog:gc`` log."""
    if not gc_log.exists():
        return None, None
    units = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}
    pairs = re.findall(r"(\d+)([KMG])->(\d+)([KMG])\(", gc_log.read_text())
    if not pairs:
        return None, None
    before = max(float(b) * units[bu] for b, bu, _, _ in pairs)
    after = max(float(a) * units[au] for _, _, a, au in pairs)
    return round(after, 1), round(before, 1)


def measure(
    work: Path, n: int, driver_memory: str, master: str, code: Path | None, timeout: float
) -> dict[str, Any]:
    data = work / f"data-{n}"
    if not data.exists():
        started = time.monotonic()
        late = write_run(data, n)
        print(f"data: {n:,} fragments ({late:,} late) in {time.monotonic() - started:.1f} s")
    out = work / f"out-{n}"
    shutil.rmtree(out, ignore_errors=True)
    gc_log = work / f"gc-{n}.log"
    gc_log.unlink(missing_ok=True)
    rusage = work / f"rusage-{n}.json"
    rusage.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env["PYSPARK_SUBMIT_ARGS"] = (
        f"--driver-memory {driver_memory} "
        f"--driver-java-options -Xlog:gc:file={gc_log} pyspark-shell"
    )
    env["PYSPARK_PYTHON"] = sys.executable
    if code is not None:
        env["PYTHONPATH"] = str(code)
    command = [sys.executable, "-c", _LAUNCHER, str(rusage), "--path", str(data), "--dt",
               str(DT), "--output", str(out), "--run", "bench", "--quiet", "--master", master]
    started = time.monotonic()
    job_log = work / f"job-{n}.log"
    killed = None
    with job_log.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=str(code or ROOT), start_new_session=True)
        jvm_hwm = 0
        out_of_heap_at = None
        while process.poll() is None:
            for child in _children(process.pid):
                jvm_hwm = max(jvm_hwm, _hwm_kib(child) or 0)
            now = time.monotonic()
            printed = job_log.read_text("utf-8", "replace")
            if out_of_heap_at is None and "OutOfMemoryError" in printed:
                out_of_heap_at = now  # Spark's result getter died with it: the job hangs
            if now - started > timeout or (out_of_heap_at and now - out_of_heap_at > 30):
                killed = "timed out" if out_of_heap_at is None else "hung after OutOfMemoryError"
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                break
            time.sleep(0.5)
    seconds = time.monotonic() - started
    text = job_log.read_text(errors="replace")
    failure = killed
    for cause in ("OutOfMemoryError", "maxResultSize", "Java heap space"):
        if cause in text:
            failure = cause if killed is None else f"{cause}; {killed}"
            break
    if process.returncode != 0 and failure is None:
        failure = f"exit status {process.returncode}"
    python_kib = json.loads(rusage.read_text())["max_rss_kib"] if rusage.exists() else None
    live, occupied = _heap_mib(gc_log)
    figures = {
        "fragments": n,
        "master": master,
        "driver_memory": driver_memory,
        "finished": process.returncode == 0,
        "failure": failure,
        "seconds": round(seconds, 1),
        "python_driver_peak_rss_mib": round(python_kib / 1024, 1) if python_kib else None,
        "jvm_peak_live_heap_mib": live,
        "jvm_peak_heap_before_gc_mib": occupied,
        "jvm_peak_rss_mib": round(jvm_hwm / 1024, 1) if jvm_hwm else None,
    }
    for summary_file in (out / "runs" / "bench" / "summary.json", out / "summary.json"):
        if process.returncode == 0 and summary_file.exists():  # (the layout before runs/)
            figures["summary_fragments"] = json.loads(summary_file.read_text())["fragments"]
            break
    print(
        f"{n:>12,} fragments  {'finished' if figures['finished'] else 'FAILED':8} "
        f"{seconds:7.1f} s  python driver peak RSS {figures['python_driver_peak_rss_mib']} MiB  "
        f"driver JVM live heap {live} MiB, before GC {occupied} MiB (of {driver_memory})  "
        f"RSS {figures['jvm_peak_rss_mib']} MiB"
        + (f"  [{failure}]" if failure else ""),
        flush=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sizes = [int(float(part)) for part in args.fragments.split(",") if part.strip()]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="evb-bench-summary-"))
    work.mkdir(parents=True, exist_ok=True)
    code = args.code.resolve() if args.code else None
    print(f"evb spark-job --path, driver memory {args.driver_memory}, {args.master}, "
          f"code {code or ROOT}")
    figures = [
        measure(work, n, args.driver_memory, args.master, code, args.timeout) for n in sizes
    ]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
