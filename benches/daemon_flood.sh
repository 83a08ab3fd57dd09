#!/usr/bin/env bash
# Flood: one run printing LINES lines (default 1,000,000) through airlockd. Counts the run's
# stdout records in journald (`journalctl AIRLOCK_RUN=<id> AIRLOCK_STREAM=stdout`, polled
# until the count stops growing) plus any in the run's fallback file, and reports lines lost
# (must be 0) and airlockd's VmHWM before and after. MODE=fallback points airlockd at a
# missing journald socket so every record goes to the fallback file. Root only.
set -euo pipefail
LINES_N="${LINES:-1000000}"
MODE="${MODE:-journald}"
INSTANCES=1
if [ "$MODE" = fallback ]; then
  EXTRA_CONFIG="journal_socket: /nonexistent/airlock-bench-no-journald"
fi
source "$(dirname "$0")/daemon_env.sh"
if [ "$MODE" = journald ]; then
  [ -S /run/systemd/journal/socket ] || "$REPO/scripts/start-journald.sh"
fi

hwm_before="$(vmhwm_kb "$DPID")"
rss_before="$(vmrss_kb "$DPID")"
t0="$(date +%s%N)"
code=0
# seq is the run's agent program itself: the agent side starts no other program.
ctl launch --wait code --instance b0 -- /usr/bin/seq 1 "$LINES_N" \
  >"$W/client.out" 2>"$W/client.err" || code=$?
t1="$(date +%s%N)"
run="$(head -n1 "$W/client.err")"
hwm_after="$(vmhwm_kb "$DPID")"
client_lines="$(wc -l <"$W/client.out")"
[ "$code" -eq 0 ] || { echo "daemon_flood: run exited $code:" >&2; cat "$W/client.err" >&2; }

fallback_file="$STATE/journal/$run.journal"
count_fallback() {
  [ -f "$fallback_file" ] || { echo 0; return; }
  # One JSON object per record (src/journal/fallback.rs).
  grep -a -c '"AIRLOCK_STREAM":"stdout"' "$fallback_file" || true
}
count_journal() {
  journalctl --no-pager -q "AIRLOCK_RUN=$run" AIRLOCK_STREAM=stdout _UID=0 -o cat 2>/dev/null | wc -l
}
# journald indexes asynchronously: poll until the count stops growing (bounded).
journal=0
if [ "$MODE" = journald ]; then
  stable=0
  for _ in $(seq 1 120); do
    now="$(count_journal)"
    if [ "$now" -eq "$journal" ]; then stable=$((stable + 1)); else stable=0; fi
    journal="$now"
    [ "$journal" -ge "$LINES_N" ] && break
    [ "$stable" -ge 5 ] && break
    sleep 1
  done
fi
fallback="$(count_fallback)"
total=$((journal + fallback))
lost=$((LINES_N - total))
echo "daemon_flood: one run printing $LINES_N lines ($MODE), run $run, exit $code"
echo "  run time (launch --wait): $(( (t1 - t0) / 1000000 )) ms"
echo "  lines streamed to client: $client_lines"
echo "  stdout records: journald $journal + fallback file $fallback = $total"
echo "  lines lost:               $lost"
echo "  airlockd VmHWM:           before $hwm_before kB, after $hwm_after kB (VmRSS before $rss_before kB)"
if [ "$lost" -ne 0 ] || [ "$code" -ne 0 ]; then
  echo "daemon_flood: FAILED: $lost lines lost, run exit $code" >&2
  exit 1
fi
