#!/usr/bin/env bash
# Soak: N short runs (default 10000) through one airlockd (release build, as root), the
# first half one at a time and the second PARALLEL (default 8) at a time. Runs alternate
# between the agent side alone (`/bin/true`) and a scripted agent
# (benches/agents/soak_agent.py) that makes one model request (the stand-in provider), one
# bash tool call (`ls`, on the command side) and one MCP tools/call (benches/agents/
# bench_mcp.js as the connector's upstream) through its run's gateway.
#
# Every SAMPLE runs (default 500) it prints airlockd's RSS (and its anonymous part), threads and open descriptors,
# and what is left of this soak's runs on the host: processes of its instance uids, mounts
# of its state directory or runs, loop devices of its runs, cgroups named for its runs (the run
# cgroups of every airlockd on the host share one `airlock/` parent per hierarchy, so
# they are told apart by run id, which also keeps other suites running on the host out
# of the counts), the state directory's entries (but each run's kept lease history), and
# the runs failed so far. Once idle at the end: no process, mount, loop device or cgroup
# of a run may be left, airlockd's other counts must be back where they were at the
# first sample (RSS within 10%), every run must be in the ledger opened and closed, every
# scripted run's three calls must have been answered, and the chain must verify; else it
# exits non-zero.
#   N=10000 bash benches/soak.sh
set -euo pipefail
N="${N:-10000}"
PARALLEL="${PARALLEL:-8}"
SAMPLE="${SAMPLE:-500}"
INSTANCES=8
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PORTS="$(mktemp -d /tmp/airlock-soak-ports.XXXXXX)"
PPORT_FILE="$PORTS/provider.port"
UPORT=$((39600 + $$ % 300))
python3 "$REPO/tests/agents/standin_provider.py" "$PORTS/provider.log" "$PPORT_FILE" &
PROV=$!
node "$REPO/benches/agents/bench_mcp.js" serve "$UPORT" >"$PORTS/up.log" &
UP=$!
for _ in $(seq 1 100); do [ -s "$PPORT_FILE" ] && grep -q listening "$PORTS/up.log" 2>/dev/null && break; sleep 0.05; done
[ -s "$PPORT_FILE" ] || { echo "soak: the stand-in provider did not start" >&2; exit 1; }
head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$PORTS/key"
chmod 0600 "$PORTS/key"
EXTRA_CONFIG="credentials: {soak: $PORTS/key}
providers:
  claude: {url: \"http://127.0.0.1:$(cat "$PPORT_FILE")\", credential: soak}
mcp_connectors:
  bench: {url: \"http://127.0.0.1:$UPORT/mcp\"}"
source "$(dirname "$0")/daemon_env.sh"
# daemon_env's trap stops airlockd and removes $W; the partners go too.
trap 'stop_daemon; kill $PROV $UP 2>/dev/null || true; rm -rf "$PORTS"' EXIT
# The bench connector's echo granted to the code role, spend unbounded for the soak.
sed -i -e 's/^tools:$/tools:\n  bench: [echo]/' \
    -e 's/^  mcp:$/  mcp:\n    bench:\n      via: airlock/' \
    -e 's/^\(  spend_usd:\) .*/\1 100000/' "$W/roles/code/role.yaml"
ctl reload >/dev/null

fail() { echo "soak: FAILED: $*" >&2; exit 1; }
threads() { awk '/^Threads:/ {print $2}' "/proc/$DPID/status"; }
fds() { ls "/proc/$DPID/fd" | wc -l; }
# This soak's run ids, from its ledger (one per line; a pattern that matches nothing when
# there is none yet).
run_ids() { grep -o '"run":"r-[^"]*"' "$STATE/ledger.jsonl" 2>/dev/null | cut -d'"' -f4 | sort -u >"$W/runs.ids"
  [ -s "$W/runs.ids" ] || echo "no-run-yet-$$" >"$W/runs.ids"; }
procs() { ps -e -o uid= | awk -v a="$UID0" -v b="$((UID0 + INSTANCES - 1))" '$1 >= a && $1 <= b' | wc -l; }
mounts() { grep -F -e "$W" -f "$W/runs.ids" /proc/self/mountinfo | wc -l; }
# The runs' own (by run id): the pool's ready images and the homes airlockd keeps between
# runs are its, checked once it has stopped (at the end).
loops() { losetup -a 2>/dev/null | grep -F -f "$W/runs.ids" | wc -l; }
cgroups() { find /sys/fs/cgroup -type d -path '*/airlock/*' 2>/dev/null | grep -F -f "$W/runs.ids" | wc -l; }
# The state directory's entries but each run's kept history (leases/done/RUN.json, like
# the ledger's records, one per run by design).
entries() { find "$STATE" -mindepth 1 -not -path "$STATE/leases/done/*" | wc -l; }
failures() { [ -f "$W/out/failed" ] && sort -u "$W/out/failed" | wc -l || echo 0; }
# RSS split: anonymous (heap, stacks: what a leak grows) and file-backed (the binary's pages
# as they are first run, bounded by its size).
anon() { awk '/^RssAnon:/ {print $2}' "/proc/$DPID/status"; }
sample() { run_ids; echo "$1 $(vmrss_kb "$DPID") $(threads) $(fds) $(procs) $(mounts) $(loops) $(cgroups) $(entries) $(failures) $(anon)"; }
show() { awk -v t="${2:-}" '{printf "%8s %9s %8s %5s %6s %7s %6s %8s %8s %7s %8s%s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, t}' <<<"$1"; }

AGENT="$(cat "$REPO/benches/agents/soak_agent.py")"
mkdir -p "$W/out"
one() {
  local i="$1"
  if [ $((i % 2)) -eq 0 ]; then
    "$BIN/airlockctl" --config "$CFG" --socket "$SOCK" launch code --instance "b$((i % INSTANCES))" --wait \
      -- /bin/true >/dev/null 2>>"$W/out/errors" || echo "$i" >>"$W/out/failed"
  else
    "$BIN/airlockctl" --config "$CFG" --socket "$SOCK" launch code --instance "b$((i % INSTANCES))" --wait \
      -- /usr/bin/python3 -c "$AGENT" >"$W/out/$i" 2>>"$W/out/errors" || echo "$i" >>"$W/out/failed"
    grep -q '"ok": true' "$W/out/$i" && rm -f "$W/out/$i" || echo "$i" >>"$W/out/failed"
  fi
}
export -f one
export BIN CFG SOCK W INSTANCES AGENT

printf '%8s %9s %8s %5s %6s %7s %6s %8s %8s %7s %8s\n' runs rss_kB threads fds procs mounts loops cgroups entries failed anon_kB
zero="$(sample 0)"
show "$zero" "  (before the first run)"
half=$((N / 2))
done_runs=0
first=""
while [ "$done_runs" -lt "$N" ]; do
  next=$((done_runs + SAMPLE)); [ "$next" -gt "$N" ] && next="$N"
  if [ "$done_runs" -lt "$half" ]; then
    for i in $(seq $((done_runs + 1)) "$next"); do one "$i"; done
  else
    seq $((done_runs + 1)) "$next" | xargs -P "$PARALLEL" -I{} bash -c 'one {}'
  fi
  done_runs="$next"
  # Let the last runs' clean-up finish before counting (it is off the runs' path).
  sleep 2
  row="$(sample "$done_runs")"
  if [ -z "$first" ]; then
    first="$row"
    find "$STATE" -mindepth 1 -not -path "$STATE/leases/done/*" | sort >"$W/entries.first"
  fi
  show "$row"
done
# The end, once idle: the runtime's blocking threads go after 10 s without work.
sleep 12
last="$(sample "$N")"
show "$last" "  (idle 12 s)"
find "$STATE" -mindepth 1 -not -path "$STATE/leases/done/*" | sort >"$W/entries.last"

failed=0
[ -f "$W/out/failed" ] && failed="$(sort -u "$W/out/failed" | wc -l)"
opened="$(grep -c '"kind":"run_opened"' "$STATE/ledger.jsonl" || true)"
closed="$(grep -c '"kind":"run_closed"' "$STATE/ledger.jsonl" || true)"
"$BIN/airlockctl" verify-ledger --ledger "$STATE/ledger.jsonl" >/dev/null && chain=intact || chain=BROKEN
echo "soak: $N runs ($half one at a time, the rest $PARALLEL at a time); $failed failed; ledger $opened opened, $closed closed, chain $chain"
[ "$failed" -eq 0 ] || { head -5 "$W/out/errors" >&2; fail "$failed runs failed"; }
[ "$opened" -eq "$N" ] && [ "$closed" -eq "$N" ] && [ "$chain" = intact ] || fail "the ledger does not hold every run"
read -r _ rss0 thr0 fd0 _ _ _ _ e0 _ <<<"$first"
read -r _ rss1 thr1 fd1 p1 m1 l1 c1 e1 _ <<<"$last"
[ "$p1" -eq 0 ] || fail "$p1 processes of the runs' uids are left"
[ "$m1" -eq 0 ] || { grep -F -e "$W" -f "$W/runs.ids" /proc/self/mountinfo | head -5 >&2; fail "$m1 mounts of the runs are left"; }
[ "$l1" -eq 0 ] || fail "$l1 loop devices of the runs are left"
[ "$c1" -eq 0 ] || { find /sys/fs/cgroup -type d -path '*/airlock/*' | grep -F -f "$W/runs.ids" | head -5 >&2; fail "$c1 cgroups of the runs are left"; }
[ "$thr1" -le "$thr0" ] || fail "threads grew: $thr0 -> $thr1"
[ "$fd1" -le "$fd0" ] || fail "open descriptors grew: $fd0 -> $fd1"
[ "$e1" -le "$e0" ] || { comm -13 "$W/entries.first" "$W/entries.last" | head -5 >&2; fail "state entries grew: $e0 -> $e1"; }
[ "$((rss1 * 10))" -le "$((rss0 * 11))" ] || fail "RSS grew more than 10%: $rss0 -> $rss1 kB"
# Stopped, airlockd lets go of its pool and of the homes it kept: no loop device of the
# state directory is left.
kill -TERM "$DPID"
for _ in $(seq 1 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$DPID" 2>/dev/null && fail "airlockd did not stop within 10 s of SIGTERM"
left="$(losetup -a 2>/dev/null | grep -F -c "$W" || true)"
[ "$left" -eq 0 ] || fail "$left loop devices of the state directory are left after airlockd stopped"
echo "soak: held: every count back where it was at run $SAMPLE (RSS $rss0 -> $rss1 kB)"
