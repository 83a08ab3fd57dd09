#!/usr/bin/env bash
# Install what Airlock's build, tests and benchmarks need on a fresh Debian host.
# Idempotent: installs only what is missing. Run as root.
set -euo pipefail

need=()
# systemd-journald: the tests read a real journal; passwd: the setuid escape test;
# iproute2: network namespace checks; procps: pgrep in scripts;
# bubblewrap and hyperfine: the side-by-side benchmarks.
for pkg in systemd passwd iproute2 procps util-linux bubblewrap hyperfine; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
