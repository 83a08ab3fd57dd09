#!/usr/bin/env bash
# Install pinned npm packages into a root-owned directory that every jail can read.
# Idempotent: a package already at its pinned version is left alone.
#
#   scripts/npm-pins.sh [--ignore-scripts] DIR NAME@VERSION...
set -euo pipefail
flags=()
[ "${1:-}" = --ignore-scripts ] && { flags+=(--ignore-scripts); shift; }
dir="$1"; shift
missing=()
for pin in "$@"; do
  name="${pin%@*}"
  version="${pin##*@}"
  have=$(node -p "require('$dir/node_modules/$name/package.json').version" 2>/dev/null || true)
  [ "$have" = "$version" ] || missing+=("$pin")
done
[ ${#missing[@]} -gt 0 ] || exit 0
command -v npm >/dev/null || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
}
echo "npm-pins: installing ${missing[*]} under $dir"
install -d -m 0755 -o root -g root "$dir"
(cd "$dir" && npm install --no-audit --no-fund --loglevel=error "${flags[@]}" "${missing[@]}" >/dev/null)
