# The two commands a newcomer needs: `make demo` and `make test`. Each creates .venv and
# installs what it needs when missing (an editable install, which also compiles the Cython core).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.evb-installed
# checkov (static checks of the chart, the manifests, the generated objects and the Dockerfiles)
# pins its own versions of packaging, pydantic and more: it gets an environment of its own so
# that evb's is never downgraded to suit it.
TOOLS   := .venv-tools
CHECKOV := $(TOOLS)/bin/checkov
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: demo test lint class-archive bench soak clean manifests images system constraints

# The installs go through uv (from PyPI, into each environment): it fetches and unpacks the
# packages in parallel, where pip takes each in turn (a fresh clone's install: about 28 s against
# pip's 60 to 75 s). The same requirements, constraints and editable build as pip's, and, as pip
# does, every module compiled to bytecode at install (--compile-bytecode) and the certificates
# trusted that the system trusts (--native-tls; uv's default is a bundle of its own).
UV_VERSION := uv>=0.9
UV_INSTALL  = uv pip install --quiet --compile-bytecode --native-tls

# Python's bytecode caches (__pycache__/, ignored by git) are written even where the environment
# sets PYTHONDONTWRITEBYTECODE: `make test` starts some 600 Python processes (evb's servers and
# commands, Spark's Python workers), each of which would compile evb's modules again (60 ms of a
# server's 270 ms start), and every pytest worker would rewrite the asserts of every test module
# again (pytest keeps them only in the bytecode cache).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml setup.py constraints.txt $(wildcard orderer/_core/*.pyx orderer/_core/*.pxd orderer/_core/*.h proto/evb/v1/*.proto)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet '$(UV_VERSION)'
	$(VENV)/bin/$(UV_INSTALL) --python $(PY) --constraint constraints.txt --editable '.[test,operator,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/evb demo --output-dir demo-output

# ruff, the layers (import-linter contracts in .importlinter) and the types (mypy, configured in
# pyproject.toml) of the product code
lint: $(STAMP)
	$(VENV)/bin/ruff check orderer operator tests tools examples
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy examples

$(CHECKOV):
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet '$(UV_VERSION)'
	$(TOOLS)/bin/$(UV_INSTALL) --python $(TOOLS)/bin/python 'checkov>=3.2'

# tests/system needs podman, runc, debootstrap and Prometheus (root installs them): `make system`.
# The two environments are installed side by side (each install waits on the network and the
# disk part of its time), then lint runs beside the class archive of the tests' JVMs
# (tests/jvm_classes.py: a JVM on one core). Three workers, a test file each (pytest-xdist): the
# Spark and end-to-end tests wait on processes of their own (a Spark test file alone keeps the
# two cores about half busy), so three files at once keep the two cores busy where two files left
# a fifth of them idle. The files go out in the order tests/conftest.py sorts them (the long ones
# first), not by their number of tests, so that the short files even out the end.
test:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(CHECKOV)
	@$(MAKE) --no-print-directory -j2 lint class-archive
	$(PY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder tests --ignore=tests/system --durations=25

# The class-data sharing archive every JVM of the tests maps Spark's classes from (made once per
# PySpark and JDK into pytest's cache; pytest makes it itself when it is missing).
class-archive: $(STAMP)
	$(PY) -m tests.jvm_classes --make

# Both images, built with podman (tools/images/build.sh): evb:0.1.0 and evb-spark:0.1.0. Base
# images that cannot be pulled are replaced by stand-ins made from Debian packages (README.md,
# "Images"). S3A_JARS=no leaves the Spark image's s3a:// jars (from Maven Central) out.
S3A_JARS ?= yes
images: $(STAMP)
	S3A_JARS=$(S3A_JARS) tools/images/build.sh

# The built images run as the operator's objects run them, and the chart's alerts on a real
# Prometheus (tests/system; needs podman, runc, debootstrap and prometheus: tools/system/install.sh).
system: images
	$(PY) -m pytest -q tests/system

# constraints.txt, the exact version of every package (make's install, both images, CI), from a
# fresh resolution of pyproject.toml's requirements: take newer releases on purpose.
constraints:
	$(PYTHON) tools/refresh_constraints.py

bench: $(STAMP)
	$(PY) tests/bench/bench_orderer.py --json bench-output/orderer.json
	$(PY) tests/bench/bench_service.py --json bench-output/service.json
	$(PY) tests/bench/bench_read.py --json bench-output/read.json
	$(PY) tests/bench/bench_orderers.py --orderers 1,2 --fragments 2000000 --json bench-output/orderers.json
	$(PY) tests/bench/bench_orderers.py --mode sliced --orderers 1,2 --fragments 2000000 --json bench-output/orderers-sliced.json
	$(PY) tests/bench/bench_spark.py --json bench-output/spark.json
	$(PY) tests/bench/bench_spark_scaling.py --json bench-output/spark-scaling.json
	$(PY) tests/bench/bench_stages.py --json bench-output/stages.json
	$(PY) tests/bench/bench_live.py --json bench-output/live.json
	$(PY) tests/bench/bench_nscldaq.py --json bench-output/nscldaq.json
	$(PY) tests/bench/bench_replay.py --json bench-output/replay.json

# Long randomised runs of the property tests and the bad-input fuzzers (twenty times the inputs
# of `make test`), and the load test at full size: 64 sources x 10,000,000 fragments
# (EVB_LOAD_FRAGMENTS per source and EVB_LOAD_RATE fragments/s per source change it).
soak: $(STAMP)
	EVB_SOAK=1 $(PY) -m pytest -q -s tests/orderer/test_property.py \
		tests/service/test_fuzz_submit.py tests/formats/test_fuzz_replay.py \
		tests/operator/test_fuzz_spec.py tests/e2e/test_load.py

# The generated CRD (from operator/evb_operator/crd/) and manifests/ (the chart, rendered).
manifests: $(STAMP)
	$(PY) tools/generate_manifests.py

clean:
	rm -rf $(VENV) $(TOOLS) build *.egg-info orderer/_core/*.c orderer/_core/*.so demo-output bench-output
