#!/usr/bin/env bash
# What `make system` needs on a Debian or Ubuntu host, installed as root (.ci/run calls it):
# podman and runc (the image builds and containers), debootstrap (the stand-in base images when
# Docker Hub cannot be reached), prometheus (its promtool and server for the alert tests),
# chromium (headless: the live page in a real browser).
# podman's settings are the project's own (tools/images/containers.conf, used by
# tools/images/podman.sh): nothing under /etc/containers is changed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ "$(id -u)" != 0 ]]; then
    echo "install.sh: run as root (apt-get install)" >&2
    exit 2
fi
packages=(podman runc debootstrap prometheus chromium)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
# The distribution's prometheus package starts a server on :9090 at install; the tests start
# their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus
fi
"$repo/tools/images/podman.sh" info --format '{{.Host.OCIRuntime.Name}}' >/dev/null
echo "install.sh: ${packages[*]} ready"
