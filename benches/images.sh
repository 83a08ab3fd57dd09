#!/usr/bin/env bash
# Images (release build, as root), three figures:
#  1. import: `airlockctl image import` of an OCI layout the script builds with umoci (busybox
#     and a copy of the host's Python standard library, tens of MB), store emptied before
#     each (`image rm`), against `skopeo copy oci:… oci:…` of the same layout (a copy with
#     digests checked, no unpacking): wall time and MB/s of the layout's blobs.
#  2. pull: `airlockctl image pull` of that image from Debian's docker-registry on loopback
#     (TLS from a CA made here; registry.example resolved by a hosts file bound over
#     /etc/hosts in a mount namespace of the two clients alone), store emptied before each,
#     against `skopeo copy docker://… oci:…` of the same reference.
#  3. launch: `airlockctl launch code --standalone --wait -- /bin/true` with the command
#     side rooted in that image and without (the host's system folders), alternated run by
#     run so drift hits both alike. Target (issue 46): the image within 1.1x.
# N runs of each (default 20). AIRLOCK_BIN: the binaries to measure (another build);
# else this tree's release build.
set -euo pipefail
N=${N:-20}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/images.sh: run as root" >&2; exit 1; }
for p in umoci skopeo busybox docker-registry openssl; do
  command -v "$p" >/dev/null || { echo "benches/images.sh: $p is missing: run scripts/install-deps.sh" >&2; exit 1; }
done
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
W=$(mktemp -d /var/tmp/airlock-imagebench.XXXXXX)
chmod 0755 "$W"
REG=
trap 'kill $REG 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT

# The image: busybox applets and the host's Python standard library as plain files.
R="$W/root"
mkdir -p "$R/bin" "$R/usr/lib" "$R/etc"
cp /bin/busybox "$R/bin/busybox"
for a in sh cat ls true echo; do ln -s busybox "$R/bin/$a"; done
PYLIB=$(ls -d /usr/lib/python3.[0-9]* | head -1)
cp -a "$PYLIB" "$R/usr/lib/"
printf 'ID=airlock-bench-image\n' >"$R/usr/lib/os-release"
ln -s ../usr/lib/os-release "$R/etc/os-release"
L="$W/layout"
umoci init --layout "$L"
umoci new --image "$L:t"
umoci unpack --image "$L:t" "$W/bundle" >/dev/null
cp -a "$R/." "$W/bundle/rootfs/"
umoci repack --image "$L:t" "$W/bundle" >/dev/null
umoci config --image "$L:t" --config.env PATH=/bin:/usr/bin >/dev/null
rm -rf "$W/bundle"
blob_bytes=$(du -sb "$L/blobs" | cut -f1)
tree_bytes=$(du -sb "$R" | cut -f1)

mkdir -p "$W/roles.local/code"
cp roles/code/brief.md "$W/roles.local/code/"
sed -e 's/^\(  runs_per_week:\) .*/\1 100000/' -e 's/key_store: airlock/key_store: github/' \
  roles/code/role.yaml >"$W/roles.local/code/role.yaml"
base() {
  cat <<YAML
roles: [$PWD/roles, $W/roles.local]
policies: $PWD/policies
state_dir: $W/state
socket: $W/airlockd.sock
uid_range: 1880098000-1880098999
limits: {workspace: null}
images: {bench: {path: $L}}
instances:
  b0: {role: code, uid: 1880098500}
YAML
}
base >"$W/plain.yaml"
{ base; echo "environments: {code: bench}"; } >"$W/image.yaml"
CTL="$BIN/airlockctl"

ms() { echo $(( ($2 - $1) / 1000000 )); }
imports=(); copies=()
for i in $(seq 1 "$N"); do
  "$CTL" --config "$W/plain.yaml" image rm bench >/dev/null 2>&1 || true
  t0=$(date +%s%N)
  "$CTL" --config "$W/plain.yaml" image import "$L" --name bench >/dev/null
  t1=$(date +%s%N)
  rm -rf "$W/copy"
  t2=$(date +%s%N)
  skopeo --insecure-policy copy -q "oci:$L:t" "oci:$W/copy:t" >/dev/null
  t3=$(date +%s%N)
  imports+=("$(ms "$t0" "$t1")"); copies+=("$(ms "$t2" "$t3")")
done

# The registry: TLS on loopback, anonymous, the image pushed once.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=airlock-bench-ca \
  -addext basicConstraints=critical,CA:TRUE -keyout "$W/ca.key" -out "$W/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=registry.example -keyout "$W/leaf.key" \
  -out "$W/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:registry.example\n' >"$W/san"
openssl x509 -req -in "$W/leaf.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial \
  -days 2 -extfile "$W/san" -out "$W/leaf.pem" 2>/dev/null
chmod 0644 "$W/ca.pem"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$W/registry.yml" <<YAML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $W/registry}}
http: {addr: 127.0.0.1:$PORT, secret: bench, tls: {certificate: $W/leaf.pem, key: $W/leaf.key}}
YAML
docker-registry serve "$W/registry.yml" >/dev/null 2>&1 &
REG=$!
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
printf '127.0.0.1 localhost registry.example\n' >"$W/hosts"
mkdir -p "$W/certs"; cp "$W/ca.pem" "$W/certs/ca.crt"
hosts() { unshare -m --propagation private -- /bin/sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$W/hosts" "$@"; }
REF="registry.example:$PORT/bench/image:1"
hosts skopeo --insecure-policy copy -q --dest-cert-dir "$W/certs" "oci:$L:t" "docker://$REF"
sed -e "s|^state_dir: .*|state_dir: $W/state-pull|" "$W/plain.yaml" >"$W/pull.yaml"
echo "registries: {'registry.example:$PORT': {ca_file: $W/ca.pem}}" >>"$W/pull.yaml"
pulls=(); spulls=()
for i in $(seq 1 "$N"); do
  "$CTL" --config "$W/pull.yaml" image rm pulled >/dev/null 2>&1 || true
  t0=$(date +%s%N)
  hosts "$CTL" --config "$W/pull.yaml" image pull "$REF" --name pulled >/dev/null
  t1=$(date +%s%N)
  rm -rf "$W/spull"
  t2=$(date +%s%N)
  hosts skopeo --insecure-policy copy -q --src-cert-dir "$W/certs" "docker://$REF" "oci:$W/spull:t" >/dev/null
  t3=$(date +%s%N)
  pulls+=("$(ms "$t0" "$t1")"); spulls+=("$(ms "$t2" "$t3")")
done

with=(); without=()
for i in $(seq 1 "$N"); do
  for which in image plain; do
    t0=$(date +%s%N)
    "$CTL" --config "$W/$which.yaml" launch code --instance b0 --standalone --wait -- /bin/true \
      >/dev/null 2>"$W/err" || { echo "benches/images.sh: the $which launch failed:" >&2; cat "$W/err" >&2; exit 1; }
    t1=$(date +%s%N)
    if [ "$which" = image ]; then with+=("$(ms "$t0" "$t1")"); else without+=("$(ms "$t0" "$t1")"); fi
  done
done

python3 - "$blob_bytes" "$tree_bytes" "${imports[*]}" "${copies[*]}" "${with[*]}" "${without[*]}" "${pulls[*]}" "${spulls[*]}" <<'PY'
import sys, statistics as st
blob, tree = int(sys.argv[1]), int(sys.argv[2])
imp, cop, w, wo, pul, spul = ([int(x) for x in a.split()] for a in sys.argv[3:9])
p = lambda xs: f"p50 {st.median(xs):7.1f}  min {min(xs):7.1f}  max {max(xs):7.1f}"
print(f"image: {blob/1e6:.1f} MB of blobs, {tree/1e6:.1f} MB unpacked; {len(imp)} runs each")
print(f"image import (ms)          {p(imp)}   {blob/1e6/(st.median(imp)/1000):6.1f} MB/s")
print(f"skopeo copy oci->oci (ms)  {p(cop)}   {blob/1e6/(st.median(cop)/1000):6.1f} MB/s")
print(f"image pull (ms)            {p(pul)}   {blob/1e6/(st.median(pul)/1000):6.1f} MB/s")
print(f"skopeo copy docker->oci    {p(spul)}   {blob/1e6/(st.median(spul)/1000):6.1f} MB/s")
print(f"launch with image (ms)     {p(w)}")
print(f"launch without (ms)        {p(wo)}")
print(f"ratio with/without (p50)   {st.median(w)/st.median(wo):.3f}  (target <= 1.1)")
PY
