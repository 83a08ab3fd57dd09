#!/usr/bin/env bash
# Install the tools CI's packaging, dependency and manual checks need: lintian and man-db
# (Debian), cargo-deb, cargo-deny, cargo-audit, mdbook and mdbook-linkcheck (crates.io, built
# with `cargo install --locked` at pinned versions, since neither Debian nor any reachable
# registry ships them prebuilt). mdbook stays on 0.4: mdbook-linkcheck speaks its renderer
# interface, not 0.5's.
# Idempotent and quick when everything is there: a tool already at its pinned version is
# left alone. The first run on a fresh machine compiles the cargo tools (minutes).
#
#   scripts/install-tools.sh [--fuzz]    --fuzz also installs cargo-fuzz (not needed by CI)
set -euo pipefail

fuzz=no
[ "${1:-}" = --fuzz ] && fuzz=yes

need=()
# zsh and fish: scripts/package-test loads the completions in each shell.
for pkg in lintian man-db dpkg-dev fakeroot zsh fish; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "install-tools: need root to apt-get install ${need[*]}" >&2; exit 1; }
  echo "install-tools: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# name version (the version `NAME --version` prints, second word).
pins=(
  "cargo-deb 3.8.0"
  "cargo-deny 0.20.2"
  "cargo-audit 0.22.2"
  "mdbook 0.4.52"
  "mdbook-linkcheck 0.7.7"
)
[ "$fuzz" = yes ] && pins+=("cargo-fuzz 0.13.2")

for pin in "${pins[@]}"; do
  name="${pin% *}"
  version="${pin#* }"
  # `cargo deb --version` prints "cargo-deb 3.8.0", `mdbook --version` "mdbook v0.4.52".
  case "$name" in
    cargo-*) have="$(cargo "${name#cargo-}" --version 2>/dev/null | awk '{print $2}' || true)" ;;
    *) have="$("$name" --version 2>/dev/null | awk '{print $2}' || true)" ;;
  esac
  have="${have#v}"
  if [ "$have" != "$version" ]; then
    echo "install-tools: building $name $version (cargo install; takes a few minutes once)"
    # Low priority: the machine is shared. A quick, unoptimised-enough build: these tools
    # run for a second or two, so LTO and full optimisation would only cost compile time.
    CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
      CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
      nice -n 10 cargo install --quiet --locked "$name" --version "=$version"
  fi
done
