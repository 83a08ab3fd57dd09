#!/usr/bin/env bash
# A build's registry traffic through egress (release build, as root): the real cargo
# vendors the same small tree (tinydep and its LEAVES+1 leaf crates, default 20) from a
# sparse registry served over TLS, with an empty cargo home each time, R times per series
# (default 5), wall time of the whole `cargo vendor`:
#  (a) straight, in the registry's own network namespace (no Airlock, no veth);
#  (b) from inside a run, through a granted tunnel (`egress.destinations.crates`, plain);
#  (c) from inside a run, through a checked destination (`methods: [GET, HEAD]`: TLS
#      terminated with the run's CA, each request checked and journaled, TLS again to the
#      registry).
# The registry (tests/registries/*.py) is at a public-looking address in a namespace of
# its own behind a veth pair; names resolve with a DNS stub on loopback
# (benches/agents/egress_bench.py). The runs are a workflow role's, so cargo runs on the
# command side directly.
set -euo pipefail
R=${R:-5}
LEAVES=${LEAVES:-20}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/egress_registries.sh: run as root" >&2; exit 1; }
scripts/install-deps.sh >/dev/null
[ -x /usr/local/bin/cargo ] || { echo "no cargo on the jail's PATH: scripts/install-deps.sh" >&2; exit 1; }
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /tmp/airlock-regbench.XXXXXX)
chmod 755 "$W"
NS=airlock-regb-$$
VETH=aerb$(($$ % 100000))
PUB=11.$((($$ >> 8) & 255)).$(($$ & 255)).3
HOSTSIDE=10.252.$(($$ & 255)).1
DNSPORT=$((39300 + $$ % 300))
HOST=index.crates.example
UIDN=1880099913
cleanup() {
  kill "${SRV:-}" "${DNS:-}" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  ip link del "$VETH" 2>/dev/null || true
  rm -rf "$W" "/etc/netns/$NS"
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

# A CA of the benchmark's own and the registry's certificate from it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj "/CN=Airlock bench CA" -keyout "$W/ca.key" -out "$W/ca.pem" >/dev/null 2>&1
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$HOST" \
  -keyout "$W/key.pem" -out "$W/req.pem" >/dev/null 2>&1
printf 'subjectAltName=DNS:%s\n' "$HOST" >"$W/ext"
openssl x509 -req -in "$W/req.pem" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial \
  -days 1 -extfile "$W/ext" -out "$W/cert.pem" >/dev/null 2>&1
chmod 644 "$W/ca.pem"
INDEX=$(python3 tests/registries/sparse_registry.py "$W/registry" "$HOST" "$HOST" "$LEAVES")
ip netns exec "$NS" python3 tests/registries/tls_files.py "$PUB" "$W/cert.pem" "$W/key.pem" \
  "$W/registry" >"$W/srv.log" &
SRV=$!
python3 benches/agents/egress_bench.py dns "$DNSPORT" "$HOST" "$PUB" >"$W/dns.log" &
DNS=$!
for _ in $(seq 1 100); do grep -q ready "$W/srv.log" 2>/dev/null && grep -q ready "$W/dns.log" && break; sleep 0.05; done

# The project that depends on the tree.
mkdir -p "$W/proj/src" "$W/proj/.cargo"
printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\ntinydep = { version = "0.1", registry = "mirror" }\n' >"$W/proj/Cargo.toml"
: >"$W/proj/src/lib.rs"
printf '[registries.mirror]\nindex = "%s"\n' "$INDEX" >"$W/proj/.cargo/config.toml"

mkdir -p "$W/roles.local/build"
cat >"$W/roles.local/build/role.yaml" <<YAML
schema: 1
role: build
level: L1
brief: brief.md
kind: workflow
identity:
  board_name: airlock:build
  key_store: github
writes:
  repos: []
tools: {}
budget:
  runs_per_week: 100000
  minutes_per_run: 30
YAML
printf '# Build\n\nFetch the dependencies.\n' >"$W/roles.local/build/brief.md"
config() { # $1: the crates destination's extra keys
  cat >"$W/airlock.yaml" <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
egress:
  nameservers: ["127.0.0.1:$DNSPORT"]
  destinations:
    crates: {hosts: [$HOST], ca_file: $W/ca.pem$1}
  grants: {build: [crates]}
instances:
  bench: {role: build, uid: $UIDN}
YAML
}

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

direct() {
  mkdir -p "/etc/netns/$NS"
  printf '%s %s\n' "$PUB" "$HOST" >"/etc/netns/$NS/hosts"
  for _ in $(seq 1 "$R"); do
    rm -rf "$W/direct" && cp -r "$W/proj" "$W/direct"
    t=$(date +%s%N)
    (cd "$W/direct" && ip netns exec "$NS" env -i PATH=/usr/local/bin:/usr/bin:/bin \
      HOME="$W/direct/home" CARGO_HTTP_CAINFO="$W/ca.pem" /usr/local/bin/cargo vendor -q >/dev/null)
    ms "$t"
  done | median
}

jailed() {
  for _ in $(seq 1 "$R"); do
    rm -rf "$W/ws" && cp -r "$W/proj" "$W/ws" && chown -R "$UIDN:$UIDN" "$W/ws"
    t=$(date +%s%N)
    "$BIN/airlockctl" --config "$W/airlock.yaml" launch build --instance bench --standalone \
      --wait --workspace "$W/ws" -- /bin/sh -c 'rm -rf "$HOME/.cargo" && exec cargo vendor -q' \
      >/dev/null 2>"$W/run.err" || { cat "$W/run.err" >&2; exit 1; }
    ms "$t"
    [ -f "$W/ws/vendor/tinydep/Cargo.toml" ] || { echo "nothing vendored" >&2; exit 1; }
  done | median
}

empty() {
  for _ in $(seq 1 "$R"); do
    t=$(date +%s%N)
    "$BIN/airlockctl" --config "$W/airlock.yaml" launch build --instance bench --standalone \
      --wait -- /bin/true >/dev/null 2>&1
    ms "$t"
  done | median
}

echo "== cargo vendor of tinydep and $((LEAVES + 1)) leaf crates, median of $R, ms (a run's own start and end included)"
echo "straight (registry's namespace):      $(direct)"
config ""
echo "a run doing nothing (its own cost):   $(empty)"
echo "through a granted tunnel:             $(jailed)"
config ", methods: [GET, HEAD]"
echo "through a checked destination:        $(jailed)"
