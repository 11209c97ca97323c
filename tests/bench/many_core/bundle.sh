#!/usr/bin/env bash
# Bundle the project for a bare many-core x86-64 Linux host that has Python 3.12, numpy, pyarrow,
# pyyaml, rich and prometheus-client but no network: the committed tree (git archive HEAD), the
# wheels it lacks (grpcio and its tools, protobuf, Cython, for CPython 3.12) and run.sh beside
# them.
# usage: tests/bench/many_core/bundle.sh .many-core   (from the checkout's root; .many-core is
#        ignored by git: .gitignore)
# Then on the host, from the checkout's root: bash DIR/run.sh  (results under $OUT or /tmp/out)
set -euo pipefail
dir=${1:?usage: bundle.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"; mkdir -p "$dir/evb" "$dir/wheels"
git archive HEAD | tar -x -C "$dir/evb"
py=${PYTHON:-.venv/bin/python}
ver() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 -d "$dir/wheels" \
  "grpcio==$(ver grpcio)" "grpcio-tools==$(ver grpcio-tools)" \
  "grpcio-health-checking==$(ver grpcio-health-checking)" "grpcio-reflection==$(ver grpcio-reflection)" \
  "protobuf==$(ver protobuf)" "Cython"
cp "$here/run.sh" "$dir/run.sh"
du -sh "$dir"
