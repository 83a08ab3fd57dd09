#!/usr/bin/env bash
# The provider route, side by side (release build, as root): the same client
# (benches/agents/bench_provider.py) times requests straight to the stand-in provider
# (tests/agents/standin_provider.py) with the real key, and from inside a jail through the
# run's gateway with its run token:
#  - time to first byte of a whole answer and of a stream (p50, p99; N each);
#  - throughput of one long stream (BIG deltas of 1000 characters).
# The difference between the two is what the gateway adds (target: at most 1 ms at p50).
set -euo pipefail
N=${N:-500}
BIG=${BIG:-16384}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/provider.sh: run as root" >&2; exit 1; }
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /tmp/airlock-provbench.XXXXXX)
trap 'kill $SI 2>/dev/null || true; rm -rf "$W"' EXIT
python3 tests/agents/standin_provider.py "$W/requests.jsonl" "$W/port" &
SI=$!
for _ in $(seq 1 100); do [ -s "$W/port" ] && break; sleep 0.05; done
PORT=$(cat "$W/port")
KEY="sk-bench-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$KEY" >"$W/key"
chmod 600 "$W/key"
mkdir -p "$W/roles.local/code"
cp roles/code/brief.md "$W/roles.local/code/"
# Budgets raised so that no request of the series is refused (a refusal is quick, and
# would be timed as if it were an answer): runs, spend and turns.
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' -e 's/^\(  spend_usd:\) .*/\1 100000/' \
    -e 's/^\(  max_turns:\) .*/\1 100000/' \
    roles/code/role.yaml >"$W/roles.local/code/role.yaml"
cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
credentials: {bench: $W/key}
providers:
  claude: {url: "http://127.0.0.1:$PORT", credential: bench}
instances:
  bench: {role: code, uid: 1880099912}
YAML
CLIENT=$(cat benches/agents/bench_provider.py)
# The client exits non-zero (naming the request) when an answer is not a whole 200.
direct=$(python3 -c "$CLIENT" "http://127.0.0.1:$PORT" "$KEY" "$N" "$BIG") \
    || { echo "FAILED: the client straight to the stand-in" >&2; exit 1; }
gateway=$("$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait \
    -- /usr/bin/python3 -c "$CLIENT" env env "$N" "$BIG" 2>&1 | tail -1) || true
# Inside the jail the client reads its base URL and token from the run's environment.
if [ -z "$gateway" ] || ! grep -q whole_p50_us <<<"$gateway"; then
    echo "FAILED: the jailed client through the gateway: $gateway" >&2
    exit 1
fi
python3 - "$direct" "$gateway" <<'PY'
import json, sys
d, g = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'':28}{'direct':>12}{'gateway':>12}{'added':>12}")
for k, label in [("whole_p50_us", "whole answer TTFB p50 (us)"), ("whole_p99_us", "whole answer TTFB p99 (us)"),
                 ("stream_p50_us", "stream first event p50 (us)"), ("stream_p99_us", "stream first event p99 (us)")]:
    print(f"{label:28}{d[k]:>12}{g[k]:>12}{g[k]-d[k]:>12}")
print(f"{'long stream (MiB/s)':28}{d['stream_mib_s']:>12}{g['stream_mib_s']:>12}")
PY
