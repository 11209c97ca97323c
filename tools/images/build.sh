#!/usr/bin/env bash
# Build both images with podman: evb (Dockerfile: the orderer and the operator) and evb-spark
# (Dockerfile.spark: the Spark job). `make images` runs it.
#
# Base images: python:3.11-slim-bookworm and the apache/spark image named in Dockerfile.spark.
# One that is neither present nor pullable (a host without Docker Hub) is replaced by a stand-in
# made from Debian packages (standin-python.sh, standin-spark.sh; README.md, "Images", says how
# they differ), made once and kept under localhost/evb-standin/.
#
# Environment: EVB_IMAGE / EVB_SPARK_IMAGE (the tags, default evb:0.1.0 / evb-spark:0.1.0, the
# operator's defaults), S3A_JARS (yes|no, default yes: no leaves the Spark image without its
# s3a:// jars, which come from Maven Central), EVB_STANDIN (auto|always: always skips the pull).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
podman="$here/podman.sh"
evb_image="${EVB_IMAGE:-evb:0.1.0}"
spark_job_image="${EVB_SPARK_IMAGE:-evb-spark:0.1.0}"
s3a_jars="${S3A_JARS:-yes}"
standin="${EVB_STANDIN:-auto}"
case "$s3a_jars" in yes|no) ;; *) echo "build.sh: S3A_JARS must be yes or no, not '$s3a_jars'" >&2; exit 2 ;; esac
case "$standin" in auto|always) ;; *) echo "build.sh: EVB_STANDIN must be auto or always, not '$standin'" >&2; exit 2 ;; esac
command -v podman >/dev/null || { echo "build.sh: podman is not installed (tools/system/install.sh installs it)" >&2; exit 2; }

# The default of an ARG in a Dockerfile: the bases are named once, there.
arg_default() {
    sed -n "s/^ARG $1=//p" "$repo/$2" | head -1
}

# Echo the image to build from: the real one when present or pullable, else the stand-in
# (made when missing by the command given after the stand-in's name).
base() {
    local real="$1" standin_name="$2"; shift 2
    if [[ "$standin" == auto ]] && { "$podman" image exists "$real" || "$podman" pull --quiet "$real" >/dev/null 2>&1; }; then
        echo "$real"
        return
    fi
    if ! "$podman" image exists "$standin_name"; then
        echo "build.sh: $real cannot be pulled: making the stand-in $standin_name" >&2
        "$@" >&2
    fi
    echo "$standin_name"
}

python_real="$(arg_default PYTHON_IMAGE Dockerfile)"
spark_real="$(arg_default SPARK_IMAGE Dockerfile.spark)"
spark_version="$(sed -E 's/^[^:]*:([0-9]+\.[0-9]+\.[0-9]+)-.*/\1/' <<<"$spark_real")"
python_base="$(base "$python_real" "localhost/evb-standin/${python_real#*/}" \
    "$here/standin-python.sh" "localhost/evb-standin/${python_real#*/}")"
spark_base="$(base "$spark_real" "localhost/evb-standin/${spark_real#*/}" \
    "$here/standin-spark.sh" "localhost/evb-standin/${spark_real#*/}" "$python_base" "$spark_version")"

build() {
    local started=$SECONDS
    "$podman" build --network=host --build-arg "PYTHON_IMAGE=$python_base" "$@"
    echo "build.sh: $* built in $((SECONDS - started)) s" >&2
}
build -t "$evb_image" -f "$repo/Dockerfile" "$repo"
build --build-arg "SPARK_IMAGE=$spark_base" --build-arg "S3A_JARS=$s3a_jars" \
    -t "$spark_job_image" -f "$repo/Dockerfile.spark" "$repo"
for image in "$evb_image" "$spark_job_image"; do
    size="$("$podman" image inspect --format '{{.Size}}' "$image")"
    echo "build.sh: $image: $((size / 1000000)) MB" >&2
done
