#!/usr/bin/env bash
# Jail setup cost, side by side with bubblewrap: N runs of /bin/true each through
#  (1) airlock-jail alone (spec on stdin: namespaces, rootfs, identity, Landlock, seccomp),
#  (2) the whole `airlockctl launch --standalone --wait` (config, instance, run dir, jail),
#  (3) bwrap --unshare-all with a comparable read-only /usr view;
# then (2) and (3) spaced out, the jail's setup alone, and its run part for a helper
# started ahead.
# Prints hyperfine's table, then medians and ratios. Must run as root.
set -euo pipefail
N=${N:-200}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "benches/jail.sh: run as root" >&2; exit 1; }

need() { command -v "$1" >/dev/null || { apt-get install -y "$2" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$2" >/dev/null; }; }; }
need bwrap bubblewrap
need hyperfine hyperfine

# AIRLOCK_BIN: the binaries to measure (another build, side by side); else this tree's.
if [ -n "${AIRLOCK_BIN:-}" ]; then
  BIN="$AIRLOCK_BIN"
else
  cargo build --release --bins >/dev/null
  BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi

W=$(mktemp -d /tmp/airlock-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
UID_=1880099900
mkdir -p "$W/home" "$W/ws"
# The shipped roles (budgets raised, or runs_per_week stops the benchmark) and policies:
# the launch goes through the same catalog, budgets and ledger as production.
cp -R roles "$W/roles"
sed -i 's/^\(  runs_per_week:\) .*/\1 100000/' "$W/roles"/*/role.yaml
printf 'roles: [%s/roles]\npolicies: %s/policies\nstate_dir: state\ninstances:\n  bench: {role: code, uid: %s}\n' "$W" "$PWD" "$UID_" >"$W/airlock.yaml"
chown "$UID_:$UID_" "$W/home" "$W/ws"
CG=""
if [ -d /sys/fs/cgroup/unified ]; then CG=null; fi
cat >"$W/spec.json" <<JSON
{"run_id":"r-bench","role":"code","instance":"bench","uid":$UID_,"gid":$UID_,
 "home":"$W/home","workspace":"$W/ws","argv":["/bin/true"],"env":[],"hide":["$W/state"],
 "connect_tcp":[],"limits":{"max_procs":256,"memory_bytes":null,"tmp_bytes":67108864,
 "shm_bytes":67108864,"nofile":1024},"cgroup_parent":null}
JSON

# Fail loudly if any variant does not work before timing it.
"$BIN/airlock-jail" <"$W/spec.json" >/dev/null || { echo "jail.sh: airlock-jail fails" >&2; exit 1; }
"$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait -- /bin/true >/dev/null 2>&1 \
  || { echo "jail.sh: the standalone launch fails:" >&2; "$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait -- /bin/true; exit 1; }
BWRAP=(bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --ro-bind /usr /usr
       --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64
       --proc /proc --dev /dev /bin/true)
"${BWRAP[@]}"

# Through a shell for all three (the spec goes in by redirection), so shell startup
# cost is the same in every row.
hyperfine --warmup 10 --runs "$N" --export-json "$W/h.json" \
  -n airlock-jail "$BIN/airlock-jail --status-fd 2 < $W/spec.json 2>/dev/null" \
  -n airlockctl-launch "$BIN/airlockctl --config $W/airlock.yaml launch code --instance bench --standalone --wait -- /bin/true 2>/dev/null" \
  -n bwrap "${BWRAP[*]}"

python3 - "$W/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
b = r["bwrap"]["median"]
print(f"{'variant':20} {'median ms':>10} {'mean ms':>9} {'vs bwrap':>9}")
for k, x in r.items():
    print(f"{k:20} {x['median']*1e3:10.2f} {x['mean']*1e3:9.2f} {x['median']/b:8.2f}x")
PY

# Launches spaced out, as a sysadmin's are (the loop above keeps kernel state warm: a run
# cgroup moved into right after another move skips the RCU grace period a first move waits
# for). SPACED launches of each, 0.3 s apart, interleaved.
for _ in $(seq 1 "${SPACED:-20}"); do
  for v in launch bwrap; do
    sleep 0.3
    t0=$(date +%s%N)
    if [ "$v" = launch ]; then
      "$BIN/airlockctl" --config "$W/airlock.yaml" launch code --instance bench --standalone --wait -- /bin/true >/dev/null 2>&1
    else
      "${BWRAP[@]}"
    fi
    echo "$v $(( ($(date +%s%N) - t0) / 1000 ))"
  done
done | python3 -c '
import statistics, sys
d = {}
for l in sys.stdin:
    k, us = l.split()
    d.setdefault(k, []).append(int(us))
a, b, n = statistics.median(d["launch"]), statistics.median(d["bwrap"]), len(d["bwrap"])
print(f"spaced out (0.3 s apart, {n} each): launch --standalone median {a/1000:.2f} ms, bwrap {b/1000:.2f} ms, {a/b:.2f}x")'

# Every run above left a network namespace for the kernel to tear down in the background;
# let that backlog drain so it does not eat into the runs measured next.
sleep "${SETTLE:-5}"

# The jail's own setup, as the helper measures it: from its start to the agent's exec
# (namespaces, cgroups, root, identity, Landlock, seccomp). Target: at most 2 ms median.
for _ in $(seq 1 "$N"); do
  "$BIN/airlock-jail" --status-fd 2 <"$W/spec.json" 2>&1 >/dev/null | sed -n 's/.*setup: \([0-9]*\) us.*/\1/p'
done | python3 -c '
import statistics, sys
v = sorted(int(x) for x in sys.stdin if x.strip())
if not v:
    sys.exit("jail.sh: the helper reported no setup time")
print(f"jail setup (helper start to exec of /bin/true): median {statistics.median(v)/1000:.2f} ms, p90 {v[int(len(v)*0.9)]/1000:.2f} ms over {len(v)} runs")'

# A helper started ahead of its run (airlockd's standby, a standalone launch's early
# start) has built the common part of the jail when the spec comes: what is left is the
# run's part (its /etc files, /tmp, home, workspace, cgroups, identity, Landlock, seccomp).
sleep "${SETTLE:-5}"
for _ in $(seq 1 "$N"); do
  (sleep 0.05; cat "$W/spec.json") | "$BIN/airlock-jail" --status-fd 2 --run-id r-bench 2>&1 >/dev/null \
    | sed -n 's/.*(\([0-9]*\) us from the spec.*/\1/p'
done | python3 -c '
import statistics, sys
v = sorted(int(x) for x in sys.stdin if x.strip())
if not v:
    sys.exit("jail.sh: the helper reported no spec-to-exec time")
print(f"run part of the setup (spec arriving 50 ms after the helper started, to exec): median {statistics.median(v)/1000:.2f} ms, p90 {v[int(len(v)*0.9)]/1000:.2f} ms over {len(v)} runs")'
