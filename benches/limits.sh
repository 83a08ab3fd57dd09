#!/usr/bin/env bash
# Limits: does airlockd stay responsive while runs take every CPU, and what does the disk
# bound add to a launch?
#
# 1. `airlockctl status` latency (p50, p99 of N calls, default 200) on an idle host, then
#    with two CPU-bound runs (a busy shell loop each) going on this host's cores.
# 2. `airlockctl launch --wait -- /bin/true` latency (p50, p99 of M sequential launches,
#    default 30) with the disk bounds on (the defaults: a workspace image per run, the
#    home's image) and off (limits.workspace and limits.home null), side by side.
#
# Root only (airlockd builds real jails). BIN: where airlockd and airlockctl are (default:
# the release build, built if missing).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "$0: run as root (airlockd builds jails)" >&2; exit 1; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${N:-200}"
M="${M:-30}"
if [ -z "${BIN:-}" ]; then
  # AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
  if [ -n "${AIRLOCK_BIN:-}" ]; then
    BIN="$AIRLOCK_BIN"
  else
    (cd "$REPO" && cargo build --release --bins >/dev/null 2>&1) || (cd "$REPO" && cargo build --release --bins)
    BIN="${CARGO_TARGET_DIR:-$REPO/target}/release"
  fi
fi

W="$(mktemp -d /tmp/airlock-limits-bench.XXXXXX)"
chmod 0755 "$W"
SOCK="$W/airlockd.sock"
# Instance uids 1880092000 and up: clear of the tests' and the other benches'.
UID0=1880092000
cp -R "$REPO/roles" "$W/roles"
sed -i 's/^\(  runs_per_week:\) .*/\1 100000/' "$W/roles"/*/role.yaml
DPID=""

config() { # $1: file, $2: state dir, $3: more limits
  cat >"$1" <<YAML
roles: [$W/roles]
policies: $REPO/policies
state_dir: $2
socket: $SOCK
uid_range: $UID0-$((UID0 + 99))
grace_seconds: 1
limits: {max_procs: 64$3}
instances:
  b0: {role: code, uid: $UID0}
  b1: {role: code, uid: $((UID0 + 1))}
YAML
}

stop_daemon() {
  if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
    kill -TERM "$DPID"
    for _ in $(seq 1 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$DPID" 2>/dev/null && kill -KILL "$DPID"
  fi
  DPID=""
}
trap 'stop_daemon; rm -rf "$W"' EXIT

start_daemon() { # $1: config
  CFG="$1"
  "$BIN/airlockd" --config "$CFG" </dev/null >"$W/airlockd.out" 2>>"$W/airlockd.err" &
  DPID=$!
  for _ in $(seq 1 300); do
    ctl status >/dev/null 2>&1 && return 0
    kill -0 "$DPID" 2>/dev/null || { echo "$0: airlockd exited:"; cat "$W/airlockd.err"; exit 1; }
    sleep 0.1
  done
  echo "$0: airlockd never answered" >&2
  exit 1
}

ctl() { "$BIN/airlockctl" --config "$CFG" --socket "$SOCK" "$@"; }

# p50 and p99 (in ms) of microsecond figures on stdin.
pct() {
  sort -n | awk '{v[NR]=$1} END {
    p50=v[int((NR+1)*0.50)]; i=int(NR*0.99+0.999); if (i>NR) i=NR; p99=v[i];
    printf "p50 %.2f ms, p99 %.2f ms (n=%d)", p50/1000, p99/1000, NR }'
}

time_us() { # the command's wall time in microseconds; its output dropped
  local t0 t1
  t0="$(date +%s%N)"
  "$@" >/dev/null 2>&1 || true
  t1="$(date +%s%N)"
  echo $(((t1 - t0) / 1000))
}

status_latency() {
  for _ in $(seq 1 "$N"); do time_us ctl status; done | pct
}

config "$W/on.yaml" "$W/state-on" ""
start_daemon "$W/on.yaml"
for _ in 1 2 3; do ctl launch --wait code --instance b0 -- /bin/true >/dev/null 2>&1; done

echo "host: $(nproc) CPUs, $(uname -r); binaries: $BIN"
echo "status, idle:              $(status_latency)"
busy=()
for i in 0 1; do
  busy+=("$(ctl launch code --instance "b$i" --max-seconds 300 -- /bin/sh -c 'while :; do :; done')")
done
# Both spinning before measuring.
for _ in $(seq 1 100); do
  [ "$(ctl ps 2>/dev/null | grep -c running || true)" -ge 2 ] && break
  sleep 0.1
done
sleep 1
echo "status, 2 CPU-bound runs:  $(status_latency)"
for r in "${busy[@]}"; do ctl stop "$r" >/dev/null 2>&1 || true; done
for _ in $(seq 1 100); do
  [ "$(ctl ps 2>/dev/null | grep -c running || true)" -eq 0 ] && break
  sleep 0.1
done

launch_latency() {
  for _ in $(seq 1 "$M"); do time_us ctl launch --wait code --instance b0 -- /bin/true; done | pct
}
echo "launch --wait, disk bound on:   $(launch_latency)"
stop_daemon
config "$W/off.yaml" "$W/state-off" ", workspace: null, home: null"
start_daemon "$W/off.yaml"
for _ in 1 2 3; do ctl launch --wait code --instance b0 -- /bin/true >/dev/null 2>&1; done
echo "launch --wait, disk bound off:  $(launch_latency)"
left="$(losetup -l -n -O BACK-FILE 2>/dev/null | grep -c "$W" || true)"
echo "loop devices left on $W: $left"
