#!/usr/bin/env bash
# A whole scripted agent run, launch to exit, and the part of it that is Airlock's (release
# build, as root): Claude Code on the code role's brief through airlockd, its model the
# scripted stand-in (three tool calls through the gateway, then an answer). For each of N
# runs: the wall time of `airlockctl launch --wait`, Claude Code's own duration (its result
# event's duration_ms, from its start to its answer), and the difference: the jail's setup
# and teardown, the launch's round trips and the run's records. Also the jail's own setup
# figure from the run's journal.
set -euo pipefail
N=${N:-10}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/agent_run.sh: run as root" >&2; exit 1; }
scripts/install-agents.sh
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /var/tmp/airlock-agentbench.XXXXXX)
chmod 0755 "$W"
trap 'kill $D $SI 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT
cat >"$W/script.json" <<'JSON'
{"turns": [
  {"tool": "bash", "input": {"command": "ls -la"}},
  {"tool": "bash", "input": {"command": "git status"}},
  {"tool": "bash", "input": {"command": "rm -rf ."}},
  {"text": "done"}
]}
JSON
printf 'sk-bench\n' >"$W/key"; chmod 600 "$W/key"
mkdir -p "$W/roles.local/code"
cp roles/code/brief.md "$W/roles.local/code/"
# Its GitHub identity left to GitHub: this measures the agent run, benches/github.sh the
# GitHub route (a key_store: airlock role's own agent needs airlockd's `github`).
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' -e 's/key_store: airlock/key_store: github/' \
  roles/code/role.yaml >"$W/roles.local/code/role.yaml"
SI=; D=
results=()
for i in $(seq 1 "$N"); do
  # A fresh script per run: the stand-in answers turns in order.
  kill $SI 2>/dev/null || true
  rm -f "$W/port"
  python3 tests/agents/standin_provider.py "$W/log" "$W/port" "$W/script.json" &
  SI=$!
  for _ in $(seq 1 100); do [ -s "$W/port" ] && break; sleep 0.05; done
  cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
socket: $W/airlockd.sock
credentials: {k: $W/key}
providers:
  claude: {url: "http://127.0.0.1:$(cat "$W/port")", credential: k}
limits: {workspace: null}
instances:
  bench: {role: code, uid: 1880099913}
YAML
  if [ -z "$D" ]; then
    "$BIN/airlockd" --config "$W/airlock.yaml" 2>"$W/airlockd.err" &
    D=$!
    for _ in $(seq 1 100); do "$BIN/airlockctl" --config "$W/airlock.yaml" status >/dev/null 2>&1 && break; sleep 0.1; done
  else
    "$BIN/airlockctl" --config "$W/airlock.yaml" reload >/dev/null
  fi
  t0=$(date +%s%N)
  out=$("$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --wait 2>"$W/err") \
    || { echo "benches/agent_run.sh: the run failed:" >&2; cat "$W/err" >&2; exit 1; }
  t1=$(date +%s%N)
  run=$(grep -o 'r-[0-9]\{8\}-[0-9a-f]\{8\}' "$W/err" | head -1)
  agent_ms=$(python3 -c 'import json,sys
for l in sys.stdin:
    try: e = json.loads(l)
    except ValueError: continue
    if e.get("type") == "result": print(e["duration_ms"])' <<<"$out")
  setup_us=$(journalctl AIRLOCK_RUN="$run" AIRLOCK_EVENT=jail_report -o cat 2>/dev/null | sed -n 's/.*setup: \([0-9]*\) us from the helper.*/\1/p' | head -1)
  results+=("$(( (t1 - t0) / 1000000 )) ${agent_ms:-0} ${setup_us:-0}")
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(int, l.split())) for l in sys.stdin if l.strip()]
wall, agent, setup = zip(*rows)
airlock = [w - a for w, a, _ in rows]
p = lambda xs: f"p50 {st.median(xs):8.1f}  min {min(xs):8.1f}  max {max(xs):8.1f}"
print(f"runs: {len(rows)}")
print("launch --wait, wall (ms)       ", p(wall))
print("Claude Code own duration (ms)  ", p(agent))
print("Airlock part: wall - agent (ms)", p(airlock))
print("jail setup (ms)                ", p([s / 1000 for s in setup]))
'
