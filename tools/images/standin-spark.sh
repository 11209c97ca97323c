#!/usr/bin/env bash
# A stand-in for the apache/spark base image, for hosts that cannot pull from Docker Hub.
# Usage: standin-spark.sh IMAGE_NAME BASE_IMAGE SPARK_VERSION
# BASE_IMAGE is the Python base (real or stand-in); Spark is the one the PyPI `pyspark`
# distribution carries (its jars, bin/ and sbin/, and its Python side zipped as the Spark
# distribution ships it under python/lib), taken from the Python environment $EVB_PYTHON
# (default .venv/bin/python): no download. The Java runtime is Debian's OpenJDK 17
# (spark-standin/Containerfile says how the rest differs).
set -euo pipefail
name="$1" base="$2" version="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${EVB_PYTHON:-$here/../../.venv/bin/python}"
found="$("$python" -c 'import pyspark, py4j, os; print(pyspark.__version__, os.path.dirname(pyspark.__file__), os.path.dirname(py4j.__file__), py4j.__version__)')" \
    || { echo "standin-spark.sh: $python cannot import pyspark (run make first, or set EVB_PYTHON)" >&2; exit 1; }
read -r have pyspark_dir py4j_dir py4j_version <<<"$found"
if [[ "$have" != "$version" ]]; then
    echo "standin-spark.sh: the base image is Spark $version but $python has pyspark $have" >&2
    exit 1
fi
context="$(mktemp -d /var/tmp/evb-standin-spark.XXXXXX)"
trap 'rm -rf "$context"' EXIT
cp "$here"/spark-standin/{Containerfile,entrypoint.sh,decom.sh} "$context/"
mkdir -p "$context/spark/python/lib"
cp -r "$pyspark_dir"/{jars,bin,sbin} "$context/spark/"
# Spark's Python side as its distribution ships it (python/lib/pyspark.zip, py4j-*-src.zip), which
# spark-submit puts on the PYTHONPATH; the jars and scripts are left out of the zip.
"$python" - "$context/spark/python/lib" "$pyspark_dir" "$py4j_dir" "$py4j_version" <<'PYTHON'
import pathlib, sys, zipfile
out, pyspark, py4j, py4j_version = sys.argv[1:]
for target, package in ((f"{out}/pyspark.zip", pyspark), (f"{out}/py4j-{py4j_version}-src.zip", py4j)):
    root = pathlib.Path(package)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(root).parts
            if path.is_file() and "__pycache__" not in parts and parts[0] not in ("jars", "bin", "sbin"):
                archive.write(path, path.relative_to(root.parent))
PYTHON
echo "stand-in $name: Spark $version from $pyspark_dir" >&2
"$here/podman.sh" build --network=host --quiet --build-arg "BASE_IMAGE=$base" -t "$name" "$context" >/dev/null
echo "stand-in $name: made" >&2
