#!/usr/bin/env bash
# Metrics and tracing on against off, side by side, through a running airlockd (the only
# path that counts metrics and makes spans): (1) launch latency, `airlockctl launch --wait code -- /bin/true`
# (hyperfine, RUNS each, default 30); (2) MCP tools/call latency through one run's gateway
# to a local upstream (benches/agents/bench_mcp.js, N sequential calls, default 1000).
# With metrics on, a scraper reads /metrics every second throughout, so scrapes are in
# the figures too; "trace" adds `tracing:` to a local OTLP/HTTP receiver
# (tests/agents/otlp_receiver.py, needs scripts/install-deps.sh). Each airlockd in turn:
# off, on, trace, twice; the table gives every series.
# Target: no measurable difference at p50. Root only.
set -euo pipefail
RUNS=${RUNS:-30}
N=${N:-1000}
cd "$(dirname "$0")/.."
REPO=$PWD
[ "$(id -u)" = 0 ] || { echo "benches/metrics.sh: run as root (airlockd builds jails)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "benches/metrics.sh: hyperfine missing; run scripts/install-deps.sh" >&2; exit 1; }
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$REPO/target}/release
fi
JS=$REPO/benches/agents/bench_mcp.js
W=$(mktemp -d /tmp/airlock-metrics-bench.XXXXXX)
chmod 0755 "$W"
UP_PORT=$((39600 + $$ % 200))
M_PORT=$((39800 + $$ % 100))
O_PORT=$((39900 + $$ % 100))
DPID= UP= SCRAPER= RECV=
cleanup() {
  for p in $SCRAPER $DPID $UP $RECV; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

node "$JS" serve "$UP_PORT" >"$W/up.log" &
UP=$!
for _ in $(seq 1 100); do grep -q listening "$W/up.log" 2>/dev/null && break; sleep 0.05; done
python3 "$REPO/tests/agents/otlp_receiver.py" "$O_PORT" "$W/spans.jsonl" >"$W/recv.log" &
RECV=$!
for _ in $(seq 1 100); do grep -q listening "$W/recv.log" 2>/dev/null && break; sleep 0.05; done

mkdir -p "$W/roles.local/code"
cp roles/code/brief.md "$W/roles.local/code/"
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' \
    -e 's/^tools:$/tools:\n  bench: [echo]/' \
    -e 's/^  mcp:$/  mcp:\n    bench:\n      via: airlock/' roles/code/role.yaml >"$W/roles.local/code/role.yaml"

# start_daemon NAME EXTRA_CONFIG: a fresh state dir and socket each time.
start_daemon() {
  local d="$W/$1"
  mkdir -p "$d"
  cat >"$d/airlock.yaml" <<YAML
roles: [$REPO/roles, $W/roles.local]
policies: $REPO/policies
state_dir: $d/state
socket: $d/airlockd.sock
grace_seconds: 2
mcp_connectors:
  bench: {url: "http://127.0.0.1:$UP_PORT/mcp"}
$2
instances:
  b0: {role: code, uid: 1880099920}
YAML
  CFG="$d/airlock.yaml"
  "$BIN/airlockd" --config "$CFG" </dev/null >"$d/out" 2>"$d/err" &
  DPID=$!
  for _ in $(seq 1 300); do
    "$BIN/airlockctl" --config "$CFG" status >/dev/null 2>&1 && return 0
    kill -0 "$DPID" 2>/dev/null || { cat "$d/err"; exit 1; }
    sleep 0.1
  done
  echo "airlockd never answered" >&2; exit 1
}
stop_daemon() {
  [ -n "$SCRAPER" ] && { kill "$SCRAPER" 2>/dev/null || true; wait "$SCRAPER" 2>/dev/null || true; SCRAPER=; }
  kill -TERM "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
}

series() { # NAME: one launch series and one MCP series against the airlockd running
  local name=$1
  local launch="$BIN/airlockctl --config $CFG launch --wait code --instance b0 -- /bin/true"
  $launch >/dev/null 2>&1 || { echo "launch fails:"; $launch; exit 1; }
  hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$W/$name.json" -n "$name" "$launch" >/dev/null
  "$BIN/airlockctl" --config "$CFG" launch --wait code --instance b0 -- /usr/bin/node -e "$(cat "$JS")" -- \
    latency "http://127.0.0.1:4180/mcp/bench" "$N" echo '{"message":"hello"}' 2>/dev/null | tail -1 >"$W/$name.mcp"
}

scraped() { # NAME EXTRA_CONFIG: metrics on, scraped every second
  start_daemon "$1" "$2"
  ( while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$M_PORT/metrics" || true; done ) &
  SCRAPER=$!
  series "$1"
  curl -s "http://127.0.0.1:$M_PORT/metrics" | grep -E '^airlock_(tool_calls_total|runs_total|trace_spans_dropped_total)' | sed "s/^/  $1: /" >"$W/$1.sample"
  stop_daemon
}
for round in 1 2; do
  start_daemon "off$round" ""
  series "off$round"
  stop_daemon
  scraped "on$round" "metrics: {listen: 127.0.0.1:$M_PORT}"
  scraped "trace$round" "metrics: {listen: 127.0.0.1:$M_PORT}
tracing: {otlp: 'http://127.0.0.1:$O_PORT'}"
done

python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
print(f"{'series':8} {'launch p50 ms':>14} {'launch mean ms':>15} {'mcp p50 us':>11} {'mcp p90 us':>11} {'mcp p99 us':>11}")
agg = {"off": [], "on": [], "trace": []}
for name in ["off1", "on1", "trace1", "off2", "on2", "trace2"]:
    h = json.load(open(os.path.join(w, name + ".json")))["results"][0]
    m = json.loads(open(os.path.join(w, name + ".mcp")).read())
    print(f"{name:8} {h['median']*1000:14.2f} {h['mean']*1000:15.2f} {m['p50_us']:11.1f} {m['p90_us']:11.1f} {m['p99_us']:11.1f}")
    agg[name[:-1]].append((h["median"] * 1000, m["p50_us"]))
for k in ("off", "on", "trace"):
    l = agg[k]
    print(f"{k:5} mean of rounds: launch p50 {sum(x for x, _ in l)/len(l):.2f} ms, mcp p50 {sum(y for _, y in l)/len(l):.1f} us")
PY
cat "$W"/on2.sample "$W"/trace2.sample
echo "spans received: $(wc -l <"$W/spans.jsonl")"
