#!/usr/bin/env bash
# A/B, interleaved launch by launch: two builds' airlockd side by side (BIN_A, BIN_B: dirs
# holding airlockd, airlockctl and airlock-jail; each daemon with its own state, socket
# and instance uids), and bubblewrap's bare sandbox as the reference. On a shared host
# whose load changes by the second, comparing runs taken minutes apart measures the load;
# taking the three commands in turn, one launch each, gives each the same load.
#
#   seq:   N rounds (default 100), each one `launch --wait code -- /bin/true` through A,
#          one through B and one bwrap run, in a rotating order: wall p50/p90 of each, and
#          CPU per launch of each daemon (airlockd and everything it reaped).
#   burst: ROUNDS rounds (default 3) of BURST launches at once (default 100) through A,
#          then through B (order alternating): each client's latency p50/p99. A launch
#          that fails (here or in seq) ends the script non-zero, with no figure for it.
# CONFIG_A, CONFIG_B: more top-level config lines for that side's daemon (for example
# "warm: {code: 8}"), to compare one build under two configs (BIN_A = BIN_B). SETTLE
# (default 5): seconds waited after the first runs, before anything is timed. DAEMON_WRAP:
# a program each airlockd runs under (as in daemon_env.sh).
# Root only.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "$0: run as root (airlockd builds jails)" >&2; exit 1; }
: "${BIN_A:?set BIN_A to the first build's binaries}" "${BIN_B:?set BIN_B to the second build's binaries}"
N="${N:-100}"
ROUNDS="${ROUNDS:-3}"
BURST="${BURST:-100}"
INSTANCES="${INSTANCES:-10}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v bwrap >/dev/null || apt-get install -y bubblewrap >/dev/null
W="$(mktemp -d /tmp/airlock-ab.XXXXXX)"
chmod 0755 "$W"
PIDS=()

# start NAME BIN UID0: a daemon with its own config under $W/NAME.
start() {
  local name="$1" bin="$2" uid0="$3" extra="$4" d="$W/$1"
  mkdir -p "$d"
  cp -R "$REPO/roles" "$d/roles"
  sed -i 's/^\(  runs_per_week:\) .*/\1 100000/' "$d"/roles/*/role.yaml
  {
    echo "roles: [$d/roles]"
    echo "policies: $REPO/policies"
    echo "state_dir: $d/state"
    echo "socket: $d/sock"
    echo "uid_range: $uid0-$((uid0 + 999))"
    echo "max_concurrent_runs: 256"
    echo "grace_seconds: 2"
    [ -n "$extra" ] && printf '%s\n' "$extra"
    echo "instances:"
    for i in $(seq 0 $((INSTANCES - 1))); do
      echo "  b$i: {role: code, uid: $((uid0 + i))}"
    done
  } >"$d/airlock.yaml"
  ${DAEMON_WRAP:-} "$bin/airlockd" --config "$d/airlock.yaml" </dev/null >"$d/out" 2>"$d/err" &
  PIDS+=($!)
  echo $! >"$d/pid"
  for _ in $(seq 1 300); do
    "$bin/airlockctl" --config "$d/airlock.yaml" --socket "$d/sock" status >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$0: airlockd $name never answered" >&2
  cat "$d/err" >&2
  exit 1
}
stop() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$W"
}
trap stop EXIT
# Clear of the other benches' and the test suites' uids.
start a "$BIN_A" 1880093000 "${CONFIG_A:-}"
start b "$BIN_B" 1880094000 "${CONFIG_B:-}"

ctl() { local n="$1" bin="$2"; shift 2; "$bin/airlockctl" --config "$W/$n/airlock.yaml" --socket "$W/$n/sock" "$@"; }
cpu() { awk '{print $14 + $15 + $16 + $17}' "/proc/$(cat "$W/$1/pid")/stat"; }
now() { date +%s%N; }
bwrap_true() {
  bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --ro-bind /usr /usr \
    --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc \
    --dev /dev /bin/true
}
# A launch's error output is kept, to be shown when it fails.
one() {
  case "$1" in
    a) ctl a "$BIN_A" launch --wait code --instance b0 -- /bin/true >/dev/null 2>"$W/one.err" ;;
    b) ctl b "$BIN_B" launch --wait code --instance b0 -- /bin/true >/dev/null 2>"$W/one.err" ;;
    bwrap) bwrap_true 2>"$W/one.err" ;;
  esac || { echo "$0: a $1 launch failed:" >&2; cat "$W/one.err" >&2; return 1; }
}
# Both must work before they are timed, and the first runs (role frozen, homes made) are
# not counted.
for _ in 1 2 3; do one a; one b; one bwrap; done
# Warm jails (CONFIG_*: warm) are built under SCHED_IDLE: on a busy host the pool takes a
# while to fill, and what it builds meanwhile is not a launch's cost.
sleep "${SETTLE:-5}"

pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; printf "%.2f", a[i]/1000}'; }
sleep 1
ca0="$(cpu a)"; cb0="$(cpu b)"
orders=("a b bwrap" "b bwrap a" "bwrap a b")
for i in $(seq 1 "$N"); do
  for which in ${orders[$((i % 3))]}; do
    t0="$(now)"
    one "$which" || exit 1
    t1="$(now)"
    echo $(((t1 - t0) / 1000)) >>"$W/seq.$which"
  done
done
sleep 2
ca1="$(cpu a)"; cb1="$(cpu b)"
hz="$(getconf CLK_TCK)"
echo "launch_ab seq: $N rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in a b bwrap; do
  line="  $w: wall p50 $(pct "$W/seq.$w" 50) ms, p90 $(pct "$W/seq.$w" 90) ms"
  case "$w" in
    a) line="$line, CPU per launch $(awk -v c="$((ca1 - ca0))" -v h="$hz" -v n="$N" 'BEGIN {printf "%.1f", c / h / n * 1000}') ms" ;;
    b) line="$line, CPU per launch $(awk -v c="$((cb1 - cb0))" -v h="$hz" -v n="$N" 'BEGIN {printf "%.1f", c / h / n * 1000}') ms" ;;
  esac
  echo "$line"
done

burst() {
  local n="$1" bin="$2" r="$3" out="$W/burst.$1.$3"
  mkdir -p "$out"
  local clients=()
  for i in $(seq 1 "$BURST"); do
    (
      t0="$(now)"
      code=0
      ctl "$n" "$bin" launch --wait code --instance "b$((i % INSTANCES))" -- /bin/true >/dev/null 2>&1 || code=$?
      t1="$(now)"
      echo "$(((t1 - t0) / 1000)) $code" >"$out/$i"
    ) &
    clients+=($!)
  done
  wait "${clients[@]}"
  cat "$out"/* >"$out.all"
  awk '{print $1}' "$out.all" >"$out.lat"
  local failed
  failed="$(awk '$2 != 0' "$out.all" | wc -l)"
  # A round with a failed launch measures the failure, not a launch: no figure for it.
  if [ "$failed" != 0 ]; then
    echo "$0: round $r $n: $failed of $BURST launches failed" >&2
    exit 1
  fi
  echo "  round $r $n: $BURST at once, $((BURST - failed)) exited 0, p50 $(pct "$out.lat" 50) ms, p99 $(pct "$out.lat" 99) ms (load $(cut -d' ' -f1 /proc/loadavg))"
}
echo "launch_ab burst: $ROUNDS rounds of $BURST at once"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    burst a "$BIN_A" "$r"; sleep 2; burst b "$BIN_B" "$r"
  else
    burst b "$BIN_B" "$r"; sleep 2; burst a "$BIN_A" "$r"
  fi
  sleep 2
done
