#!/usr/bin/env bash
# The Debian mirror this host's apt uses (deb822 or one-line sources), for debootstrap;
# http://deb.debian.org/debian when none is found.
set -euo pipefail
found="$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | grep -oE '(https?://[^ ]+/debian)/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)"
echo "${found:-http://deb.debian.org/debian}"
