#!/usr/bin/env bash
# The run's gateway, side by side (release build, as root):
#  (1) an MCP tools/call through the gateway's proxy (/mcp/<connector>) against the same
#      call straight to the same upstream: latency p50/p90/p99 and the difference. The
#      upstream is a plain Node http server answering from memory, so the straight series
#      is one bare loopback HTTP round trip: the yardstick of the added p50;
#  (2) calls per second through one run's gateway (and straight, for scale);
#  (3) the bash tool (`ls -d .` through /mcp/airlock) against the same command started
#      directly on the command side of a jail (fork + exec + wait from Python).
# The client is the same plain Node program everywhere (benches/agents/bench_mcp.js); in
# (1) and (2) it runs in the jail for the gateway path and on the host for the direct one.
# N (default 2000) calls per latency series. SECTIONS (default "1 2 3"): which of them to
# run (e.g. SECTIONS=3 for the bash tool alone). Must run as root.
set -euo pipefail
N=${N:-2000}
SECTIONS=${SECTIONS:-1 2 3}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
SECS=${SECS:-3}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/gateway.sh: run as root" >&2; exit 1; }
scripts/install-deps.sh >/dev/null
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
JS=$PWD/benches/agents/bench_mcp.js
W=$(mktemp -d /tmp/airlock-gwbench.XXXXXX)
PORT=$((39100 + $$ % 500))
trap 'kill $UP 2>/dev/null || true; rm -rf "$W"' EXIT

node "$JS" serve "$PORT" >"$W/up.log" &
UP=$!
for _ in $(seq 1 100); do grep -q listening "$W/up.log" 2>/dev/null && break; sleep 0.05; done

# The shipped code role with the bench connector, budgets raised; a workflow role whose
# command runs on the command side (for the direct exec series).
mkdir -p "$W/roles.local/code" "$W/roles.local/probe"
cp roles/code/brief.md "$W/roles.local/code/"
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' \
    -e 's/^tools:$/tools:\n  bench: [echo]/' \
    -e 's/^  mcp:$/  mcp:\n    bench:\n      via: airlock/' roles/code/role.yaml >"$W/roles.local/code/role.yaml"
cat >"$W/roles.local/probe/role.yaml" <<'YAML'
schema: 1
role: probe
level: L1
brief: brief.md
kind: workflow
identity: {board_name: "airlock:probe", key_store: airlock}
writes: {repos: []}
tools: {}
budget: {runs_per_week: 100000, minutes_per_run: 30}
YAML
echo "# probe" >"$W/roles.local/probe/brief.md"
cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
mcp_connectors:
  bench: {url: "http://127.0.0.1:$PORT/mcp"}
instances:
  bench: {role: code, uid: 1880099910}
  probe: {role: probe, uid: 1880099911}
YAML
ctl() { "$BIN/airlockctl" --config "$W/airlock.yaml" "$@"; }
jailed() { ctl launch code --instance bench --standalone --wait -- /usr/bin/node -e "$(cat "$JS")" -- "$@" 2>/dev/null; }
fail() { echo "benches/gateway.sh: FAILED: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

ARGS='{"message":"hello"}'
# Run the bench client with ARGS... in a standalone run calling through the gateway, its
# figures into OUT; sets $ticks to the gateway's own CPU: the supervisor's (airlockctl's)
# user+system time, its children not counted, sampled until it exits. WHAT names the run
# in the failure message.
through_gateway() {
  local out="$1" what="$2" sup t
  shift 2
  ( exec "$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait \
      -- /usr/bin/node -e "$(cat "$JS")" -- "$@" >"$out" 2>/dev/null ) &
  sup=$!
  ticks=0
  while kill -0 "$sup" 2>/dev/null; do
    t=$(awk '{print $14 + $15}' "/proc/$sup/stat" 2>/dev/null || true)
    [ -n "$t" ] && ticks=$t
    sleep 0.05
  done
  wait "$sup" || fail "$what failed"
  [ -s "$out" ] || fail "$what printed no figures"
}
if want 1; then
echo "== (1) tools/call latency, $N sequential calls"
direct=$(node "$JS" latency "http://127.0.0.1:$PORT/mcp" "$N" echo "$ARGS")
through_gateway "$W/through.out" "the run calling through the gateway" \
  latency "http://127.0.0.1:4180/mcp/bench" "$N" echo "$ARGS"
through=$(cat "$W/through.out")
hz=$(getconf CLK_TCK)
echo "straight to the upstream: $direct"
echo "through the gateway:      $through"
python3 - "$direct" "$through" <<'PY'
import json, sys
d, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ("p50_us", "p90_us", "p99_us"):
    print(f"added {k[:-3]}: {t[k] - d[k]:.1f} us")
added = t["p50_us"] - d["p50_us"]
held = "within" if added <= d["p50_us"] else "over"
print(f"added p50 against one bare loopback round trip ({d['p50_us']:.1f} us): {held} ({added / d['p50_us']:.2f}x)")
PY
python3 -c "print(f'gateway CPU per call (supervisor process, whole run incl. its start): {$ticks / $hz / ($N + 50) * 1e6:.1f} us')"

fi

if want 2; then
echo "== (2) calls per second, 8 at once, ${SECS}s"
rate_d=$(node "$JS" rate "http://127.0.0.1:$PORT/mcp" "$SECS" 8 echo "$ARGS")
# The gateway's CPU per call over the calls the run made (its 8 clients' warm-up and
# handshakes counted with them).
through_gateway "$W/rate.out" "the calls-per-second run" \
  rate "http://127.0.0.1:4180/mcp/bench" "$SECS" 8 echo "$ARGS"
rate_t=$(cat "$W/rate.out")
echo "straight to the upstream: $rate_d"
echo "through the gateway:      $rate_t"
python3 -c "import json; d, t = json.loads('$rate_d'), json.loads('$rate_t'); print(f\"through / straight: {t['per_second'] / d['per_second'] * 100:.0f}%\")"
python3 -c "import json; t = json.loads('$rate_t'); print(f\"gateway CPU per call (supervisor process, whole run incl. its start): {$ticks / $(getconf CLK_TCK) / (t['calls'] + 2) * 1e6:.1f} us\")"

fi

want 3 || exit 0
echo "== (3) bash tool: \`ls -d .\`, $((N / 4)) calls"
bash_t=$(jailed latency "http://127.0.0.1:4180/mcp/airlock" $((N / 4)) bash '{"command":"ls -d ."}') || fail "the bash tool run failed"
exec_t=$(ctl launch probe --instance probe --standalone --wait -- /usr/bin/python3 -c "
import json, subprocess, time
t = []
for i in range($((N / 4)) + 50):
    s = time.perf_counter_ns()
    subprocess.run(['ls', '-d', '.'], stdout=subprocess.DEVNULL)
    if i >= 50: t.append((time.perf_counter_ns() - s) / 1000)
t.sort()
q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
print(json.dumps({'n': len(t), 'p50_us': q(0.5), 'p90_us': q(0.9), 'p99_us': q(0.99)}))
" 2>/dev/null) || fail "the direct run on the command side failed"
echo "started directly on the command side: $exec_t"
echo "through the bash tool:                $bash_t"
python3 - "$exec_t" "$bash_t" <<'PY'
import json, sys
d, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ("p50_us", "p90_us", "p99_us"):
    print(f"added {k[:-3]}: {t[k] - d[k]:.1f} us")
PY
