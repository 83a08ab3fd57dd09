#!/usr/bin/env bash
# Live runs: N runs (default 100) of `sleep` launched detached through one airlockd, over
# INSTANCES instances (default 10), with the default limits (each run on its own bounded
# workspace). Once all N are running (`ps`), samples airlockd's RSS, peak RSS, threads and
# open descriptors; then stops airlockd (it drains: every run stopped and closed) and checks
# the ledger holds an opening and a closing record for each and that its chain is intact.
# Exits non-zero when any run was refused, not seen running, or not closed. Root only.
#   N=1000 bash benches/daemon_live.sh
set -euo pipefail
N="${N:-100}"
PARALLEL="${PARALLEL:-8}"
MAX_RUNS=$((N + 16))
source "$(dirname "$0")/daemon_env.sh"

fail() { echo "daemon_live: FAILED: $*" >&2; exit 1; }
threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }

rss0="$(vmrss_kb "$DPID")"; thr0="$(threads "$DPID")"; fd0="$(fds "$DPID")"
mkdir -p "$W/ids"
t0="$(date +%s%N)"
# Launched detached, PARALLEL at a time; each prints its run id.
seq 1 "$N" | xargs -P "$PARALLEL" -I{} sh -c \
  "'$BIN/airlockctl' --config '$CFG' --socket '$SOCK' launch code --instance b\$(({} % $INSTANCES)) -- /bin/sleep 3600 >'$W/ids/{}' 2>'$W/ids/{}.err' || true"
t1="$(date +%s%N)"
refused=0
for i in $(seq 1 "$N"); do [ -s "$W/ids/$i" ] || refused=$((refused + 1)); done
if [ "$refused" -ne 0 ]; then
  for f in "$W"/ids/*.err; do [ -s "$f" ] && { cat "$f" >&2; break; }; done
  fail "$refused of $N launches were refused"
fi
running=0
for _ in $(seq 1 120); do
  running="$(ctl ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')"
  [ "$running" -ge "$N" ] && break
  sleep 1
done
[ "$running" -ge "$N" ] || fail "only $running of $N runs were seen running"
sleep 2
rss="$(vmrss_kb "$DPID")"; hwm="$(vmhwm_kb "$DPID")"; thr="$(threads "$DPID")"; fd="$(fds "$DPID")"

t2="$(date +%s%N)"
kill -TERM "$DPID"
for _ in $(seq 1 1200); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$DPID" 2>/dev/null && fail "airlockd did not finish draining $N runs in 120 s"
t3="$(date +%s%N)"
opened="$(grep -c '"kind":"run_opened"' "$STATE/ledger.jsonl" || true)"
closed="$(grep -c '"kind":"run_closed"' "$STATE/ledger.jsonl" || true)"
"$BIN/airlockctl" verify-ledger --ledger "$STATE/ledger.jsonl" >/dev/null && chain=intact || chain=BROKEN

echo "daemon_live: $N live runs (sleep) over $INSTANCES instances, default limits"
echo "  launched in:          $(( (t1 - t0) / 1000000 )) ms ($PARALLEL at a time)"
echo "  airlockd idle:        RSS $rss0 kB, $thr0 threads, $fd0 fds"
echo "  with $N live:         RSS $rss kB (peak $hwm kB), $thr threads, $fd fds"
echo "  per run:              $(( (rss - rss0) / N )) kB RSS, $(python3 -c "print(round(($thr - $thr0) / $N, 2))") threads, $(python3 -c "print(round(($fd - $fd0) / $N, 2))") fds"
echo "  drained in:           $(( (t3 - t2) / 1000000 )) ms"
echo "  ledger:               $opened opened, $closed closed (chain $chain)"
[ "$opened" -eq "$N" ] && [ "$closed" -eq "$N" ] && [ "$chain" = intact ] \
  || fail "the ledger does not hold every run opened and closed"
