#!/usr/bin/env bash
# podman as the image builds and tests/system run it: one place for the host's quirks.
# - runc when it is installed: crun fails on hosts with cgroups in hybrid mode ("cgroups in hybrid
#   mode not supported"); EVB_OCI_RUNTIME names another runtime, or "default" for podman's own.
# - tools/images/containers.conf (no default ulimits) unless CONTAINERS_CONF is set.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
runtime="${EVB_OCI_RUNTIME:-}"
if [[ -z "$runtime" ]]; then
    runtime="$(command -v runc || true)"
fi
if [[ -n "$runtime" && "$runtime" != default ]]; then
    exec podman --runtime "$runtime" "$@"
fi
exec podman "$@"
