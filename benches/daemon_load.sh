#!/usr/bin/env bash
# Load: N runs (default 100) of /bin/true launched at once through airlockd, spread over
# INSTANCES instances (default 10), each `airlockctl launch --wait code --instance bI -- /bin/true`.
# Checks every run exited 0 and that the ledger holds a run_closed record for each, then
# reports airlockd's peak RSS (VmHWM) and the launch latency (whole `launch --wait` round
# trip per client, measured by each client) p50, p99 and max. Root only.
set -euo pipefail
N="${N:-100}"
source "$(dirname "$0")/daemon_env.sh"

hwm_before="$(vmhwm_kb "$DPID")"
closed_before="$(grep -c '"kind":"run_closed"' "$STATE/ledger.jsonl" 2>/dev/null || true)"
mkdir -p "$W/lat"
start_all="$(date +%s%N)"
clients=()
for i in $(seq 1 "$N"); do
  (
    t0="$(date +%s%N)"
    code=0
    ctl launch --wait code --instance "b$((i % INSTANCES))" -- /bin/true \
      >/dev/null 2>"$W/lat/$i.err" || code=$?
    t1="$(date +%s%N)"
    echo "$(( (t1 - t0) / 1000 )) $code" >"$W/lat/$i.t"
  ) &
  clients+=($!)
done
# Only the clients: airlockd is a child of this shell too.
wait "${clients[@]}"
end_all="$(date +%s%N)"

failed="$(awk '$2 != 0' "$W"/lat/*.t | wc -l)"
if [ "$failed" -ne 0 ]; then
  echo "daemon_load: $failed of $N runs did not exit 0; first error:" >&2
  for f in "$W"/lat/*.err; do [ -s "$f" ] && { cat "$f" >&2; break; }; done
fi
# The ledger is fsync'd before the exit frame is sent, so every record is there now.
closed="$(grep -c '"kind":"run_closed"' "$STATE/ledger.jsonl" || true)"
recorded=$((closed - closed_before))
"$BIN/airlockctl" verify-ledger --ledger "$STATE/ledger.jsonl" >/dev/null \
  && chain=intact || chain=BROKEN

sort -n "$W"/lat/*.t | awk '{print $1}' >"$W/sorted"
pct() { awk -v p="$1" '{a[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; printf "%.1f", a[i]/1000}' "$W/sorted"; }
echo "daemon_load: $N runs at once over $INSTANCES instances"
echo "  completed with exit 0:  $((N - failed)) / $N"
echo "  run_closed in ledger:   $recorded / $N (chain $chain)"
echo "  wall time:              $(( (end_all - start_all) / 1000000 )) ms"
echo "  launch --wait latency:  p50 $(pct 50) ms, p99 $(pct 99) ms, max $(pct 100) ms"
echo "  airlockd VmHWM:         before $hwm_before kB, after $(vmhwm_kb "$DPID") kB"
[ "$failed" -eq 0 ] && [ "$recorded" -eq "$N" ] && [ "$chain" = intact ]
