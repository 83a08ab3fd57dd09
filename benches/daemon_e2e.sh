#!/usr/bin/env bash
# End to end, side by side (hyperfine): `airlockctl launch --wait code --instance b0 --
# /bin/true` through a running airlockd, against a bare bubblewrap run of /bin/true with
# every namespace unshared. Reports both medians and the ratio (target: within 2x).
# RUNS (default 50) per command. Root only.
set -euo pipefail
RUNS="${RUNS:-50}"
INSTANCES=1
need() {
  command -v "$1" >/dev/null && return 0
  apt-get install -y "$2" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$2" >/dev/null; }
}
need bwrap bubblewrap
need hyperfine hyperfine
source "$(dirname "$0")/daemon_env.sh"

bwrap_cmd="bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true"
daemon_cmd="$BIN/airlockctl --config $CFG --socket $SOCK launch --wait code --instance b0 -- /bin/true"
# Both must work before they are timed.
$bwrap_cmd
$daemon_cmd >/dev/null 2>&1 || { echo "daemon_e2e: the daemon launch fails:" >&2; $daemon_cmd; exit 1; }

hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$W/h.json" \
  -n "airlockd launch --wait" "$daemon_cmd" \
  -n "bwrap /bin/true" "$bwrap_cmd"

python3 - "$W/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
d = r["airlockd launch --wait"]["median"] * 1000
b = r["bwrap /bin/true"]["median"] * 1000
print(f"daemon_e2e: median airlockd launch --wait {d:.2f} ms, bwrap {b:.2f} ms, ratio {d / b:.2f}x (target <= 2x)")
PY
echo "  airlockd VmHWM after: $(vmhwm_kb "$DPID") kB"
