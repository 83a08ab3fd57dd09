#!/usr/bin/env bash
# An https MCP connector, side by side (release build, as root): N sequential tools/call
# (default 2000) to the same minimal upstream (benches/agents/bench_mcp.js serve) behind a
# real stunnel4 with a CA of the benchmark's own:
#  (a) straight to the https upstream (Node's https, keep-alive, the CA by
#      NODE_EXTRA_CA_CERTS), on the host;
#  (b) through a run's gateway (/mcp/bench, the client in the jail) to the same https
#      upstream (rustls, the connector's ca_file);
#  (c) straight and through the gateway to the plain loopback upstream, for scale.
# Latency p50/p90/p99 and the added latency (b - a); and the TLS connections stunnel
# accepted during (b): the gateway's connection reuse (1 means every call shared one).
set -euo pipefail
N=${N:-2000}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/mcp_https.sh: run as root" >&2; exit 1; }
scripts/install-deps.sh >/dev/null
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
JS=$PWD/benches/agents/bench_mcp.js
W=$(mktemp -d /tmp/airlock-httpsbench.XXXXXX)
chmod 755 "$W"
PORT=$((39600 + $$ % 200))
TLS=$((PORT + 200))
cleanup() { kill "${UP:-}" "${ST:-}" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

node "$JS" serve "$PORT" >"$W/up.log" &
UP=$!
for _ in $(seq 1 100); do grep -q listening "$W/up.log" 2>/dev/null && break; sleep 0.05; done

# The benchmark's CA and a certificate for localhost from it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj "/CN=Airlock https bench CA" -keyout "$W/ca.key" -out "$W/ca.pem" >/dev/null 2>&1
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
  -keyout "$W/key.pem" -out "$W/req.pem" >/dev/null 2>&1
printf 'subjectAltName=DNS:localhost\n' >"$W/ext.cnf"
openssl x509 -req -in "$W/req.pem" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial \
  -days 1 -extfile "$W/ext.cnf" -out "$W/cert.pem" >/dev/null 2>&1
chmod 644 "$W/ca.pem"
cat >"$W/stunnel.conf" <<CONF
foreground = yes
pid =
debug = 5
output = $W/stunnel.log
[mcp]
accept = 127.0.0.1:$TLS
connect = 127.0.0.1:$PORT
cert = $W/cert.pem
key = $W/key.pem
CONF
/usr/bin/stunnel4 "$W/stunnel.conf" 2>/dev/null &
ST=$!
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$TLS") 2>/dev/null && break; sleep 0.05; done

mkdir -p "$W/roles.local/code"
cp roles/code/brief.md "$W/roles.local/code/"
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' \
    -e 's/^tools:$/tools:\n  bench: [echo]\n  plain: [echo]/' \
    -e 's/^  mcp:$/  mcp:\n    bench:\n      via: airlock\n    plain:\n      via: airlock/' \
    roles/code/role.yaml >"$W/roles.local/code/role.yaml"
cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
mcp_connectors:
  bench: {url: "https://localhost:$TLS/mcp", ca_file: $W/ca.pem}
  plain: {url: "http://127.0.0.1:$PORT/mcp"}
instances:
  bench: {role: code, uid: 1880099912}
YAML
jailed() { "$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait -- /usr/bin/node -e "$(cat "$JS")" -- "$@" 2>/dev/null; }
accepted() { grep -c "accepted connection" "$W/stunnel.log" 2>/dev/null || echo 0; }

ARGS='{"message":"hello"}'
echo "== tools/call latency, $N sequential calls (after 50 to warm up)"
straight=$(NODE_EXTRA_CA_CERTS="$W/ca.pem" node "$JS" latency "https://localhost:$TLS/mcp" "$N" echo "$ARGS")
before=$(accepted)
through=$(jailed latency "http://127.0.0.1:4180/mcp/bench" "$N" echo "$ARGS")
conns=$(( $(accepted) - before ))
plain_straight=$(node "$JS" latency "http://127.0.0.1:$PORT/mcp" "$N" echo "$ARGS")
plain_through=$(jailed latency "http://127.0.0.1:4180/mcp/plain" "$N" echo "$ARGS")
echo "(a) straight to the https upstream:         $straight"
echo "(b) through the gateway to it:              $through"
echo "(c) straight to the plain upstream:         $plain_straight"
echo "    through the gateway to the plain one:   $plain_through"
python3 - "$straight" "$through" "$plain_straight" "$plain_through" <<'PY'
import json, sys
a, b, c, d = (json.loads(x) for x in sys.argv[1:])
for k in ("p50_us", "p90_us", "p99_us"):
    print(f"added {k[:-3]} (b - a): {b[k] - a[k]:.1f} us; over plain http (d - c): {d[k] - c[k]:.1f} us")
PY
echo "TLS connections stunnel accepted during (b): $conns for $((N + 52)) requests"
