#!/usr/bin/env bash
# GraphQL mutations through the GitHub route, side by side (release build, as root),
# against the stand-in GitHub (tests/agents/standin_github.py, its GraphQL executed by
# graphql-core): the same client (benches/agents/bench_graphql.py) times N `addComment`
# mutations over one kept-alive connection straight to the stand-in with the real token,
# and from a run through its gateway (read, resolved, decided, counted, journaled,
# forwarded); p50 and p99, with the subject's node id cached (one issue, looked up once)
# and uncached (N issues the run never named: one `nodes(ids:)` lookup each).
set -euo pipefail
N=${N:-500}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/github.sh: run as root" >&2; exit 1; }
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /tmp/airlock-gqlbench.XXXXXX)
chmod 755 "$W"
trap 'kill $SI 2>/dev/null || true; rm -rf "$W"' EXIT
openssl genrsa -traditional -out "$W/app.key" 2048 2>/dev/null
openssl rsa -in "$W/app.key" -pubout -out "$W/app.pub.pem" 2>/dev/null
chmod 600 "$W/app.key"
mkdir -p "$W/repos/example-org/example-repo.git"
git -C "$W/repos/example-org/example-repo.git" init -q --bare -b main
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
budget: {runs_per_week: 100000, minutes_per_run: 30, github_writes_per_run: 100000}
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
CLIENT=$(cat benches/agents/bench_graphql.py)
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
# Issues the gateway never saw, two sets (one for each side), made straight at the stand-in.
mkids() {
  python3 - "$PORT" "$TOKEN" "$N" <<'PY'
import http.client, json, sys
port, token, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", int(port))
h = {"Authorization": f"token {token}", "Content-Type": "application/json"}
def q(body):
    c.request("POST", "/graphql", body=json.dumps(body), headers=h)
    return json.loads(c.getresponse().read())
repo = q({"query": '{ repository(owner: "example-org", name: "example-repo") { id } }'})["data"]["repository"]["id"]
doc = "mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { id } } }"
print(json.dumps([q({"query": doc, "variables": {"input": {"repositoryId": repo, "title": "b"}}})["data"]["createIssue"]["issue"]["id"] for _ in range(n)]))
PY
}
# Straight before and after the run (the stand-in's state grows as it goes, and each
# mutation rewrites it): the gateway is compared with their mean.
before=$(python3 -c "$CLIENT" direct "127.0.0.1:$PORT" "$TOKEN" "$N" "$(mkids)")
gateway=$(run /usr/bin/python3 -c "$CLIENT" jail "$N" "$(mkids)" | tail -1)
grep -q cached_p50_us <<<"$gateway" || { echo "the jailed client failed: $gateway" >&2; exit 1; }
after=$(python3 -c "$CLIENT" direct "127.0.0.1:$PORT" "$TOKEN" "$N" "$(mkids)")
python3 - "$before" "$gateway" "$after" <<'PY'
import json, sys
b, g, a = (json.loads(x) for x in sys.argv[1:4])
d = {k: (b[k] + a[k]) // 2 for k in b}
print(f"{'':40}{'direct':>12}{'gateway':>12}{'added':>12}")
for k, label in [("cached_p50_us", "mutation, id cached, p50 (us)"),
                 ("cached_p99_us", "mutation, id cached, p99 (us)"),
                 ("uncached_p50_us", "mutation, id looked up, p50 (us)"),
                 ("uncached_p99_us", "mutation, id looked up, p99 (us)")]:
    print(f"{label:40}{d[k]:>12}{g[k]:>12}{g[k]-d[k]:>12}")
PY
