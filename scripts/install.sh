#!/usr/bin/env bash
# Install Airlock from this checkout: the release binaries, the shipped roles and policies,
# the default config, the systemd units, sysusers.d and tmpfiles.d files.
#
#   cargo build --release && sudo scripts/install.sh [--prefix DIR] [--destdir ROOT]
#                                                     [--target-dir DIR] [--enable]
#
#   --prefix DIR      binaries go to DIR/bin (default /usr/local); the units point there
#   --destdir ROOT    stage everything under ROOT (packaging, tests); runs no systemd tool
#                     that would touch the host and need not be root
#   --target-dir DIR  cargo's target directory (default $CARGO_TARGET_DIR, else ./target)
#   --enable          enable and start airlockd.socket and airlockd.service afterwards
#
# Idempotent. Never overwrites what an operator may have changed: policies and the config
# are installed only when missing; a shipped file that differs from an installed one is
# written next to it as *.new. Roles in /usr/share/airlock/roles are the vendor layer and
# are replaced (operators override in /etc/airlock/roles.local). Units in
# /etc/systemd/system are replaced (customise with drop-ins, `systemctl edit airlockd`).
# Starts nothing unless --enable is given.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
destdir=
target="${CARGO_TARGET_DIR:-$here/target}"
enable=no

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
    --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
    --target-dir) target="${2:?--target-dir needs a directory}"; shift 2 ;;
    --enable) enable=yes; shift ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown option $1" >&2; usage ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be absolute" >&2; exit 2 ;; esac
if [ -n "$destdir" ]; then
  destdir="$(mkdir -p "$destdir" && cd "$destdir" && pwd)"
  [ "$enable" = yes ] && { echo "install.sh: --enable makes no sense with --destdir" >&2; exit 2; }
elif [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (or stage with --destdir ROOT)" >&2
  exit 2
fi

say() { echo "install: $*"; }
root() { echo "$destdir$1"; }

bins=(airlockd airlockctl airlock-jail)
for b in "${bins[@]}"; do
  if [ ! -x "$target/release/$b" ]; then
    echo "install.sh: $target/release/$b is missing; build first: cargo build --release" >&2
    exit 2
  fi
done

# Install $1 to $2 with mode $3, replacing it (vendor files).
put() {
  local src="$1" dst="$2" mode="$3"
  if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
    return 0
  fi
  install -D -m "$mode" "$src" "$dst.tmp.$$"
  mv -f "$dst.tmp.$$" "$dst"
  say "installed $dst"
}

# Install $1 to $2 only when missing; a differing installed file is kept and the shipped
# one goes to $2.new (operator files).
keep() {
  local src="$1" dst="$2" mode="$3"
  if [ ! -e "$dst" ]; then
    install -D -m "$mode" "$src" "$dst"
    say "installed $dst"
  elif cmp -s "$src" "$dst"; then
    rm -f "$dst.new"
  else
    install -D -m "$mode" "$src" "$dst.new"
    say "kept your $dst; the shipped version is $dst.new (diff them)"
  fi
}

# 1. Binaries.
bindir="$(root "$prefix/bin")"
for b in "${bins[@]}"; do
  put "$target/release/$b" "$bindir/$b" 0755
done

# 2. Roles: the vendor layer, replaced as a whole so a role removed upstream goes away.
share="$(root /usr/share/airlock)"
mkdir -p "$share"
stage="$(mktemp -d "$share/.roles.XXXXXX")"
cp -R "$here/roles/." "$stage/"
chmod -R u=rwX,go=rX "$stage"
chmod 0755 "$stage"
if [ -d "$share/roles" ] && diff -r -q "$stage" "$share/roles" >/dev/null 2>&1; then
  rm -rf "$stage"
else
  rm -rf "$share/roles.old"
  [ -d "$share/roles" ] && mv "$share/roles" "$share/roles.old"
  mv "$stage" "$share/roles"
  rm -rf "$share/roles.old"
  say "installed $share/roles"
fi

# 3. Policies and the config: the operator's.
etc="$(root /etc/airlock)"
install -d -m 0755 "$etc" "$etc/policies" "$etc/roles.local"
(cd "$here/policies" && find . -type f -print) | sort | while read -r f; do
  keep "$here/policies/$f" "$etc/policies/${f#./}" 0644
done
config_src="$(mktemp)"
trap 'rm -f "$config_src"' EXIT
# The shipped config, the same file the Debian package installs.
cp "$here/packaging/airlock.yaml" "$config_src"
# Like the policies: an operator's edited config is kept, the shipped one goes beside it.
keep "$config_src" "$etc/airlock.yaml" 0644

# 4. systemd units, pointed at the binaries' real location.
unitdir="$(root /etc/systemd/system)"
mkdir -p "$unitdir"
# systemd 253 and later know Type=notify-reload, which is what airlockd speaks; older ones
# get Type=notify with ExecReload= sending SIGHUP (see the unit's comment).
sysv="$(systemctl --version 2>/dev/null | awk 'NR==1 {print $2}')"
reload_edit=()
if [ "${sysv:-0}" -ge 253 ] 2>/dev/null; then
  reload_edit=(-e 's/^Type=notify$/Type=notify-reload/' -e '/^ExecReload=/d')
fi
for u in airlockd.service airlockd.socket airlock-run@.service; do
  if [ "$u" = airlockd.service ]; then
    sed -e "s#/usr/local/bin/#$prefix/bin/#g" "${reload_edit[@]}" "$here/systemd/$u" >"$config_src.unit"
  else
    sed -e "s#/usr/local/bin/#$prefix/bin/#g" "$here/systemd/$u" >"$config_src.unit"
  fi
  put "$config_src.unit" "$unitdir/$u" 0644
  rm -f "$config_src.unit"
done
put "$here/README.md" "$(root /usr/share/doc/airlock/README.md)" 0644
put "$here/systemd/airlock.sysusers.conf" "$(root /usr/lib/sysusers.d/airlock.conf)" 0644
put "$here/systemd/airlock.tmpfiles.conf" "$(root /usr/lib/tmpfiles.d/airlock.conf)" 0644

if [ -n "$destdir" ]; then
  say "staged under $destdir; groups, directories and systemd are left alone"
  exit 0
fi

# 5. Groups and directories: with systemd's tools when present, by hand otherwise.
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers /usr/lib/sysusers.d/airlock.conf
else
  for g in airlock-admin airlock-operators; do
    getent group "$g" >/dev/null || { groupadd --system "$g"; say "created group $g"; }
  done
fi
if command -v systemd-tmpfiles >/dev/null 2>&1; then
  systemd-tmpfiles --create /usr/lib/tmpfiles.d/airlock.conf
else
  install -d -m 0711 /var/lib/airlock /var/lib/airlock/homes /var/lib/airlock/runs
fi

# 6. Tell systemd, when it is running.
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  if [ "$enable" = yes ]; then
    systemctl enable --now airlockd.socket airlockd.service
    say "enabled and started airlockd"
  fi
else
  [ "$enable" = yes ] && { echo "install.sh: systemd is not running; cannot --enable" >&2; exit 2; }
fi

"$prefix/bin/airlockctl" --config /etc/airlock/airlock.yaml validate >/dev/null \
  && say "airlockctl validate: roles and policies are valid" \
  || say "airlockctl validate found problems: run \`airlockctl validate\`"
[ "$enable" = yes ] || say "done; start with: systemctl enable --now airlockd.socket airlockd.service"
