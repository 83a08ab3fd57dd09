#!/usr/bin/env bash
# The GitHub route, side by side (release build, as root), against the stand-in GitHub
# (tests/agents/standin_github.py):
#  - added latency per API request: the same client (benches/agents/bench_github.py) times
#    N GETs over one kept-alive connection straight to the stand-in with the real token,
#    and from a run through its gateway (CONNECT api.github.com:443, TLS terminated with
#    the run's CA, token checked, request classified and forwarded); p50 and p99;
#  - clone throughput: `git clone` of a repository of SIZE_MB of incompressible files,
#    straight from the stand-in's git http-backend, and from a run through the gateway.
set -euo pipefail
N=${N:-500}
SIZE_MB=${SIZE_MB:-64}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/github.sh: run as root" >&2; exit 1; }
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /tmp/airlock-ghbench.XXXXXX)
chmod 755 "$W"
trap 'kill $SI 2>/dev/null || true; rm -rf "$W"' EXIT
openssl genrsa -traditional -out "$W/app.key" 2048 2>/dev/null
openssl rsa -in "$W/app.key" -pubout -out "$W/app.pub.pem" 2>/dev/null
chmod 600 "$W/app.key"
# The repository: SIZE_MB of random files in one commit.
mkdir -p "$W/repos/example-org/example-repo.git" "$W/seed"
git -C "$W/repos/example-org/example-repo.git" init -q --bare -b main
(cd "$W/seed" && git init -q -b main && for i in $(seq 1 "$SIZE_MB"); do head -c 1048576 /dev/urandom >"f$i"; done \
    && git add -A && git -c user.name=b -c user.email=b@b commit -qm seed \
    && git push -q "$W/repos/example-org/example-repo.git" main)
python3 tests/agents/standin_github.py "$W" &
SI=$!
for _ in $(seq 1 100); do [ -s "$W/port" ] && break; sleep 0.05; done
PORT=$(cat "$W/port")
mkdir -p "$W/roles.local/ghbench"
cat >"$W/roles.local/ghbench/role.yaml" <<YAML
schema: 1
role: ghbench
level: L3
brief: brief.md
kind: workflow
identity: {board_name: "airlock:ghbench", key_store: airlock}
writes: {repos: [example-org/example-repo], issues: [comment]}
tools: {}
budget: {runs_per_week: 100000, minutes_per_run: 30, github_writes_per_run: 10}
YAML
echo "# bench" >"$W/roles.local/ghbench/brief.md"
cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
credentials: {gh-app: $W/app.key}
github: {api_url: "http://127.0.0.1:$PORT", git_url: "http://127.0.0.1:$PORT/git", app_id: 4242, private_key: gh-app}
instances:
  bench: {role: ghbench, uid: 1880099913}
YAML
run() { "$BIN/airlockctl" --config "$W/airlock.yaml" launch ghbench --instance bench --standalone --wait -- "$@" 2>/dev/null; }
CLIENT=$(cat benches/agents/bench_github.py)
# A token for the straight runs: minted by the stand-in the way airlockd mints them.
TOKEN=$(python3 - "$W" "$PORT" <<'PY'
import base64, json, subprocess, sys, time, urllib.request
w, port = sys.argv[1], sys.argv[2]
b = lambda x: base64.urlsafe_b64encode(x).rstrip(b"=")
now = int(time.time())
si = b(b'{"alg":"RS256","typ":"JWT"}') + b"." + b(json.dumps({"iat": now - 60, "exp": now + 500, "iss": "4242"}).encode())
sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", f"{w}/app.key"], input=si, capture_output=True).stdout
req = urllib.request.Request(f"http://127.0.0.1:{port}/app/installations/77/access_tokens", method="POST",
    data=b'{"repositories":["example-repo"]}', headers={"Authorization": "Bearer " + (si + b"." + b(sig)).decode()})
print(json.load(urllib.request.urlopen(req))["token"])
PY
)
direct=$(python3 -c "$CLIENT" direct "127.0.0.1:$PORT" "$TOKEN" "$N")
gateway=$(run /usr/bin/python3 -c "$CLIENT" jail "$N" | tail -1)
grep -q p50_us <<<"$gateway" || { echo "the jailed client failed: $gateway" >&2; exit 1; }
BASIC=$(printf 'x-access-token:%s' "$TOKEN" | base64 -w0)
t0=$(date +%s.%N)
git -c "http.extraHeader=Authorization: Basic $BASIC" clone -q "http://127.0.0.1:$PORT/git/example-org/example-repo.git" "$W/straight"
t1=$(date +%s.%N)
clone_direct=$(python3 -c "print(round($SIZE_MB / ($t1 - $t0), 1))")
clone_gateway=$(run /bin/sh -c 'cd "$AIRLOCK_WORKSPACE" && t0=$(date +%s.%N) && git clone -q https://github.com/example-org/example-repo.git r && t1=$(date +%s.%N) && echo "secs $t0 $t1"' | awk -v mb="$SIZE_MB" '/^secs/ {printf "%.1f", mb / ($3 - $2)}')
[ -n "$clone_gateway" ] || { echo "the jailed clone failed" >&2; exit 1; }
python3 - "$direct" "$gateway" "$clone_direct" "$clone_gateway" "$SIZE_MB" <<'PY'
import json, sys
d, g = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'':32}{'direct':>12}{'gateway':>12}{'added':>12}")
for k, label in [("p50_us", "API GET p50 (us)"), ("p99_us", "API GET p99 (us)")]:
    print(f"{label:32}{d[k]:>12}{g[k]:>12}{g[k]-d[k]:>12}")
print(f"{'clone ' + sys.argv[5] + ' MiB (MiB/s)':32}{sys.argv[3]:>12}{sys.argv[4]:>12}")
PY
