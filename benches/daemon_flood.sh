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
ms=$(( (t1 - t0) / 1000000 ))
echo "daemon_flood: one run printing $LINES_N lines ($MODE), run $run, exit $code"
echo "  run time (launch --wait): $ms ms, $(( LINES_N * 1000 / (ms > 0 ? ms : 1) )) lines/s"
echo "  lines streamed to client: $client_lines"
echo "  stdout records: journald $journal + fallback file $fallback = $total"
echo "  lines lost:               $lost"
echo "  airlockd VmHWM:           before $hwm_before kB, after $hwm_after kB (VmRSS before $rss_before kB)"
# The floor: journald itself taking the same number of records, each with the fields of a
# run's output line, from one writer on its native socket (a blocking sender goes as
# fast as journald takes them), in the same run.
if [ "$MODE" = journald ] && [ "${BASELINE:-1}" = 1 ]; then
  python3 - "$LINES_N" <<'PY'
import os, socket, sys, time
n = int(sys.argv[1])
tag = f"airlock-flood-base-{os.getpid()}"
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect("/run/systemd/journal/socket")
head = (f"PRIORITY=6\nSYSLOG_IDENTIFIER={tag}\nAIRLOCK_ROLE=code\nAIRLOCK_STREAM=stdout\n"
        f"AIRLOCK_INSTANCE=b0\nAIRLOCK_RUN={tag}\n").encode()
t = time.perf_counter()
for i in range(1, n + 1):
    s.send(head + f"AIRLOCK_SEQ={i}\nAIRLOCK_TIME_US={time.time_ns() // 1000}\nMESSAGE={i}\n".encode())
secs = time.perf_counter() - t
print(f"  journald alone (one native writer, same fields): {n} records in {secs * 1000:.0f} ms, {n / secs:.0f} records/s")
PY
fi
if [ "$lost" -ne 0 ] || [ "$code" -ne 0 ]; then
  echo "daemon_flood: FAILED: $lost lines lost, run exit $code" >&2
  exit 1
fi
