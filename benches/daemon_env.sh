# Sourced by the benches/daemon_*.sh scripts: builds the release binaries, starts airlockd
# with a throwaway config (own state dir, socket and instance uids, a copy of the shipped
# roles with budgets raised so a benchmark is not refused by runs_per_week), and stops it
# when the script exits. Root only (airlockd builds real jails).
#
# After sourcing: $BIN (release binaries), $W (work dir), $CFG, $SOCK, $STATE, $DPID
# (airlockd's pid), ctl (airlockctl with this config), vmhwm_kb/vmrss_kb PID.
# Set INSTANCES (default 10), MAX_RUNS (max_concurrent_runs, default 256), EXTRA_CONFIG (more
# top-level config lines) and BENCH_DIR (default /tmp) before sourcing.

[ "$(id -u)" = 0 ] || { echo "$0: run as root (airlockd builds jails)" >&2; exit 1; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null 2>&1 || { cargo build --release --bins; exit 1; }
  BIN="${CARGO_TARGET_DIR:-$REPO/target}/release"
fi

# BENCH_DIR: where the work dir (and so the state dir: ledger, run dirs, workspace images)
# goes; a file system other than /tmp's shows what the host's own costs (its journal, its
# discard) add to a launch.
W="$(mktemp -d "${BENCH_DIR:-/tmp}/airlock-daemon-bench.XXXXXX")"
chmod 0755 "$W"
CFG="$W/airlock.yaml"
SOCK="$W/airlockd.sock"
STATE="$W/state"
INSTANCES="${INSTANCES:-10}"
# Instance uids 1880091000 and up: clear of the test suites' and benches/jail.sh's.
UID0=1880091000

cp -R "$REPO/roles" "$W/roles"
sed -i 's/^\(  runs_per_week:\) .*/\1 100000/' "$W/roles"/*/role.yaml
{
  echo "roles: [$W/roles]"
  echo "policies: $REPO/policies"
  echo "state_dir: $STATE"
  echo "socket: $SOCK"
  echo "uid_range: $UID0-$((UID0 + 999))"
  echo "max_concurrent_runs: ${MAX_RUNS:-256}"
  echo "grace_seconds: 2"
  [ -n "${EXTRA_CONFIG:-}" ] && printf '%s\n' "$EXTRA_CONFIG"
  echo "instances:"
  for i in $(seq 0 $((INSTANCES - 1))); do
    echo "  b$i: {role: code, uid: $((UID0 + i))}"
  done
} >"$CFG"

ctl() { "$BIN/airlockctl" --config "$CFG" --socket "$SOCK" "$@"; }

stop_daemon() {
  if [ -n "${DPID:-}" ] && kill -0 "$DPID" 2>/dev/null; then
    kill -TERM "$DPID"
    for _ in $(seq 1 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$DPID" 2>/dev/null && kill -KILL "$DPID"
  fi
  rm -rf "$W"
}
trap stop_daemon EXIT

# DAEMON_WRAP: a program to run airlockd under (a profiler); $DPID is then the wrapper.
${DAEMON_WRAP:-} "$BIN/airlockd" --config "$CFG" </dev/null >"$W/airlockd.out" 2>"$W/airlockd.err" &
DPID=$!
for _ in $(seq 1 300); do
  ctl status >/dev/null 2>&1 && break
  kill -0 "$DPID" 2>/dev/null || { echo "$0: airlockd exited:"; cat "$W/airlockd.err"; exit 1; }
  sleep 0.1
done
ctl status >/dev/null || { echo "$0: airlockd never answered status" >&2; cat "$W/airlockd.err"; exit 1; }

vmhwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
vmrss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
