# Shared by tests/host/image.sh and tests/host/run-vm.sh (sourced, not run).
#
# The Debian mirror is never named here: it is read from this machine's own apt sources,
# so the harness uses whatever mirror the host is configured for.

say() { echo "host-vm: $*" >&2; }
die() { echo "host-vm: FAIL: $*" >&2; exit 1; }

# The URI of the host's apt source that serves SUITE (default bookworm), from deb822
# .sources files or one-line sources.list entries.
mirror_uri() {
  local suite="${1:-bookworm}" f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # A stanza is a block of lines; take the URIs of a stanza whose Suites name SUITE.
    uri="$(awk -v s="$suite" '
      /^[[:space:]]*$/ { u = ""; found = 0; next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) found = 1 }
      found && u != "" { print u; exit }' "$f")"
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri="$(awk -v s="$suite" '
      $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                    if ($(i+1) == s) { print $i; exit } }' "$f")"
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done
  return 1
}

# A private apt configuration (own sources, lists and cache under DIR) that also reaches
# bookworm-backports on the host's mirror, without touching the host's own sources.
# Prints the apt options to pass.
private_apt() {
  local dir="$1" main sec
  main="$(mirror_uri bookworm)" || die "no bookworm source in /etc/apt: cannot find the Debian mirror"
  sec="$(mirror_uri bookworm-security || true)"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  {
    echo "deb $main bookworm main"
    echo "deb $main bookworm-updates main"
    echo "deb $main bookworm-backports main"
    [ -n "$sec" ] && echo "deb $sec bookworm-security main"
  } >"$dir/sources.list"
  echo "-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/nonexistent" \
    "-o Dir::State::Lists=$dir/lists -o Dir::Cache=$dir/cache"
}

# Install on this machine the Debian packages the harness needs, when missing. qemu-utils
# may already be the bookworm-backports one (it Breaks bookworm's qemu-system-common): then
# qemu-system-x86 comes from bookworm-backports too, through a private apt configuration.
host_deps() {
  local need=() pkg opts
  for pkg in debootstrap qemu-system-x86 qemu-utils e2fsprogs; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/tmp/host-vm-apt.log 2>&1; then
    say "plain install failed ($(grep '^E:' /tmp/host-vm-apt.log | head -1)); trying bookworm-backports"
    opts="$(private_apt "${AIRLOCK_VM_CACHE:-/var/cache/airlock-ci/vm}/host-apt")"
    # shellcheck disable=SC2086
    apt-get $opts update -qq
    # shellcheck disable=SC2086
    apt-get $opts install -y -qq --no-install-recommends -t bookworm-backports "${need[@]}" \
      >/tmp/host-vm-apt.log 2>&1 || { cat /tmp/host-vm-apt.log >&2; die "cannot install ${need[*]}"; }
  fi
}

VM_CACHE="${AIRLOCK_VM_CACHE:-/var/cache/airlock-ci/vm}"
