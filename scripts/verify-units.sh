#!/usr/bin/env bash
# Check the systemd units with `systemd-analyze verify` as they are installed: stage an
# install (scripts/install.sh --destdir) into a temporary root that also holds a copy of the
# host's own units (so targets like sysinit.target resolve), add a timer written by
# `airlockctl timers`, and verify every Airlock unit there. Needs `cargo build --release`.
# Exit 0 when systemd-analyze reports nothing, 1 otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$here/target}"

if [ ! -x "$target/release/airlockctl" ]; then
  (cd "$here" && cargo build --release --bins)
fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

"$here/scripts/install.sh" --destdir "$root" --target-dir "$target" >/dev/null
mkdir -p "$root/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
# Commands the units run besides Airlock's own, where a merged-/usr host has them.
mkdir -p "$root/usr/bin"
ln -s usr/bin "$root/bin"
cp /bin/kill "$root/usr/bin/kill"

# A hired instance of a scheduled role, to verify a generated timer and drop-in too.
cat >"$root/etc/airlock/test.yaml" <<YAML
roles: [$root/usr/share/airlock/roles]
policies: $root/etc/airlock/policies
state_dir: $root/var/lib/airlock
socket: $root/run/airlock/airlockd.sock
instances:
  ratchet: {role: test-coverage-ratchet}
YAML
"$target/release/airlockctl" --config "$root/etc/airlock/test.yaml" timers \
  --output "$root/etc/systemd/system" >/dev/null
[ -f "$root/etc/systemd/system/airlock-run@ratchet.timer" ] \
  || { echo "verify-units: airlockctl timers wrote no timer" >&2; exit 1; }

units=(airlockd.service airlockd.socket airlock-run@ratchet.service airlock-run@ratchet.timer)
paths=()
for u in "${units[@]}"; do
  case "$u" in
    # A template instance is verified through its template file plus drop-in.
    airlock-run@ratchet.service) paths+=("$root/etc/systemd/system/airlock-run@.service") ;;
    *) paths+=("$root/etc/systemd/system/$u") ;;
  esac
done
out="$(systemd-analyze --root="$root" verify "${paths[@]}" 2>&1 || true)"
if [ -n "$out" ]; then
  echo "$out"
  echo "verify-units: systemd-analyze reported problems" >&2
  exit 1
fi
echo "verify-units: clean: ${units[*]} ($(systemctl --version | head -1))"
