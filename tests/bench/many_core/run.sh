#!/usr/bin/env bash
# Run on the many-core host (see bundle.sh): install the carried wheels into /tmp/site, build the
# Cython core and the stubs in place, then N orderers at once (bench_orderers.py: one run over N
# against N runs of one, at 32 B; SIZES=1 adds 1 KiB and 4 KiB) and, with SWEEP=1, the service's
# payload sweep against its bare and durable peers. About three minutes on 16 cores, five with
# SIZES=1, seven with both.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
step host
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g | head -2; df -h /tmp | tail -1; python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site
cd "$here/evb" || exit 1
step build
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/bin; printf '#!/bin/sh\nexec python3 -m orderer.cli "$@"\n' > /tmp/bin/evb; chmod +x /tmp/bin/evb
export PATH=/tmp/bin:$PATH
evb --version || exit 1
# One run over N orderers (--mode sliced) against N runs of one (--mode independent), with the
# data directories on tmpfs (what is left when the disk is not shared) and, with DISK=1, on the
# host's disk.
for mode in sliced independent; do
  [ -n "${DISK:-}" ] && step "N orderers at once, $mode, 32 B, disk" &&
  timeout 120 python3 tests/bench/bench_orderers.py --mode $mode --orderers 1,2,4,8 --fragments 4000000 --json "$out/$mode-32-disk.json"
  step "N orderers at once, $mode, 32 B, tmpfs"
  TMPDIR=/dev/shm timeout 120 python3 tests/bench/bench_orderers.py --mode $mode --orderers 1,2,4,8 --fragments 4000000 --json "$out/$mode-32-tmpfs.json"
done
[ -n "${SIZES:-}" ] && for size in 1024:500000 4096:125000; do
  step "N orderers at once, sliced and independent, ${size%%:*} B, tmpfs"
  for mode in sliced independent; do
    TMPDIR=/dev/shm timeout 120 python3 tests/bench/bench_orderers.py --mode $mode --orderers 1,2,4,8 --payload ${size%%:*} --fragments ${size##*:} --json "$out/$mode-${size%%:*}-tmpfs.json"
  done
done
[ -n "${SWEEP:-}" ] || { step done; exit 0; }
step "bench_service: payload sweep, evb against the bare and durable peers, 16 sources"
timeout 240 python3 tests/bench/bench_service.py --fragments 8000000 --payloads 32,1024,4096 --bytes-budget 536870912 --repeat 2 --phases ingest,bare,durable --json "$out/service-sweep.json" "$@"
step done
