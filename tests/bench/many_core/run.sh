#!/usr/bin/env bash
# Run on the many-core host (see bundle.sh): install the carried wheels into /tmp/site, build the
# Cython core and the stubs in place, then the service's payload sweep against its bare and
# durable peers (with SWEEP=1) and N orderers at once (bench_orderers.py). About two minutes on 16
# cores, four with the sweep.
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
step "N orderers at once, 32 B"
timeout 150 python3 tests/bench/bench_orderers.py --orderers 1,2,4,8 --fragments 4000000 --json "$out/orderers-32.json"
step "N orderers at once, 1 KiB"
timeout 120 python3 tests/bench/bench_orderers.py --orderers 1,2,4,8 --fragments 500000 --payload 1024 --json "$out/orderers-1k.json"
step "N orderers at once, 4 KiB"
timeout 120 python3 tests/bench/bench_orderers.py --orderers 1,2,4,8 --fragments 125000 --payload 4096 --json "$out/orderers-4k.json"
[ -n "${SWEEP:-}" ] || { step done; exit 0; }
step "bench_service: payload sweep, evb against the bare and durable peers, 16 sources"
timeout 240 python3 tests/bench/bench_service.py --fragments 8000000 --payloads 32,1024,4096 --bytes-budget 536870912 --repeat 2 --phases ingest,bare,durable --json "$out/service-sweep.json" "$@"
step done
