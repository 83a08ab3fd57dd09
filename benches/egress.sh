#!/usr/bin/env bash
# The added cost of an egress CONNECT (release build, as root): N TLS connections to the
# same server, each timed to the tunnel being open and to the first response byte,
#  (a) straight from the host to the server (TCP connect, TLS, GET),
#  (b) from inside a run through its gateway: CONNECT by name (Airlock resolves it with a
#      DNS stub on loopback, checks every address and the host's own, dials, answers 200,
#      reads and checks the ClientHello's server name, splices),
#  (c) the same with an IP literal target (no DNS).
# The server is in a network namespace of its own behind a veth pair, at a public-looking
# address (11.x.y.z, routed to the veth only for the benchmark). One Python client
# program (benches/agents/egress_bench.py) everywhere. N (default 500) per series.
set -euo pipefail
N=${N:-500}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/egress.sh: run as root" >&2; exit 1; }
scripts/install-deps.sh >/dev/null
# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
PY=$PWD/benches/agents/egress_bench.py
W=$(mktemp -d /tmp/airlock-egbench.XXXXXX)
NS=airlock-egb-$$
VETH=aegb$(($$ % 100000))
PUB=11.$((($$ >> 8) & 255)).$(($$ & 255)).2
HOSTSIDE=10.253.$(($$ & 255)).1
DNSPORT=$((39600 + $$ % 300))
cleanup() {
  kill "${SRV:-}" "${DNS:-}" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  ip link del "$VETH" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

ip netns add "$NS"
ip link add "$VETH" type veth peer name "${VETH}p"
ip link set "${VETH}p" netns "$NS"
ip addr add "$HOSTSIDE/32" dev "$VETH"
ip link set "$VETH" up
ip route add "$PUB/32" dev "$VETH"
ip -n "$NS" link set lo up
ip -n "$NS" addr add "$PUB/32" dev "${VETH}p"
ip -n "$NS" link set "${VETH}p" up
ip -n "$NS" route add "$HOSTSIDE/32" dev "${VETH}p"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=bench.test -keyout "$W/key.pem" -out "$W/cert.pem" >/dev/null 2>&1
ip netns exec "$NS" python3 "$PY" serve "$PUB" "$W/cert.pem" "$W/key.pem" >"$W/srv.log" &
SRV=$!
python3 "$PY" dns "$DNSPORT" bench.test "$PUB" >"$W/dns.log" &
DNS=$!
for _ in $(seq 1 100); do grep -q ready "$W/srv.log" 2>/dev/null && grep -q ready "$W/dns.log" && break; sleep 0.05; done

mkdir -p "$W/roles.local/web-researcher"
cp roles/web-researcher/brief.md "$W/roles.local/web-researcher/"
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' roles/web-researcher/role.yaml \
  >"$W/roles.local/web-researcher/role.yaml"
cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
egress: {nameservers: ["127.0.0.1:$DNSPORT"]}
instances:
  bench: {role: web-researcher, uid: 1880099912}
YAML
jailed() {
  "$BIN/airlockctl" --config "$W/airlock.yaml" launch web-researcher --instance bench \
    --standalone --wait -- /usr/bin/python3 -c "$(cat "$PY")" client "$@" 2>/dev/null
}

echo "== egress CONNECT: $N TLS connections per series (open = tunnel ready / TCP connected)"
direct=$(python3 "$PY" client direct "$N" "$PUB:443" bench.test)
byname=$(jailed proxy "$N" bench.test:443 bench.test)
byip=$(jailed proxy "$N" "$PUB:443")
echo "straight from the host:          $direct"
echo "through the gateway, by name:    $byname"
echo "through the gateway, IP literal: $byip"
python3 - "$direct" "$byname" "$byip" <<'PY'
import json, sys
d, n, i = (json.loads(a) for a in sys.argv[1:])
for k in ("open_p50_us", "open_p90_us", "first_byte_p50_us", "first_byte_p90_us", "first_byte_p99_us"):
    print(f"added {k[:-3]}: by name {n[k] - d[k]:.1f} us, IP literal {i[k] - d[k]:.1f} us")
PY
