#!/usr/bin/env bash
# A stand-in for python:3.11-slim-bookworm, made from Debian bookworm's own packages, for hosts
# that cannot pull from Docker Hub. Usage: standin-python.sh IMAGE_NAME
#
# How it differs from the real image (README.md, "Images"): Python is Debian's python3.11
# (3.11.2, a release, under /usr/bin) rather than the image's own build of the latest 3.11
# (under /usr/local/bin); `python` and `pip` are linked into /usr/local/bin as there, and pip
# installs system-wide as there (Debian's EXTERNALLY-MANAGED marker is removed). It also carries
# the C headers (python3.11-dev), which the real image has in /usr/local/include.
# HTTPS: where a local CA re-signs HTTPS (EVB_EXTRA_CA_DIR, default /usr/local/share/ca-certificates
# when it holds certificates), those are trusted in the image and pip is told to use the system
# store; a build where HTTPS is not intercepted needs neither.
set -euo pipefail
name="$1"
command -v debootstrap >/dev/null || { echo "standin-python.sh: debootstrap is not installed (tools/system/install.sh installs it)" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
podman="$here/podman.sh"
mirror="${DEBIAN_MIRROR:-$("$here/debian-mirror.sh")}"
extra_ca="${EVB_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"

root="$(mktemp -d /var/tmp/evb-standin-python.XXXXXX)"
trap 'rm -rf "$root" "$root.log"' EXIT
echo "stand-in $name: debootstrap bookworm from $mirror" >&2
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,python3-dev,ca-certificates,netbase,tzdata \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
rm -f "$root"/usr/lib/python3.11/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
ln -sf /usr/bin/python3 "$root/usr/local/bin/python3"
ln -sf /usr/bin/pip3 "$root/usr/local/bin/pip"
if compgen -G "$extra_ca/*.crt" >/dev/null; then
    cp "$extra_ca"/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
fi
# The real image's apt lists are empty: builds run apt-get update first.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | "$podman" import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$name" >/dev/null
echo "stand-in $name: made" >&2
